"""Executable runbooks: markdown under ``include/runbooks/``, filled with a pipeline's values.

Every step a person runs is a ``joinshift`` command in a fenced ``sh`` block, one per line;
``<placeholders>`` (``<day>``, ``<cutover>``, ``<new spec>``) are what the operator chooses, and a
trailing ``# exit N`` states an expected non-zero exit code (e.g. ``plan`` answering "replay
needed" with 3). :func:`commands` extracts them, so tests run every runbook end to end and
``joinshift runbook NAME --commands`` prints just what to run.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from jobs.settings import PROJECT_ROOT

RUNBOOKS = PROJECT_ROOT / "include" / "runbooks"

_BLOCK = re.compile(r"```sh\n(.*?)```", re.S)
_EXIT = re.compile(r"#\s*exit\s+(\d+)")
_PLACEHOLDER = re.compile(r"<([a-z][a-z ]*)>")


@dataclass(frozen=True)
class RunbookCommand:
    line: str  # as written, placeholders and all
    expect_exit: int

    @property
    def placeholders(self) -> list[str]:
        return _PLACEHOLDER.findall(self.line)

    def argv(self, fill: dict[str, str]) -> list[str]:
        """The command's arguments after ``joinshift``, placeholders filled from ``fill``."""
        missing = [p for p in self.placeholders if p not in fill]
        if missing:
            raise KeyError(f"no value for placeholder(s) {', '.join(f'<{m}>' for m in missing)} in: {self.line}")
        text = _PLACEHOLDER.sub(lambda m: fill[m.group(1)], self.line)
        words = shlex.split(text)
        if words[:1] != ["joinshift"]:
            raise ValueError(f"runbook commands start with `joinshift`: {self.line}")
        return words[1:]


def names() -> list[str]:
    return sorted(p.stem for p in RUNBOOKS.glob("*.md"))


def values(spec_file: str, spec, s=None) -> dict:
    """The pipeline's current values a runbook refers to (``spec`` is ``spec_file`` loaded)."""
    from jobs.storage.tables import Tables

    t = Tables.of(spec, s)
    return {
        "spec_file": spec_file,
        "pipeline": spec.pipeline,
        "window": spec.window.label(),
        "left_topic": spec.left.topic,
        "right_topic": spec.right.topic,
        "checkpoint": t.checkpoint(),
        "output_table": t.output("stream"),
        "baseline": spec.accuracy.baseline,
        "tolerance_pp": spec.accuracy.tolerance_pp,
        "days_required": spec.cutover.days_required,
    }


def render(name: str, spec_file: str, s=None) -> str:
    """The runbook filled with the pipeline's values, plus the streaming join's last progress
    (batch, watermark, last good offsets) when there is one."""
    if name not in names():
        raise ValueError(f"runbook {name!r} does not exist; choose one of: {', '.join(names())}")
    from jobs.spec import load_spec, spec_path
    from jobs.storage.progress import JOIN_QUERY, batch_watermark, read_progress
    from jobs.storage.tables import Tables

    spec = load_spec(spec_path(spec_file))
    text = (RUNBOOKS / f"{name}.md").read_text().format_map(values(spec_file, spec, s))
    progress = read_progress(Tables.of(spec, s).progress_log(JOIN_QUERY))
    if progress:
        last = progress[-1]
        text += (
            "\n---\nLast progress of the streaming join: batch {b} at {ts}, watermark {wm}, offsets {off}\n"
        ).format(
            b=last.get("batchId"),
            ts=last.get("timestamp"),
            wm=batch_watermark(last),
            off=json.dumps([src.get("endOffset") for src in last.get("sources", [])]),
        )
    return text


def commands(text: str) -> list[RunbookCommand]:
    """The ``joinshift`` commands of a (rendered) runbook, in order."""
    out = []
    for block in _BLOCK.findall(text):
        for raw in block.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            m = _EXIT.search(line)
            out.append(RunbookCommand(line[: m.start()].rstrip() if m else line, int(m.group(1)) if m else 0))
    return out

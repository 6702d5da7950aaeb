"""Where a bench's seconds go: Spark's task CPU per stage (its UI's REST API) and DuckDB's time per
operator (its JSON profile), in the same few parts for both engines.

Spark's UI must be on in the bench's process (``JOINSHIFT_SPARK_UI=true`` before ``get_spark``,
``spark.ui.port`` 0); nothing here is used by the product.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

#: DuckDB's operator types per part; any other operator counts as "other".
DUCKDB_PARTS = {
    "read": ("TABLE_SCAN",),
    "join": ("HASH_JOIN", "PIECEWISE_MERGE_JOIN", "IE_JOIN", "NESTED_LOOP_JOIN", "FILTER", "PROJECTION"),
    "write": ("COPY_TO_FILE",),
}


class StageCpu:
    """Task CPU seconds of the Spark stages an action ran (Spark UI REST API)."""

    def __init__(self, spark):
        self.base = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"

    def _stages(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.base}/stages", timeout=30) as r:
            return json.load(r)

    def run(self, fn: Callable[[], Any]) -> tuple[float, list[dict], Any]:
        """(wall seconds, the stages ``fn`` ran, fn's result)."""
        before = {s["stageId"] for s in self._stages()}
        t0 = time.perf_counter()
        result = fn()
        wall = time.perf_counter() - t0
        new: list[dict] = []
        for _ in range(50):  # the status store is fed asynchronously: wait until the stages are done
            new = [s for s in self._stages() if s["stageId"] not in before]
            if new and all(s["status"] in ("COMPLETE", "SKIPPED", "FAILED") for s in new):
                break
            time.sleep(0.1)
        return wall, new, result

    def measure(self, fn: Callable[[], Any]) -> tuple[float, float, Any]:
        """(wall seconds, task CPU seconds, fn's result)."""
        wall, stages, result = self.run(fn)
        return wall, sum(s.get("executorCpuTime", 0) for s in stages) / 1e9, result


def spark_parts(stages: Iterable[dict]) -> dict[str, float] | None:
    """Task CPU seconds of a shuffled join's stages in three parts: ``read`` (stages that write a
    shuffle: each side read and shuffled), ``join`` (stages that read one: the join and whatever
    follows it in that stage, e.g. the write) and ``other`` (the rest: the product's checks, Delta's
    log). None if no stage read a shuffle: a broadcast join reads, joins and writes in one stage,
    which no stage split can take apart."""
    out = {"read": 0.0, "join": 0.0, "other": 0.0}
    shuffled = False
    for s in stages:
        if s.get("status") == "SKIPPED":
            continue
        shuffled = shuffled or bool(s.get("shuffleReadBytes", 0))
        part = "read" if s.get("shuffleWriteBytes", 0) else "join" if s.get("shuffleReadBytes", 0) else "other"
        out[part] += s.get("executorCpuTime", 0) / 1e9
    return {k: round(v, 2) for k, v in out.items()} if shuffled else None


def duckdb_parts(profile: dict) -> dict[str, float]:
    """Seconds per part from DuckDB's JSON profile (``PRAGMA enable_profiling = 'json'``): each
    operator's ``timing``, summed over its threads, by :data:`DUCKDB_PARTS`; ``total`` is the
    query's own CPU time."""
    part_of = {t: p for p, types in DUCKDB_PARTS.items() for t in types}
    out = {"read": 0.0, "join": 0.0, "write": 0.0, "other": 0.0}

    def walk(op: dict) -> None:
        if "type" in op:
            out[part_of.get(op["type"], "other")] += float(op.get("timing", 0.0))
        for child in op.get("children", []):
            walk(child)

    for op in profile.get("operator", []):
        walk(op)
    out["total"] = float(profile.get("query", {}).get("cpu_time", sum(out.values())))
    return out

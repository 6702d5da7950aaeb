"""Restart planning: each kind of spec change gets the right checkpoint decision and a reason."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from jobs.spec import parse_spec
from jobs.spec.plan import (
    EXIT_FRESH,
    EXIT_INVALID,
    EXIT_OK,
    FRESH,
    NEEDS_FRESH,
    NONE,
    REPORT_ONLY,
    REUSE,
    REUSE_OK,
    REUSE_WARN,
    plan,
)


@pytest.fixture()
def base_data(demo_spec_data) -> dict:
    return demo_spec_data()


def changed(base_data: dict, edit) -> tuple:
    data = copy.deepcopy(base_data)
    edit(data)
    return parse_spec(base_data), parse_spec(data)


def _set(*path_and_value):
    *path, value = path_and_value

    def edit(d):
        for p in path[:-1]:
            d = d.setdefault(p, {})
        d[path[-1]] = value

    return edit


def _add_column(side, name, typ):
    def edit(d):
        d[side]["schema"][name] = typ

    return edit


def _rename_key(d):
    # join on other string columns than session_id: same types, other equi-join columns
    d["left"]["key"] = ["query"]
    d["right"]["key"] = ["action"]


# (edit, field that must be reported, its effect, the plan's action)
CASES = {
    "window.lower": (_set("window", "lower", "-4h"), "window.lower", NEEDS_FRESH, FRESH),
    "window.upper": (_set("window", "upper", "+1h"), "window.upper", NEEDS_FRESH, FRESH),
    "left.key": (_rename_key, "left.key", NEEDS_FRESH, FRESH),
    "join.type": (_set("join", "type", "inner"), "join.type", NEEDS_FRESH, FRESH),
    "join.predicate": (
        _set("join", "predicate", "abs(l.result_count - r.position) <= 10"),
        "join.predicate",
        NEEDS_FRESH,
        FRESH,
    ),
    "schema add nullable column": (_add_column("right", "device", "string"), "right.schema.device", NEEDS_FRESH, FRESH),
    "schema retype": (_set("right", "schema", "position", "long"), "right.schema.position", NEEDS_FRESH, FRESH),
    "left.topic": (_set("left", "topic", "search_responses_v2"), "left.topic", NEEDS_FRESH, FRESH),
    "right.event_time": (
        lambda d: (d["right"]["schema"].update(client_time="timestamp"), d["right"].update(event_time="client_time")),
        "right.event_time",
        NEEDS_FRESH,
        FRESH,
    ),
    "output_table": (_set("output_table", "search_sessions_joined_v2"), "output_table", NEEDS_FRESH, FRESH),
    "pipeline": (_set("pipeline", "search_sessions_v2"), "pipeline", NEEDS_FRESH, FRESH),
    "join.cardinality": (_set("join", "cardinality", "1-to-1"), "join.cardinality", REUSE_WARN, REUSE),
    "right.watermark_delay": (_set("right", "watermark_delay", "3h"), "right.watermark_delay", REUSE_WARN, REUSE),
    "shuffle_partitions": (
        _set("streaming", "shuffle_partitions", 8),
        "streaming.shuffle_partitions",
        REUSE_WARN,
        REUSE,
    ),
    "streaming.state_store": (
        _set("streaming", "state_store", "memory"),
        "streaming.state_store",
        REUSE_WARN,
        REUSE,
    ),
    "streaming.engine": (_set("streaming", "engine", "paced"), "streaming.engine", NEEDS_FRESH, FRESH),
    "streaming.paced": (
        _set("streaming", "paced", "per_key_cap", 100),
        "streaming.paced.per_key_cap",
        REUSE_WARN,
        REUSE,
    ),
    "streaming.paced.shards": (
        _set("streaming", "paced", "shards", 64),
        "streaming.paced.shards",
        NEEDS_FRESH,
        FRESH,
    ),
    "timezone": (_set("timezone", "America/Los_Angeles"), "timezone", REUSE_WARN, REUSE),
    "timestamp_validity": (
        _set("timestamp_validity", "max_past", "3d"),
        "timestamp_validity.max_past",
        REUSE_WARN,
        REUSE,
    ),
    "unknown_fields": (_set("unknown_fields", "ignore"), "unknown_fields", REUSE_WARN, REUSE),
    "trigger_interval": (_set("streaming", "trigger_interval", "30s"), "streaming.trigger_interval", REUSE_OK, REUSE),
    "max_offsets_per_trigger": (
        _set("streaming", "max_offsets_per_trigger", 5000),
        "streaming.max_offsets_per_trigger",
        REUSE_OK,
        REUSE,
    ),
    "left.table": (_set("left", "table", "search_responses_v2"), "left.table", REUSE_OK, REUSE),
    "accuracy": (_set("accuracy", "tolerance_pp", 0.5), "accuracy.tolerance_pp", REPORT_ONLY, NONE),
    "left.batch_table": (
        _set("left", "batch_table", {"path": "/warehouse/search_responses", "format": "parquet"}),
        "left.batch_table",
        REPORT_ONLY,
        NONE,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_field_class_gets_its_action_and_a_reason_naming_the_field(base_data, case):
    edit, field, effect, action = CASES[case]
    old, new = changed(base_data, edit)
    result = plan(old, new)
    assert result.action == action, result.render()
    by_field = {c.field: c for c in result.changes}
    assert field in by_field, f"{field} not reported; got {list(by_field)}"
    change = by_field[field]
    assert change.effect == effect
    assert field in change.reason
    assert len(change.reason) > 40  # a real explanation, not a label
    assert result.exit_code == (EXIT_FRESH if action == FRESH else EXIT_OK)


def test_no_change_is_none(base_data):
    spec = parse_spec(base_data)
    result = plan(spec, spec)
    assert result.action == NONE and result.changes == [] and result.exit_code == EXIT_OK
    assert "none" in result.render()
    assert result.to_dict() == {"action": "none", "exit_code": 0, "changes": [], "steps": ["Nothing changed."]}


def test_reasons_cite_spark_rules_and_the_paper(base_data):
    result = plan(*changed(base_data, _add_column("right", "device", "string")))
    reason = result.changes[0].reason
    assert "column added" in reason and "state schema" in reason and "§4.2" in reason
    topic = plan(*changed(base_data, _set("left", "topic", "other"))).changes[0].reason
    assert "not allowed" in topic
    rate = plan(*changed(base_data, _set("streaming", "max_offsets_per_trigger", 10))).changes[0].reason
    assert "rate" in rate and "allowed" in rate


def test_reordered_columns_need_a_fresh_checkpoint(base_data):
    def reorder(d):
        d["left"]["schema"] = dict(reversed(list(d["left"]["schema"].items())))

    result = plan(*changed(base_data, reorder))
    assert result.action == FRESH
    (change,) = result.changes
    assert change.field == "left.schema" and "order" in change.reason


def test_the_most_disruptive_change_wins_and_every_change_is_listed(base_data):
    def several(d):
        d["streaming"]["trigger_interval"] = "10s"
        d["left"]["watermark_delay"] = "20m"
        d["window"]["upper"] = "+45m"
        d["accuracy"]["tolerance_pp"] = 3

    result = plan(*changed(base_data, several))
    assert result.action == FRESH
    assert {c.field for c in result.changes} == {
        "streaming.trigger_interval",
        "left.watermark_delay",
        "window.upper",
        "accuracy.tolerance_pp",
    }
    assert [c.field for c in result.blocking] == ["window.upper"]
    assert [c.field for c in result.warnings] == ["left.watermark_delay"]
    text = result.render()
    for c in result.changes:
        assert c.field in text
    assert "joinshift replay --spec <proposed spec> --cutover <T>" in text and ".bak-<UTC>" in text
    d = result.to_dict()
    assert json.loads(json.dumps(d)) == d  # JSON-ready
    assert d["action"] == FRESH and d["exit_code"] == EXIT_FRESH and len(d["changes"]) == 4


def test_cardinality_reason_explains_why_state_is_reusable(base_data):
    result = plan(*changed(base_data, _set("join", "cardinality", "1-to-1")))
    reason = result.changes[0].reason
    assert "sink" in reason and "MERGE" in reason and "already written" in reason


# ------------------------------------------------------------------------------- CLI


def _write(path: Path, data: dict) -> str:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def main(argv: list[str]) -> int:
    """``joinshift plan ...``: its exit code, whether the command returns it or exits with it."""
    from jobs.cli import main as cli

    try:
        return cli(["plan", *argv])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def test_cli_exit_codes(base_data, tmp_path, capsys):
    deployed = _write(tmp_path / "deployed.yaml", base_data)
    same = _write(tmp_path / "same.yaml", base_data)
    reuse = copy.deepcopy(base_data)
    reuse["streaming"]["trigger_interval"] = "30s"
    fresh = copy.deepcopy(base_data)
    fresh["window"]["lower"] = "-6h"

    assert main(["--deployed", deployed, "--proposed", same]) == EXIT_OK
    assert "Restart plan: none" in capsys.readouterr().out

    assert main(["--deployed", deployed, "--proposed", _write(tmp_path / "reuse.yaml", reuse)]) == EXIT_OK
    assert "reuse_checkpoint" in capsys.readouterr().out

    rc = main(["--deployed", deployed, "--proposed", _write(tmp_path / "fresh.yaml", fresh), "--json"])
    assert rc == EXIT_FRESH == 3
    out = json.loads(capsys.readouterr().out)
    assert out["action"] == "fresh_checkpoint_and_replay"
    assert out["changes"][0]["field"] == "window.lower" and out["changes"][0]["old"] == "-3h"


def test_cli_invalid_spec_names_the_file_and_the_field(base_data, tmp_path, capsys):
    deployed = _write(tmp_path / "deployed.yaml", base_data)
    bad = copy.deepcopy(base_data)
    bad["join"]["type"] = "full_outer"
    bad_file = _write(tmp_path / "bad.yaml", bad)
    assert main(["--deployed", deployed, "--proposed", bad_file]) == EXIT_INVALID
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "join.type" in err

    missing = str(tmp_path / "nope.yaml")
    assert main(["--deployed", missing, "--proposed", deployed]) == EXIT_INVALID
    assert "nope.yaml" in capsys.readouterr().err


def test_the_heap_state_store_is_the_native_engines_only(base_data):
    """The paced engine's state is transformWithState's, which Spark keeps in RocksDB only: a spec
    asking for both is refused when read, naming the field and what to do."""
    from jobs.spec import SpecError, StateStore

    data = copy.deepcopy(base_data)
    data["streaming"]["state_store"] = "memory"
    assert parse_spec(data).streaming.state_store == StateStore.memory
    data["streaming"]["engine"] = "paced"
    with pytest.raises(SpecError, match=r"paced keeps its state in RocksDB.*streaming.state_store"):
        parse_spec(data)
    data["streaming"]["state_store"] = "disk"
    data["streaming"]["engine"] = "native"
    with pytest.raises(SpecError, match=r"state_store"):
        parse_spec(data)


def test_loaded_spec_files_compare_like_parsed_ones(demo_spec):
    spec = demo_spec
    assert plan(spec, spec.with_window(spec.window.lower, spec.window.upper)).action == NONE
    wider = spec.with_window(spec.window.lower, spec.window.upper * 2)
    assert plan(spec, wider).action == FRESH


def test_a_checkpoint_refuses_a_spec_it_cannot_continue(tmp_path, demo_spec):
    """The stream job's start-up guard applies the plan to the spec its checkpoint was built with."""
    from datetime import timedelta

    from jobs.steps.stream import CheckpointSpecMismatch, guard_checkpoint_spec
    from jobs.storage.checkpoints import SPEC_RECORD

    base = demo_spec
    cp = tmp_path / "checkpoints" / "stream_join"
    guard_checkpoint_spec(base, str(cp))  # a new checkpoint records its spec
    assert (cp / SPEC_RECORD).exists()
    narrower = base.model_copy(update={"window": base.window.model_copy(update={"lower": timedelta(hours=-1)})})
    guard_checkpoint_spec(narrower, str(cp))  # no committed batch yet: no state to protect
    guard_checkpoint_spec(base, str(cp))
    (cp / "commits").mkdir()
    (cp / "commits" / "0").write_text("v1\n{}\n")  # batch 0 committed: state exists now
    limited = base.model_copy(update={"streaming": base.streaming.model_copy(update={"max_offsets_per_trigger": 500})})
    guard_checkpoint_spec(limited, f"file:{cp}")  # a rate limit may change: reused, recorded
    assert '"max_offsets_per_trigger":500' in (cp / SPEC_RECORD).read_text().replace(" ", "")
    narrower = limited.model_copy(update={"window": narrower.window})
    with pytest.raises(CheckpointSpecMismatch, match=r"window\.lower.*joinshift replay"):
        guard_checkpoint_spec(narrower, str(cp))
    assert '"max_offsets_per_trigger":500' in (cp / SPEC_RECORD).read_text().replace(" ", "")  # unchanged


def test_a_paced_checkpoint_in_an_earlier_state_layout_is_refused_in_one_line(tmp_path, demo_spec):
    """A state the operator now keeps otherwise (per join key before shards; values as tuples before
    their JSON text), which it cannot read: the start-up guard says so and how to rebuild, instead
    of Spark's state schema error or rows of the wrong shape."""
    import json

    from jobs.spec import Engine
    from jobs.steps.stream import CheckpointSpecMismatch, guard_checkpoint_spec
    from jobs.storage.checkpoints import PACED_LAYOUT_RECORD, SPEC_RECORD

    paced = demo_spec.model_copy(update={"streaming": demo_spec.streaming.model_copy(update={"engine": Engine.paced})})
    cp = tmp_path / "checkpoints" / "stream_join"
    guard_checkpoint_spec(paced, str(cp))
    (cp / "commits").mkdir()
    (cp / "commits" / "0").write_text("v1\n{}\n")
    guard_checkpoint_spec(paced, str(cp))  # recorded with this layout: continues
    (cp / PACED_LAYOUT_RECORD).unlink()  # as the sharded operator of tuples left it
    with pytest.raises(CheckpointSpecMismatch, match=r"as Python tuples.*joinshift replay"):
        guard_checkpoint_spec(paced, str(cp))
    old = json.loads((cp / SPEC_RECORD).read_text())
    del old["streaming"]["paced"]["shards"]  # as the per-key operator recorded it
    (cp / SPEC_RECORD).write_text(json.dumps(old))
    with pytest.raises(CheckpointSpecMismatch, match=r"per join key.*joinshift replay"):
        guard_checkpoint_spec(paced, str(cp))


def test_every_field_a_spec_can_have_has_a_rule():
    """A field no rule names is planned as a fresh checkpoint and replay "to be safe", and the stream
    refuses to continue its checkpoint over it: each leaf of the spec model (and each optional part
    that can appear whole) must be named by a rule."""
    import typing

    from pydantic import BaseModel

    from jobs.spec import JoinSpec
    from jobs.spec.plan import _classify

    def models(t):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return [t]
        return [m for a in typing.get_args(t) for m in models(a)]

    def paths(model, prefix=""):
        for name, f in model.model_fields.items():
            path = f"{prefix}.{f.alias or name}" if prefix else (f.alias or name)
            parts = models(f.annotation)
            if not parts or f.default is None:  # a leaf, or a part that is absent until written
                yield path
            for m in parts:
                yield from paths(m, path)

    every = list(paths(JoinSpec))
    assert "left.batch_table" in every and "right.format.avro" in every and "window.lower" in every
    assert [p for p in every if not _classify(p)[0]] == []

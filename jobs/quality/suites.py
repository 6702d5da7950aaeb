"""Data-quality suites: Great Expectations 1.x suites built from the join spec, written to and
loaded from the file context under ``expectations/``. The gates that run them: :mod:`jobs.quality.gates`.

Four suites per spec (``build_suites(spec)``, keyed by kind):

``raw_left`` / ``raw_right`` (a landed table, the ds partition)
    every expected column is there (schema + ``_arrival_time``, ``_partition``, ``_offset``,
    ``ds``); schema columns, ``_arrival_time`` and ``ds`` have the spec's types; key columns,
    the id and the event time are non-null; the id is unique within the ds; the event time is
    within ``timestamp_validity`` of the arrival time; ``ds`` is the arrival date in the spec's
    zone.
``join_output`` (the stream's output, the ds partition; any variant with ``output_variant=``)
    exactly the output columns; left id non-null; no duplicate (left id, right id) pair;
    1-to-1: the left id is unique; left outer: where the right id is null every other right
    column is null too (a row condition per column, so a failure names the column);
    inner: the right id is never null.
``accuracy`` (one row built from the ``match_metrics`` rows of the ds)
    stream match rate − baseline match rate (``spec.accuracy.baseline``), in percentage
    points, is at least ``−accuracy.tolerance_pp``.

**Derived columns.** GX 1.24 has no "column A − column B within bounds" expectation (only
``expect_column_pair_values_A_to_be_greater_than_B``, without an offset), so before validating a
landed table the gate adds two columns and the suites check those:

* ``_gx_lateness_s`` = ``_arrival_time − event_time`` in seconds, expected in
  ``[−max_future, max_past]`` (exactly the landing job's ``event_time_too_old`` /
  ``event_time_in_future`` rules);
* ``_gx_arrival_ds`` = the arrival date in the spec's zone (:func:`jobs.records.arrival_ds`),
  expected equal to ``ds`` (``expect_column_pair_values_to_be_equal``).

The accuracy gate validates a one-row DataFrame (``ds``, ``stream_match_rate``,
``baseline_match_rate``, ``stream_minus_baseline_pp``) built from the metrics table.

**Files are the source of truth.** ``expectations/`` is a Great Expectations *file context*::

    expectations/great_expectations.yml             suites on disk; every other store in memory,
                                                     no data docs, analytics off
    expectations/expectations/<pipeline>/<kind>.json  suite "<pipeline>.<kind>" (GX maps the dot
                                                     in a suite name to a folder)

``joinshift quality write-suites --spec include/specs/search_sessions.yaml`` writes them
from :func:`build_suites` (without GX's random ids, so regenerating gives a clean diff);
:func:`run_gates` loads them through ``gx.get_context(mode="file")`` -- opening it reads only --
so a hand edit (a looser bound, an extra expectation) takes effect without a code change.
``check-suites`` (and the test suite) says when the files and the spec have drifted apart.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

from jobs.join.columns import ARRIVAL_TIME, OFFSET, PARTITION  # noqa: E402
from jobs.settings import PROJECT_ROOT  # noqa: E402
from jobs.spec import Cardinality, JoinSpec, JoinType, format_duration  # noqa: E402

if TYPE_CHECKING:
    from great_expectations.core import ExpectationSuite

#: The GX file context holding the suites (see the module docstring).
EXPECTATIONS_DIR = PROJECT_ROOT / "expectations"
KINDS = ("raw_left", "raw_right", "join_output", "accuracy")
RAW_KINDS = {"raw_left": "left", "raw_right": "right"}
#: Derived columns added before a landed table is validated.
LATENESS = "_gx_lateness_s"
ARRIVAL_DS = "_gx_arrival_ds"
#: The accuracy gate's one-row frame.
ACCURACY_DIFF = "stream_minus_baseline_pp"
#: Spec column types -> the Spark type names ``expect_column_values_to_be_of_type`` compares.
SPARK_TYPE_NAMES = {
    "string": "StringType",
    "int": "IntegerType",
    "long": "LongType",
    "double": "DoubleType",
    "boolean": "BooleanType",
    "timestamp": "TimestampType",
}

#: The file context's configuration: suites on disk, every other store in memory, no data docs.
CONTEXT_CONFIG = """\
# Great Expectations file context of joinshift's data-quality gates (jobs/quality/).
# Only the expectation suites live on disk (expectations/<pipeline>/<kind>.json); validation runs
# in an in-memory context, so nothing else is ever written here. Regenerate the suites from a spec:
#   joinshift quality write-suites --spec include/specs/<pipeline>.yaml
config_version: 4
analytics_enabled: false
progress_bars:
  globally: false
expectations_store_name: expectations_store
validation_results_store_name: validation_results_store
checkpoint_store_name: checkpoint_store
stores:
  expectations_store:
    class_name: ExpectationsStore
    store_backend:
      class_name: TupleFilesystemStoreBackend
      base_directory: expectations/
      suppress_store_backend_id: true
  validation_results_store:
    class_name: ValidationResultsStore
    store_backend:
      class_name: InMemoryStoreBackend
  checkpoint_store:
    class_name: CheckpointStore
    store_backend:
      class_name: InMemoryStoreBackend
  validation_definition_store:
    class_name: ValidationDefinitionStore
    store_backend:
      class_name: InMemoryStoreBackend
data_docs_sites: {}
"""


def _gx():
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx

    return gx


# ---------------------------------------------------------------- suites from the spec


def suite_name(spec: JoinSpec, kind: str) -> str:
    return f"{spec.pipeline}.{kind}"


def _raw_expectations(spec: JoinSpec, side: str) -> list:
    import great_expectations.expectations as gxe

    st = spec.side(side)
    v = spec.timestamp_validity
    past, future = int(v.max_past.total_seconds()), int(v.max_future.total_seconds())
    columns = [*st.schema_, ARRIVAL_TIME, PARTITION, OFFSET, "ds"]
    types = {**{c: SPARK_TYPE_NAMES[t] for c, t in st.schema_.items()}, ARRIVAL_TIME: "TimestampType", "ds": "DateType"}
    ex: list = [
        gxe.ExpectTableColumnsToMatchSet(
            column_set=columns,
            exact_match=False,
            description="the landed table has the schema columns, arrival time, Kafka position and ds",
        )
    ]
    ex += [gxe.ExpectColumnValuesToBeOfType(column=c, type_=t) for c, t in types.items()]
    ex += [gxe.ExpectColumnValuesToNotBeNull(column=k, description="join key") for k in st.key]
    ex += [
        gxe.ExpectColumnValuesToNotBeNull(column=st.id, description="event id"),
        gxe.ExpectColumnValuesToBeUnique(column=st.id, description="event id unique within the ds"),
        gxe.ExpectColumnValuesToNotBeNull(column=st.event_time, description="event time"),
        gxe.ExpectColumnValuesToBeBetween(
            column=LATENESS,
            min_value=-future,
            max_value=past,
            description=f"derived {LATENESS} = {ARRIVAL_TIME} - {st.event_time} in seconds: the event "
            f"time is within [arrival - {format_duration(v.max_past)}, "
            f"arrival + {format_duration(v.max_future)}] (timestamp_validity)",
        ),
        gxe.ExpectColumnPairValuesToBeEqual(
            column_A="ds",
            column_B=ARRIVAL_DS,
            description=f"derived {ARRIVAL_DS} = date of {ARRIVAL_TIME} in {spec.timezone}: ds is the arrival date",
        ),
    ]
    return ex


def _output_expectations(spec: JoinSpec) -> list:
    import great_expectations.expectations as gxe
    from great_expectations.expectations.row_conditions import Column as Cond

    from jobs.join.columns import col_name, side_columns, stream_output_columns

    left_id, right_id = col_name("left", spec.left.id), col_name("right", spec.right.id)
    ex: list = [
        gxe.ExpectTableColumnsToMatchSet(
            column_set=stream_output_columns(spec), exact_match=True, description="the join output's columns"
        ),
        gxe.ExpectColumnValuesToNotBeNull(column=left_id, description="every row has a left event"),
        gxe.ExpectCompoundColumnsToBeUnique(
            column_list=[left_id, right_id], description="no (left id, right id) pair twice"
        ),
    ]
    if spec.join.cardinality == Cardinality.one_to_one:
        ex.append(
            gxe.ExpectColumnValuesToBeUnique(column=left_id, description="1-to-1: at most one row per left event")
        )
    if spec.join.type == JoinType.left_outer:
        for c in side_columns(spec, "right"):
            name = col_name("right", c)
            if name != right_id:
                ex.append(
                    gxe.ExpectColumnValuesToBeNull(
                        column=name,
                        row_condition=Cond(right_id).is_null(),
                        description="left outer: an unmatched row has nulls on the whole right side",
                    )
                )
    else:
        ex.append(gxe.ExpectColumnValuesToNotBeNull(column=right_id, description="inner: every row matched"))
    return ex


def _accuracy_expectations(spec: JoinSpec) -> list:
    import great_expectations.expectations as gxe

    tol = spec.accuracy.tolerance_pp
    return [
        gxe.ExpectColumnValuesToBeBetween(
            column=ACCURACY_DIFF,
            min_value=-tol,
            description=f"stream match rate >= {spec.accuracy.baseline} match rate - {tol} pp",
        )
    ]


def build_suites(spec: JoinSpec) -> dict[str, ExpectationSuite]:
    """The spec's four suites, keyed by kind (``raw_left``, ``raw_right``, ``join_output``,
    ``accuracy``); each suite is named ``<pipeline>.<kind>``."""
    gx = _gx()
    built = {
        "raw_left": _raw_expectations(spec, "left"),
        "raw_right": _raw_expectations(spec, "right"),
        "join_output": _output_expectations(spec),
        "accuracy": _accuracy_expectations(spec),
    }
    return {
        kind: gx.ExpectationSuite(
            name=suite_name(spec, kind),
            expectations=ex,
            meta={"pipeline": spec.pipeline, "kind": kind},
            notes=f"Generated from the join spec of pipeline {spec.pipeline!r} by "
            "`joinshift quality write-suites`; the gates read this file, edit it freely "
            "(check-suites reports drift from the spec).",
        )
        for kind, ex in built.items()
    }


def suite_dict(suite: ExpectationSuite) -> dict:
    """A suite as stable JSON: GX's own serialization minus the ids and GX version it adds."""
    d: dict[str, Any] = suite.to_json_dict()  # GX types the values as any JSON; the layout is fixed
    d.pop("id", None)
    for e in d.get("expectations", []):
        e.pop("id", None)
    meta = dict(d.get("meta") or {})
    meta.pop("great_expectations_version", None)
    d["meta"] = meta
    return d


def _suite_path(root: Path, spec: JoinSpec, kind: str) -> Path:
    return root / "expectations" / spec.pipeline / f"{kind}.json"


def write_suites(spec: JoinSpec, root: str | Path = EXPECTATIONS_DIR) -> list[Path]:
    """Write the spec's suites (and the context's ``great_expectations.yml`` if missing)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    cfg = root / "great_expectations.yml"
    if not cfg.exists():
        cfg.write_text(CONTEXT_CONFIG)
    paths = []
    for kind, suite in build_suites(spec).items():
        p = _suite_path(root, spec, kind)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(suite_dict(suite), indent=2) + "\n")
        paths.append(p)
    return paths


def load_suites(
    spec: JoinSpec, root: str | Path = EXPECTATIONS_DIR, kinds: Sequence[str] = KINDS
) -> dict[str, ExpectationSuite]:
    """The spec's suites as stored in the file context at ``root``, keyed by kind."""
    root = Path(root)
    if not (root / "great_expectations.yml").is_file():
        raise FileNotFoundError(
            f"no Great Expectations context at {root} (great_expectations.yml missing); "
            f"run `joinshift quality write-suites --spec <spec>`"
        )
    gx = _gx()
    context = gx.get_context(mode="file", context_root_dir=str(root))
    out = {}
    for kind in kinds:
        if not _suite_path(root, spec, kind).is_file():
            raise FileNotFoundError(
                f"suite {suite_name(spec, kind)} missing: {_suite_path(root, spec, kind)}; run "
                f"`joinshift quality write-suites --spec include/specs/{spec.pipeline}.yaml`"
            )
        out[kind] = context.suites.get(suite_name(spec, kind))
    return out


def suites_out_of_sync(spec: JoinSpec, root: str | Path = EXPECTATIONS_DIR) -> list[str]:
    """Kinds whose file is missing or differs from :func:`build_suites` (empty: in sync)."""
    built = build_suites(spec)
    drift = []
    for kind, suite in built.items():
        p = _suite_path(Path(root), spec, kind)
        if not p.is_file() or json.loads(p.read_text()) != json.loads(json.dumps(suite_dict(suite))):
            drift.append(kind)
    return drift


__all__ = [
    "ACCURACY_DIFF",
    "ARRIVAL_DS",
    "CONTEXT_CONFIG",
    "EXPECTATIONS_DIR",
    "KINDS",
    "LATENESS",
    "RAW_KINDS",
    "SPARK_TYPE_NAMES",
    "build_suites",
    "load_suites",
    "suite_dict",
    "suite_name",
    "suites_out_of_sync",
    "write_suites",
]

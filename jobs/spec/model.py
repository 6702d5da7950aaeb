"""The join spec: one YAML file under ``include/specs/`` parsed into one typed object.

Every job (landing, batch joins, streaming join, compare, recommendation, runbooks) takes a
:class:`JoinSpec`. Change the window here and every job follows.

Example::

    from jobs.spec import load_spec
    spec = load_spec(DEFAULT_SPEC)
    spec.window.lower_seconds      # -10800 for "-3h"
    spec.left.topic                # "search_responses"

Terms follow the paper (Facebook, "Providing Streaming Joins as a Service", VLDB 2018, §3):
the *left* stream drives the join; each left event has its own *window* on the right stream,
``[left.event_time + lower, left.event_time + upper]``, bounds inclusive.
"""

from __future__ import annotations

import difflib
import re
import types
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import Any, Union, get_args, get_origin
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from jobs.settings import PROJECT_ROOT
from jobs.spec.avro import READ_FILES, SPEC_DIR
from jobs.spec.duration import Duration, format_duration, require_positive, require_whole_seconds
from jobs.spec.size import ByteSize
from jobs.spec.source import BatchTable, SourceFormat
from jobs.spec.streaming import Engine, HealthSpec, StateStore, StreamingOptions

#: Column types a stream schema may use, mapped to Spark SQL type names.
SCHEMA_TYPES = {
    "string": "string",
    "int": "int",
    "long": "bigint",
    "double": "double",
    "boolean": "boolean",
    "timestamp": "timestamp",
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def pipeline_name(name: str) -> str:
    """A pipeline's name, checked: it names tables, checkpoints and Airflow's assets."""
    if not _NAME.match(name):
        raise ValueError("use letters, digits and '_' (it names tables and checkpoints)")
    return name


#: In ``join.predicate``: a quoted literal (left alone) or a column reference ``l.<column>`` / ``r.<column>``.
PREDICATE_TOKEN = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|(?<![\w.`])([lr])\.([A-Za-z_][A-Za-z0-9_]*)""")


#: The demo's spec, the default of every command, DAG and runbook (relative to the project root).
DEFAULT_SPEC = "include/specs/search_sessions.yaml"
#: The demo's workload parameters (the generator's default).
DEFAULT_WORKLOAD = "include/workloads/search_sessions.yaml"


class SpecError(ValueError):
    """A join spec (or workload file) is invalid. The message names the field and what is allowed."""


class JoinType(str, Enum):
    inner = "inner"
    left_outer = "left_outer"


class Cardinality(str, Enum):
    """1-to-n: every right event in the window. 1-to-1: the matching right event that *arrived*
    first (by arrival time, then Kafka partition and offset), which a stream can emit at once."""

    one_to_n = "1-to-n"
    one_to_one = "1-to-1"


class UnknownFields(str, Enum):
    """A JSON field the schema does not name: ``keep`` the record and count the field as schema
    drift (the default), ``quarantine`` the record, or ``ignore`` it (kept, not counted)."""

    keep = "keep"
    quarantine = "quarantine"
    ignore = "ignore"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class StreamSpec(_Strict):
    """One side of the join: where it lives in Kafka and in the warehouse, and what it looks like."""

    name: str = Field(description="the stream's name in reports, e.g. 'server_search'")
    topic: str = Field(description="Kafka topic the stream is published to")
    table: str = Field(description="landed Delta table (Hive-style, partitioned by arrival ds)")
    schema_: dict[str, str] = Field(alias="schema", description="column name -> type")
    key: list[str] = Field(min_length=1, description="join key column(s)")
    event_time: str = Field(description="event-time column (a 'timestamp' column of the schema)")
    id: str = Field(description="unique event id column; duplicates are quarantined")
    watermark_delay: Duration = Field(description="how late an event may arrive behind the stream's max event time")
    format: SourceFormat = Field(default_factory=SourceFormat, description="how the topic's records are read")
    batch_table: BatchTable | None = Field(
        default=None, description="the batch job's existing daily table: the batch baselines read it"
    )

    @field_validator("topic", "table", "name")
    @classmethod
    def _identifier(cls, v: str) -> str:
        if not re.match(r"^[A-Za-z0-9_.\-]+$", v):
            raise ValueError("use letters, digits, '_', '.' or '-'")
        return v

    @field_validator("schema_")
    @classmethod
    def _schema_types(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("a stream needs at least one column")
        for col, typ in v.items():
            if not _NAME.match(col):
                raise ValueError(f"column name {col!r} must be a plain identifier")
            if typ not in SCHEMA_TYPES:
                raise ValueError(f"column {col!r} has type {typ!r}; allowed: {', '.join(SCHEMA_TYPES)}")
        return v

    @field_validator("watermark_delay")
    @classmethod
    def _non_negative(cls, v: timedelta) -> timedelta:
        if v.total_seconds() < 0:
            raise ValueError("must be zero or positive (how late events may arrive)")
        return require_whole_seconds(v)

    @model_validator(mode="after")
    def _columns_exist(self) -> StreamSpec:
        for field, cols in (("key", self.key), ("event_time", [self.event_time]), ("id", [self.id])):
            for c in cols:
                if c not in self.schema_:
                    raise ValueError(f"{field}: column {c!r} is not in schema (columns: {', '.join(self.schema_)})")
        if self.schema_[self.event_time] != "timestamp":
            raise ValueError(f"event_time: column {self.event_time!r} must have type 'timestamp'")
        self.format.check_columns(self.schema_, self.id)
        if self.batch_table is not None:
            self.batch_table.check_columns(self.schema_)
        return self

    @property
    def watermark_seconds(self) -> int:
        return int(self.watermark_delay.total_seconds())

    @property
    def payload_columns(self) -> list[str]:
        return list(self.schema_)


class WindowSpec(_Strict):
    """The join window relative to the left event time, bounds inclusive: ``[lower, upper]``."""

    lower: Duration
    upper: Duration

    @model_validator(mode="after")
    def _ordered(self) -> WindowSpec:
        require_whole_seconds(self.lower, "lower"), require_whole_seconds(self.upper, "upper")
        if self.lower > self.upper:
            raise ValueError(
                f"lower ({format_duration(self.lower, True)}) must not be after upper "
                f"({format_duration(self.upper, True)})"
            )
        return self

    @property
    def lower_seconds(self) -> int:
        return int(self.lower.total_seconds())

    @property
    def upper_seconds(self) -> int:
        return int(self.upper.total_seconds())

    @property
    def span_seconds(self) -> int:
        return self.upper_seconds - self.lower_seconds

    def label(self) -> str:
        return f"[{format_duration(self.lower, True)}, {format_duration(self.upper, True)}]"


class JoinOptions(_Strict):
    type: JoinType = JoinType.left_outer
    cardinality: Cardinality = Cardinality.one_to_n
    predicate: str | None = Field(
        default=None,
        description="extra match condition on top of key and window: a Spark SQL boolean over "
        "l.<column> (left) and r.<column> (right), e.g. 'abs(l.result_count - r.position) <= 10'",
    )

    @field_validator("predicate")
    @classmethod
    def _predicate_text(cls, v: str | None) -> str | None:
        if v is None:
            return None
        v = " ".join(v.split())
        if not v:
            raise ValueError("is empty; leave it out for a join on key and window only")
        if ";" in PREDICATE_TOKEN.sub("", v):
            raise ValueError("must be one boolean expression (no ';')")
        if not predicate_refs(v):
            raise ValueError("names no column; write columns as l.<column> (left) and r.<column> (right)")
        return v


def predicate_refs(predicate: str) -> list[tuple[str, str]]:
    """The ``(side, column)`` pairs a predicate names, ``side`` 'left' or 'right', in order, once each."""
    refs = []
    for m in PREDICATE_TOKEN.finditer(predicate):
        if m.group(1):
            refs.append(("left" if m.group(1) == "l" else "right", m.group(2)))
    return list(dict.fromkeys(refs))


class TimestampValidity(_Strict):
    """Paper §6.7: event times too far from the arrival time are impossible, not late."""

    max_past: Duration = Field(default=timedelta(days=7))
    max_future: Duration = Field(default=timedelta(hours=1))


class AccuracySpec(_Strict):
    """What the stream must keep up with; read by compare, gates and recommendation."""

    baseline: str = Field(
        default="batch_1d_windowed",
        pattern="^(batch_1d_1d|batch_1d_2d|batch_1d_windowed|reference)$",
        description="the variant the stream is held to: a batch baseline or the cut-off-free reference",
    )
    tolerance_pp: float = Field(default=1.0, ge=0, description="allowed stream shortfall, percentage points")


class Budgets(_Strict):
    """What the user accepts to pay for the match rate: read by the recommendation and the gate."""

    output_latency: Duration | None = Field(
        default=None, description="p99 time from an output row's latest event to its output"
    )
    state_memory: ByteSize | None = Field(default=None, description="the join's state, e.g. 512MiB or 2GiB")

    @field_validator("output_latency")
    @classmethod
    def _positive(cls, v: timedelta | None) -> timedelta | None:
        return require_positive(v, "1h")


class Corrections(_Strict):
    """Late corrections (the paced engine, left outer): a left event emitted as a non-match when its
    window closed is amended when a matching right event arrives within ``horizon`` after that."""

    horizon: Duration | None = Field(default=None, description="how long a non-match may still be amended, e.g. 12h")

    @field_validator("horizon")
    @classmethod
    def _positive(cls, v: timedelta | None) -> timedelta | None:
        return require_positive(v, "12h (or leave it out: no corrections)")


class CutoverSpec(_Strict):
    """The cut-over gate's SLO (``joinshift gate``): what a day must meet, and how many days in a
    row a promotion needs. Match-rate tolerance and baseline come from ``accuracy``, the latency
    budget from ``budgets.output_latency``, the restart limit from ``health.max_restarts_per_day``."""

    days_required: int = Field(default=7, ge=1, description="consecutive days meeting the SLO per promotion")
    max_unexplained_pp: float = Field(
        default=0.5, ge=0, description="misses the account cannot explain, pp of the day's left events"
    )


class JoinSpec(_Strict):
    """A streaming join and its batch baselines, in one object."""

    pipeline: str
    timezone: str = "UTC"
    left: StreamSpec
    right: StreamSpec
    window: WindowSpec
    join: JoinOptions = JoinOptions()
    output_table: str
    timestamp_validity: TimestampValidity = TimestampValidity()
    unknown_fields: UnknownFields = UnknownFields.keep
    accuracy: AccuracySpec = AccuracySpec()
    streaming: StreamingOptions = StreamingOptions()
    health: HealthSpec = HealthSpec()
    cutover: CutoverSpec = CutoverSpec()
    budgets: Budgets = Budgets()
    corrections: Corrections = Corrections()

    @field_validator("pipeline")
    @classmethod
    def _pipeline_name(cls, v: str) -> str:
        return pipeline_name(v)

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v!r} is not an IANA time zone (e.g. UTC, America/Los_Angeles)") from None
        return v

    @model_validator(mode="after")
    def _sides_compatible(self) -> JoinSpec:
        if len(self.left.key) != len(self.right.key):
            raise ValueError("left.key and right.key must name the same number of columns")
        for lk, rk in zip(self.left.key, self.right.key):
            if self.left.schema_[lk] != self.right.schema_[rk]:
                raise ValueError(
                    f"key types differ: left.{lk} is {self.left.schema_[lk]}, right.{rk} is {self.right.schema_[rk]}"
                )
        if self.join.predicate is not None:
            for side, column in predicate_refs(self.join.predicate):
                schema = self.side(side).schema_
                if column not in schema:
                    raise ValueError(
                        f"join.predicate: {side[0]}.{column} is not a column of the {side} stream "
                        f"(columns: {', '.join(schema)})"
                    )
        if self.left.topic == self.right.topic:
            raise ValueError("left.topic and right.topic must differ")
        if self.streaming.engine == Engine.paced:
            self._paced_supported()
        if self.corrections.horizon is not None and (
            self.streaming.engine != Engine.paced or self.join.type != JoinType.left_outer
        ):
            raise ValueError(
                "corrections.horizon amends left outer non-matches of the paced engine: set streaming.engine "
                "paced and join.type left_outer, or leave corrections out"
            )
        tables = [self.left.table, self.right.table, self.output_table]
        if len(set(tables)) != 3:
            raise ValueError("left.table, right.table and output_table must all differ")
        return self

    def _paced_supported(self) -> None:
        """What the paced engine does not do yet, refused when the spec is read."""
        from jobs.spec.avro import Encoding
        from jobs.spec.source import TimeFormat, UnsupportedTimeFormat, strptime_format

        if self.join.predicate is not None:
            raise ValueError(
                "streaming.engine paced does not apply join.predicate yet: remove it, or use engine native"
            )
        if self.streaming.state_store != StateStore.rocksdb:
            raise ValueError(
                "streaming.engine paced keeps its state in RocksDB (Spark's transformWithState): remove "
                "streaming.state_store, or use engine native"
            )
        for side in ("left", "right"):
            fmt = self.side(side).format
            if fmt.encoding == Encoding.avro:
                raise ValueError(
                    f"streaming.engine paced reads JSON values only ({side}.format.encoding is avro): use engine native"
                )
            if fmt.time_format not in TimeFormat.__members__:
                try:
                    strptime_format(fmt.time_format)
                except UnsupportedTimeFormat as e:
                    raise ValueError(
                        f"streaming.engine paced cannot read {side}.format.time_format in Python ({e}): "
                        "use iso, epoch_s, epoch_ms, epoch_us, or engine native"
                    ) from None

    def side(self, name: str) -> StreamSpec:
        if name not in ("left", "right"):
            raise ValueError(f"side must be 'left' or 'right', not {name!r}")
        return self.left if name == "left" else self.right

    def with_window(self, lower: timedelta, upper: timedelta) -> JoinSpec:
        """A copy with another window: what recommendation and `plan` compare."""
        return self.model_copy(update={"window": WindowSpec(lower=lower, upper=upper)})


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join("schema" if p == "schema_" else str(p) for p in loc) or "(top level)"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: ``Model`` or ``Model | None``."""
    if get_origin(annotation) in (Union, types.UnionType):
        models = [a for a in get_args(annotation) if a is not type(None)]
        annotation = models[0] if len(models) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _allowed_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        inner = _model_of(field.annotation) if field is not None else None
        if inner is None:
            return []
        model = inner
    return [f.alias or name for name, f in model.model_fields.items()]


def validate_model(
    model: type[BaseModel], data: Any, source: str, what: str, context: dict[str, Any] | None = None
) -> Any:
    """Validate ``data`` into ``model``; a :class:`SpecError` names every bad field and what is allowed.

    Shared by join specs and workload files, so both fail the same helpful way. ``context`` is
    pydantic's validation context (a spec's folder: :data:`jobs.spec.avro.SPEC_DIR`).
    """
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a YAML {type(data).__name__}"
        raise SpecError(f"{source}: a {what} is a YAML mapping of field: value, not {got}")
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        lines = []
        unknown: dict[tuple[Any, ...], list[str]] = {}  # a parent's unknown fields, said once with what it allows
        for err in exc.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                unknown.setdefault(err["loc"][:-1], []).append(str(err["loc"][-1]))
                continue
            if "input" in err and err["type"] not in ("value_error", "missing"):
                msg = f"{msg} (got {err['input']!r})"
            lines.append(f"  {_field_path(err['loc'])}: {msg}")
        for parent, names in unknown.items():
            allowed = _allowed_fields(model, (*parent, names[0]))
            hints = {
                n: f" (did you mean {m[0]}?)" if (m := difflib.get_close_matches(n, allowed, 1)) else "" for n in names
            }
            if len(names) == 1:
                said = f"{_field_path((*parent, names[0]))}: unknown field{hints[names[0]]}"
            else:
                said = f"{_field_path(parent)}: unknown fields " + ", ".join(n + hints[n] for n in names)
            lines.append(f"  {said}; allowed: {', '.join(allowed)}")
        raise SpecError(f"{source}: invalid {what}\n" + "\n".join(lines)) from None


def read_yaml(path: str | Path, what: str) -> tuple[Any, str]:
    """A YAML file's content and its name for messages; a clear error if missing or not YAML."""
    p = Path(path)
    if p.is_dir():
        raise SpecError(f"{what} {p} is a folder; name the YAML file in it")
    if not p.is_file():
        raise SpecError(
            f"{what} {p} does not exist: give the file's path "
            "(a relative one is looked for in the current folder, then in the project)"
        )
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise SpecError(f"{what} {p} is not UTF-8 text; name a YAML file") from None
    except OSError as exc:
        raise SpecError(f"{what} {p} cannot be read ({exc.strerror}); check its permissions") from None
    try:
        return yaml.safe_load(text), str(p)
    except yaml.YAMLError as exc:
        raise SpecError(f"{p}: not valid YAML: {_yaml_problem(exc)}") from None
    except ValueError as exc:  # PyYAML reads 2026-02-30 as a date, and fails building it
        raise SpecError(f"{p}: {exc}: a value YAML reads as a date or time is not one; quote it") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: what it found, and where (1-based line and column)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


def parse_spec(data: Any, source: str = "<spec>", folder: str | Path | None = None) -> JoinSpec:
    """Validate a mapping (parsed YAML) into a :class:`JoinSpec`; errors name every bad field.
    Files the spec names (Avro schemas) are relative to ``folder`` (default: the current directory)."""
    context = {SPEC_DIR: str(folder)} if folder is not None else None
    return validate_model(JoinSpec, data, source, "join spec", context)


def load_spec(path: str | Path) -> JoinSpec:
    """Read and validate a join spec YAML file (files it names are relative to its folder)."""
    data, source = read_yaml(path, "join spec")
    return parse_spec(data, source=source, folder=Path(path).resolve().parent)


def recorded_spec(text: str) -> JoinSpec:
    """A spec recorded as JSON earlier (a checkpoint's), to compare with: the files it names
    (Avro schemas) are not read, since they may have moved or changed since."""
    return JoinSpec.model_validate_json(text, context={READ_FILES: False})


def spec_path(path: str | Path | None = None) -> Path:
    """A spec (or workload) path as given, or :data:`DEFAULT_SPEC`. A relative path is the current
    folder's file when there is one (a user's own ``my_join.yaml`` where they stand), else the
    project root's, so DAGs, the CLI and runbooks find ``include/specs/...`` from any folder."""
    p = Path(path or DEFAULT_SPEC)
    if p.is_absolute():
        return p
    here = Path.cwd() / p
    return here if here.exists() else PROJECT_ROOT / p


def write_spec(spec: JoinSpec, path: str | Path) -> Path:
    """A spec object as YAML that round-trips through :func:`load_spec`."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(spec.model_dump(mode="json", by_alias=True), sort_keys=False))
    return p

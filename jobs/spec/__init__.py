"""The join spec: the model, the one duration grammar, loading, and the plan (spec change ->
continue the checkpoint or replay). The lowest layer: it imports nothing else of joinshift but
the settings."""

from jobs.spec.duration import Duration, fmt_duration, format_duration, parse_duration
from jobs.spec.model import (
    DEFAULT_SPEC,
    DEFAULT_WORKLOAD,
    SCHEMA_TYPES,
    AccuracySpec,
    Cardinality,
    JoinOptions,
    JoinSpec,
    JoinType,
    SpecError,
    StreamingOptions,
    StreamSpec,
    TimestampValidity,
    UnknownFields,
    WindowSpec,
    load_spec,
    parse_spec,
    read_yaml,
    spec_path,
    validate_model,
    write_spec,
)

__all__ = [
    "DEFAULT_SPEC",
    "DEFAULT_WORKLOAD",
    "SCHEMA_TYPES",
    "AccuracySpec",
    "Cardinality",
    "Duration",
    "JoinOptions",
    "JoinSpec",
    "JoinType",
    "SpecError",
    "StreamSpec",
    "StreamingOptions",
    "TimestampValidity",
    "UnknownFields",
    "WindowSpec",
    "fmt_duration",
    "format_duration",
    "load_spec",
    "parse_duration",
    "parse_spec",
    "read_yaml",
    "spec_path",
    "validate_model",
    "write_spec",
]

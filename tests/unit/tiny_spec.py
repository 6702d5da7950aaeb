"""The tiny join spec the unit tests share: key ``k``, event time ``t``, id ``event_id``, window
[-10m, +5m], left outer 1-to-n, no watermark delay. ``extra`` adds columns to both sides' schema;
other keywords replace top-level fields of the spec."""

from __future__ import annotations

from jobs.spec import JoinSpec, parse_spec


def tiny_spec_data(*, extra: dict[str, str] | None = None, **over) -> dict:
    def side(name: str) -> dict:
        return {
            "name": name,
            "topic": f"{name}_topic",
            "table": f"{name}_table",
            "schema": {"event_id": "string", "k": "string", "t": "timestamp", **(extra or {})},
            "key": ["k"],
            "event_time": "t",
            "id": "event_id",
            "watermark_delay": "0s",
        }

    return {
        "pipeline": "tiny",
        "left": side("left"),
        "right": side("right"),
        "window": {"lower": "-10m", "upper": "+5m"},
        "output_table": "out",
        "join": {"type": "left_outer", "cardinality": "1-to-n"},
        **over,
    }


def tiny_spec(*, extra: dict[str, str] | None = None, **over) -> JoinSpec:
    return parse_spec(tiny_spec_data(extra=extra, **over))

"""Bad records of the generated workload: one problem each, with the quarantine reason it must get."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from jobs.spec import JoinSpec, UnknownFields
from jobs.workload.params import BAD_CLASSES, WorkloadParams
from jobs.workload.texts import _ids, _iso1

if TYPE_CHECKING:
    from jobs.workload.generator import _Side

_EXTRA_FIELDS = (
    ("debug", "true"),
    ("client_version", '"9.4.1"'),
    ("experiment_id", '"exp_42"'),
    ("trace_id", '"7f3a9c"'),
    ("app_build", "20261118"),
)
_BAD_VALUES = {
    "int": ('"abc"', '"n/a"', '"twelve"', '"12abc"', '"1O"'),
    "long": ('"abc"', '"n/a"', '"twelve"', '"12abc"'),
    "double": ('"abc"', '"n/a"', '"1,5"', '"12abc"'),
    "boolean": ('"maybe"', '"n/a"', '"yes please"'),
    "timestamp": ('"not-a-time"', '"2026-13-45T25:61:00.000Z"'),
}
#: Unparsable event times (JSON literals); None = the field is missing.
_BAD_TIMES = ('"not-a-time"', '"2026-13-45T25:61:00.000Z"', '"20/11/2026 10:15:30"', '""', "null", None)


class _BadRecords:
    """The generator's bad-record maker (a mixin of ``_Generator``: uses its params, spec and rngs)."""

    p: WorkloadParams
    spec: JoinSpec
    max_past_ms: int
    max_future_ms: int

    def rng(self, name: str) -> np.random.Generator:
        raise NotImplementedError  # the generator's per-aspect random stream

    def bad_records(self, s: _Side) -> tuple[dict[str, list], dict[str, list]]:
        """Bad (and, under ``unknown_fields: ignore``, extra-field good) records of one side."""
        p, stream = self.p, s.stream
        rng = self.rng(f"{s.name}.bad")
        shares = p.bad.as_dict()
        eligible = [
            c
            for c, t in stream.schema_.items()
            if t != "string" and c not in (stream.id, stream.event_time, *stream.key)
        ]
        if not eligible:
            shares["bad_type"] = 0.0
        n_good = len(s.event_ms)
        total = n_good / max(1e-9, 1.0 - sum(shares.values()))
        counts = {c: int(round(shares[c] * total)) for c in BAD_CLASSES}
        # templates leave room for a later arrival without breaking timestamp validity
        slack = self.max_past_ms - (s.arrival_ms - s.event_ms)
        candidates = np.flatnonzero(slack > 12 * 60_000)
        need = sum(counts.values())
        if need > len(candidates):
            raise ValueError(f"{s.name}: not enough events to derive {need} bad records from")
        templates = rng.choice(candidates, size=need, replace=False)
        cols = list(stream.schema_)
        string_id = stream.schema_[stream.id] == "string"
        new_ids = _ids(s.name, np.arange(n_good, n_good + need), string_id)
        unknown_ignored = self.spec.unknown_fields != UnknownFields.quarantine
        out: dict[str, list] = {c: [] for c in ("key", "value", "arrival_ms", "event_id", "expected_reason")}
        extra_good: dict[str, list] = {"template": [], "id": [], "arrival_ms": []}

        def literal(col: str, i: int) -> str:
            vals, quoted = s.text[col]
            return f'"{vals[i]}"' if quoted else str(vals[i])

        for pos, cls in enumerate(c for c in BAD_CLASSES for _ in range(counts[c])):
            t = int(templates[pos])
            key: str | None = s.kafka_key[t]
            if cls == "duplicate_event_id":
                out["key"].append(key)
                out["value"].append(s.values[t])
                out["arrival_ms"].append(int(s.arrival_ms[t]) + int(rng.integers(1000, 600_000)))
                out["event_id"].append(s.ids[t])
                out["expected_reason"].append(cls)
                continue
            new_id = new_ids[pos]
            arrival = int(s.arrival_ms[t]) + int(rng.integers(0, 60_000))
            fields: dict[str, str | None] = {c: literal(c, t) for c in cols}
            fields[stream.id] = f'"{new_id}"' if string_id else new_id
            event_id: str | None = new_id
            reason: str | None = cls
            if cls == "null_key":
                fields[stream.key[0]] = "null" if rng.random() < 0.6 else None
                key = None
            elif cls == "bad_event_time":
                fields[stream.event_time] = _BAD_TIMES[int(rng.integers(len(_BAD_TIMES)))]
            elif cls == "event_time_too_old":
                et = arrival - self.max_past_ms - int(rng.integers(3_600_000, 10 * 86_400_000))
                fields[stream.event_time] = f'"{_iso1(et)}"'
            elif cls == "event_time_in_future":
                et = arrival + self.max_future_ms + int(rng.integers(600_000, 3 * 86_400_000))
                fields[stream.event_time] = f'"{_iso1(et)}"'
            elif cls == "bad_type":
                col = eligible[int(rng.integers(len(eligible)))]
                choices = _BAD_VALUES[stream.schema_[col]]
                fields[col] = choices[int(rng.integers(len(choices)))]
            elif cls == "unexpected_field":
                extras = [(k, v) for k, v in _EXTRA_FIELDS if k not in stream.schema_]
                k, v = extras[int(rng.integers(len(extras)))]
                fields[k] = v
                if unknown_ignored:  # not a problem under this spec: a good event
                    reason = None
                    extra_good["template"].append(t)
                    extra_good["id"].append(new_id if string_id else int(new_id))
                    extra_good["arrival_ms"].append(arrival)
            text = "{" + ",".join(f'"{c}":{v}' for c, v in fields.items() if v is not None) + "}"
            if cls == "malformed_json":
                text, event_id = _malform(text, fields, rng), None
            out["key"].append(key)
            out["value"].append(text)
            out["arrival_ms"].append(arrival)
            out["event_id"].append(event_id)
            out["expected_reason"].append(reason)
        return out, extra_good


def _malform(text: str, fields: dict[str, str | None], rng: np.random.Generator) -> str:
    """A value that is not a JSON object: truncated, form-encoded text, an array or a scalar."""
    u = rng.random()
    if u < 0.5:
        return text[: int(rng.integers(1, len(text) - 1))]
    plain = {k: json.loads(v) for k, v in fields.items() if v is not None}
    if u < 0.7:
        return "&".join(f"{k}={v}" for k, v in plain.items())
    if u < 0.85:
        return json.dumps(list(plain.values()), separators=(",", ":"))
    return ("null", '"server restarted"', "42", "")[int(rng.integers(4))]

"""A realistic, deterministic workload for a join spec.

The generator is pure (numpy, no Spark, no Kafka): :func:`generate` turns a
:class:`WorkloadParams` and a :class:`~jobs.spec.JoinSpec` into a :class:`Workload` holding

* ``records`` -- one row per Kafka record, sorted by arrival (the Kafka record timestamp):
  ``side, topic, key, value, arrival_ms, event_id, expected_reason``;
* ``left`` / ``right`` -- the good events a correct parser lands (typed);
* ``links`` -- the generative truth: ``(left_event_id, right_event_id)`` for every right event
  generated *for* a left event (a join by key and window may find more or fewer pairs).

The model follows the paper's search-session query (VLDB 2018, §3 and §7.1): the server logs a
search response (left) with a session id; the client then logs clicks (right) with the same id.

* Left events: ``left_events_per_day`` per day, grouped into sessions (the join key). Each of
  ``distinct_keys_per_day`` keys gets one search and the remaining searches go to keys by a Zipf
  law on rank (most sessions have one search, a few are hot: paper §6.6). A session starts at a
  time drawn from a diurnal curve in the spec's time zone (nothing before the first local
  midnight) and its searches spread over ``size × session_gap``. Server logs arrive seconds
  late, nearly in order, with rare stragglers.
* Right events: a share of left events gets no click (``unmatched_share``); the others get
  1 + geometric clicks (mean ``right_per_match_mean``). A click's event time is the search's plus
  an offset: mostly seconds to minutes after, a share up to ``right_before_max`` *before* (clock
  skew, prefetch), and a share *beyond the window's upper bound* so that the window matters.
  A few clicks belong to no generated search (``right_orphan_share``). Client logs arrive with a
  heavy-tailed delay: a lognormal body (seconds to minutes) mixed with a lognormal tail (hours),
  both larger at night in the spec's time zone (phones sleep, uploads wait for the morning).
* Bad records (paper §6.7 and the landing contract), each with exactly one problem and the
  quarantine reason the landing job must give it (``expected_reason``): see :data:`BAD_CLASSES`.
  Bad records are *extra* records (fresh event ids, payloads copied from a good event), except
  ``duplicate_event_id``: an exact re-send of an earlier good record, arriving a little later.
  So ``left``/``right``/``links`` are exactly the good records and the truth of the join.

Deterministic: the same parameters and spec give byte-identical ``records`` (each aspect draws
from its own random stream, seeded by ``seed`` and the aspect's name).

Not generated: ``null_id`` (the landing job's extra reason). Under ``unknown_fields: ignore`` the
``unexpected_field`` records are good events (in ``left``/``right``, not in ``links``).

The parameters are :mod:`jobs.workload.params`; the bad records :mod:`jobs.workload.bad`; the
publisher and the command line :mod:`jobs.workload.publisher`.

Example::

    from jobs.spec import load_spec
    from jobs.workload.generator import generate
    from jobs.workload.params import load_workload
    from jobs.workload.publisher import publish
    spec = load_spec("include/specs/search_sessions.yaml")
    wl = generate(load_workload("include/workloads/search_sessions.yaml"), spec)
    publish(wl.records, "localhost:9092")
"""

from __future__ import annotations

import dataclasses
import zlib
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd

from jobs.spec import JoinSpec, StreamSpec
from jobs.workload.bad import _BadRecords
from jobs.workload.params import BAD_CLASSES, WorkloadParams
from jobs.workload.texts import (
    _ACTIONS,
    _QUERY_MODIFIERS,
    _QUERY_WORDS,
    _Clock,
    _ds_of,
    _formatter,
    _ids,
    _is_night,
    _local_midnight_ms,
    _ms,
    _zipf_pick,
    fixed_ids,
    iso_ms,
)

RECORD_COLUMNS = ("side", "topic", "key", "value", "arrival_ms", "event_id", "expected_reason")


# --------------------------------------------------------------------------------------------
# The workload
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Workload:
    """Generated records and the truth about them."""

    #: One row per Kafka record, sorted by ``arrival_ms``: see :data:`RECORD_COLUMNS`.
    records: pd.DataFrame
    #: Good left events: event_id, key, event_time, arrival_time and the payload columns.
    left: pd.DataFrame
    #: Good right events, same shape.
    right: pd.DataFrame
    #: ``left_event_id, right_event_id`` for every right event generated for a left event.
    links: pd.DataFrame
    params: WorkloadParams
    spec: JoinSpec

    def summary(self) -> dict[str, Any]:
        """Realized statistics: records per topic per arrival day, bad records, delays, matching."""
        r = self.records
        ds = _ds_of(r["arrival_ms"].to_numpy(), self.spec.timezone)
        per_day = pd.DataFrame({"topic": r["topic"].to_numpy(), "ds": ds}).groupby(["topic", "ds"]).size()
        per_topic_day = {
            t: {str(d): int(n) for (tt, d), n in per_day.items() if tt == t} for t in sorted(set(r["topic"]))
        }
        bad = r["expected_reason"].value_counts().to_dict()

        def q(td: pd.Series) -> dict[str, float]:
            s = td.dt.total_seconds().to_numpy()
            if not len(s):
                return {}
            p = np.percentile(s, [50, 90, 99, 99.9])
            return {
                "p50_s": round(p[0], 1),
                "p90_s": round(p[1], 1),
                "p99_s": round(p[2], 1),
                "p99.9_s": round(p[3], 1),
                "max_s": round(float(s.max()), 1),
            }

        lt = self.left
        linked_left = set(self.links["left_event_id"])
        return {
            "records": int(len(r)),
            "records_per_topic_per_day": per_topic_day,
            "bad_records": {c: int(bad.get(c, 0)) for c in BAD_CLASSES},
            "good_left": int(len(lt)),
            "good_right": int(len(self.right)),
            "links": int(len(self.links)),
            "left_unmatched_share": round(1 - len(linked_left) / max(1, len(lt)), 4),
            "distinct_keys_left": int(lt["key"].nunique()),
            "max_left_per_key": int(lt["key"].value_counts().max()) if len(lt) else 0,
            "left_delay": q(lt["arrival_time"] - lt["event_time"]),
            "right_delay": q(self.right["arrival_time"] - self.right["event_time"]),
        }


# --------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Side:
    """Good events of one side, in event-time order (event ids follow that order)."""

    name: str
    stream: StreamSpec
    event_ms: np.ndarray  # int64
    arrival_ms: np.ndarray  # int64
    ids: np.ndarray  # event id as text (object str)
    kafka_key: np.ndarray  # object str
    typed: dict[str, np.ndarray]  # schema column -> typed values (ms for timestamps)
    text: dict[str, tuple[Any, bool]]  # schema column -> (values to print, quoted)
    values: list[str]  # the JSON payloads


class _Generator(_BadRecords):
    def __init__(self, params: WorkloadParams, spec: JoinSpec):
        self.p = params
        self.spec = spec
        self.tz = spec.timezone
        self.bounds = np.array(
            [_local_midnight_ms(params.start_date + timedelta(days=d), self.tz) for d in range(params.days + 1)],
            dtype=np.int64,
        )
        self.t0, self.t_end = int(self.bounds[0]), int(self.bounds[-1])
        margin = 3 * 86_400_000
        self.clock = _Clock(self.tz, self.t0 - margin, self.t_end + margin)
        # diurnal weights per minute of the generated days
        self.minutes = np.arange(self.t0, self.t_end, 60_000, dtype=np.int64)
        h = self.clock.hour(self.minutes)
        w = 1.0 + params.diurnal_amplitude * np.cos(2 * np.pi * (h - params.diurnal_peak_hour) / 24.0)
        self.cum = np.concatenate([[0.0], np.cumsum(w)])
        self.day_minute = np.searchsorted(self.minutes, self.bounds)  # minute index of each midnight
        self.max_past_ms = _ms(spec.timestamp_validity.max_past)
        self.max_future_ms = _ms(spec.timestamp_validity.max_future)

    def rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng([self.p.seed, zlib.crc32(name.encode())])

    # -- time draws -------------------------------------------------------------------------

    def diurnal(self, rng: np.random.Generator, day: np.ndarray | None, n: int) -> np.ndarray:
        """``n`` event times following the diurnal curve, within ``day`` (per draw) or all days."""
        if day is None:
            lo, hi = self.cum[0], self.cum[-1]
        else:
            lo, hi = self.cum[self.day_minute[day]], self.cum[self.day_minute[day + 1]]
        u = lo + rng.random(n) * (hi - lo)
        m = np.clip(np.searchsorted(self.cum, u, side="right") - 1, 0, len(self.minutes) - 1)
        return self.minutes[m] + rng.integers(0, 60_000, n)

    @staticmethod
    def lognormal_ms(rng: np.random.Generator, median: timedelta, sigma: float, n: int) -> np.ndarray:
        return np.exp(rng.normal(np.log(max(_ms(median), 1)), sigma, n))

    # -- left -------------------------------------------------------------------------------

    def left_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        p = self.p
        rng = self.rng("left.sessions")
        n, days, k = p.left_events_per_day, p.days, p.keys_per_day
        # every key gets one event; the other n - k events go to keys by a Zipf law on rank
        rank = _zipf_pick(rng, k, (n - k) * days, p.key_zipf_exponent)
        day = np.repeat(np.arange(days), n - k)
        perm = rng.permuted(np.tile(np.arange(k, dtype=np.int64), (days, 1)), axis=1)
        key_idx = np.concatenate([np.arange(days * k, dtype=np.int64), day * k + perm[day, rank]])
        size = np.bincount(key_idx, minlength=days * k)
        start = self.diurnal(rng, np.arange(days * k) // k, days * k)
        spread = np.minimum(size * _ms(p.session_gap), _ms(p.session_max_duration))
        event_ms = start[key_idx] + np.floor(rng.random(len(key_idx)) * spread[key_idx]).astype(np.int64)
        order = np.argsort(event_ms, kind="stable")
        event_ms, key_idx = event_ms[order], key_idx[order]

        rng = self.rng("left.delay")
        delay = self.lognormal_ms(rng, p.left_delay_median, p.left_delay_sigma, len(event_ms))
        straggler = rng.random(len(event_ms)) < p.left_straggler_share
        delay[straggler] = rng.uniform(60_000, _ms(p.left_straggler_max), int(straggler.sum()))
        arrival_ms = event_ms + np.maximum(np.rint(delay).astype(np.int64), 1)
        return event_ms, arrival_ms, key_idx

    # -- right ------------------------------------------------------------------------------

    def right_events(self, left_ms: np.ndarray, left_key: np.ndarray):
        p = self.p
        rng = self.rng("right.links")
        n_left = len(left_ms)
        matched = rng.random(n_left) >= p.unmatched_share
        mult = np.minimum(rng.geometric(1.0 / p.right_per_match_mean, n_left), p.right_per_match_max)
        mult = np.where(matched, mult, 0)
        li = np.repeat(np.arange(n_left), mult)
        n = len(li)

        rng = self.rng("right.offset")
        upper = self.spec.window.upper_seconds * 1000
        off = self.lognormal_ms(rng, p.right_offset_median, p.right_offset_sigma, n)
        if upper > 0:
            over = off > upper
            off[over] = rng.uniform(0, upper, int(over.sum()))
        kind = rng.random(n)
        before = kind < p.right_before_share
        late = (kind >= p.right_before_share) & (kind < p.right_before_share + p.right_late_share)
        off[before] = -rng.uniform(1, max(_ms(p.right_before_max), 1), int(before.sum()))
        off[late] = upper + 1000 + rng.exponential(_ms(p.right_late_mean), int(late.sum()))
        off = np.rint(off).astype(np.int64)
        off = np.where(left_ms[li] + off < self.t0, -off, off)  # nothing happens before the first day
        event_ms = left_ms[li] + off
        key_idx = left_key[li]

        rng = self.rng("right.orphans")
        n_orphan = int(round(p.right_orphan_share * n))
        orphan_ms = self.diurnal(rng, None, n_orphan)
        orphan_key = p.days * p.keys_per_day + np.arange(n_orphan, dtype=np.int64)

        event_ms = np.concatenate([event_ms, orphan_ms])
        key_idx = np.concatenate([key_idx, orphan_key])
        li = np.concatenate([li, np.full(n_orphan, -1)])
        order = np.argsort(event_ms, kind="stable")
        event_ms, key_idx, li = event_ms[order], key_idx[order], li[order]

        rng = self.rng("right.delay")
        m = len(event_ms)
        night = _is_night(self.clock.hour(event_ms), p.night_hours)
        body = self.lognormal_ms(rng, p.right_delay_median, p.right_delay_sigma, m)
        body = body * np.where(night, p.night_delay_factor, 1.0)
        tail_p = np.where(night, p.right_tail_share_night, p.right_tail_share_day)
        tail = rng.random(m) < tail_p
        tail_delay = self.lognormal_ms(rng, p.right_tail_median, p.right_tail_sigma, m)
        delay = np.where(tail, tail_delay, body)
        cap = max(1000, min(_ms(p.right_delay_max), self.max_past_ms - 15 * 60_000))
        over = delay > cap
        delay[over] = rng.uniform(cap / 2, cap, int(over.sum()))
        arrival_ms = event_ms + np.clip(np.rint(delay).astype(np.int64), 1, cap)
        return event_ms, arrival_ms, key_idx, li

    # -- payloads ---------------------------------------------------------------------------

    def build_side(
        self,
        name: str,
        event_ms: np.ndarray,
        arrival_ms: np.ndarray,
        key_idx: np.ndarray,
        n_keys: int,
        extra: dict[str, np.ndarray | None],
    ) -> _Side:
        stream = self.spec.side(name)
        n = len(event_ms)
        rng = self.rng(f"{name}.payload")
        typed: dict[str, np.ndarray] = {}
        text: dict[str, tuple[Any, bool]] = {}
        string_id = stream.schema_[stream.id] == "string"
        ids = _ids(name, np.arange(n, dtype=np.int64), string_id)
        key_width = max(6, len(str(n_keys)))
        key_text: list[np.ndarray] = []
        for col, typ in stream.schema_.items():
            if col == stream.id:
                typed[col] = ids if string_id else np.arange(n, dtype=np.int64) + 1
                text[col] = (ids, string_id)
            elif col in stream.key:
                j = stream.key.index(col)
                if typ == "string":
                    table = fixed_ids("s" if j == 0 else f"{col[:1]}{j}_", np.arange(n_keys), key_width)
                    typed[col] = table[key_idx]
                    text[col] = (typed[col], True)
                    key_text.append(typed[col])
                else:
                    typed[col] = key_idx * (j + 1) + 1
                    text[col] = (typed[col].tolist(), False)
                    key_text.append(np.array([str(v) for v in text[col][0]], dtype=object))
            elif typ == "timestamp":
                ms = event_ms if col == stream.event_time else event_ms + rng.integers(0, 1000, n)
                typed[col] = ms
                text[col] = (iso_ms(ms), True)
            else:
                typed[col], text[col] = self.payload_column(rng, col, typ, n, extra)
        kafka_key = key_text[0]
        for more in key_text[1:]:
            kafka_key = np.array([f"{a}|{b}" for a, b in zip(kafka_key, more)], dtype=object)
        values = _formatter([(c, text[c][1]) for c in stream.schema_])(*(text[c][0] for c in stream.schema_))
        return _Side(name, stream, event_ms, arrival_ms, ids, kafka_key, typed, text, values)

    def payload_column(
        self, rng: np.random.Generator, col: str, typ: str, n: int, extra: dict[str, np.ndarray | None]
    ) -> tuple[np.ndarray, tuple[Any, bool]]:
        """Typed values and (printable values, quoted) of one payload column."""
        if col == "query" and typ == "string":
            vocab = np.array([f"{m}{w}" for w in _QUERY_WORDS for m in _QUERY_MODIFIERS], dtype=object)
            vocab = vocab[rng.permutation(len(vocab))]  # popularity rank
            val = vocab[_zipf_pick(rng, len(vocab), n, 1.0)]
            return val, (val, True)
        if col == "result_count" and typ in ("int", "long"):
            val = np.clip(np.rint(np.exp(rng.normal(np.log(120), 1.2, n))), 1, 100_000).astype(np.int64)
            matched = extra.get("matched")
            if matched is not None:  # zero-result searches get no clicks
                val[(~matched) & (rng.random(n) < 0.35)] = 0
            return val, (val.tolist(), False)
        if col == "action" and typ == "string":
            names = np.array([a for a, _ in _ACTIONS], dtype=object)
            val = names[rng.choice(len(_ACTIONS), size=n, p=[w for _, w in _ACTIONS])]
            return val, (val, True)
        if col == "position" and typ in ("int", "long"):
            val = np.minimum(rng.geometric(0.35, n), 50).astype(np.int64)
            cap = extra.get("max_position")
            if cap is not None:  # a click's position is within the results shown
                val = np.minimum(val, np.maximum(cap, 1))
            return val, (val.tolist(), False)
        # fallback by type
        if typ == "string":
            names = np.array([f"{col}_{i:02d}" for i in range(100)], dtype=object)
            val = names[_zipf_pick(rng, 100, n, 1.0)]
            return val, (val, True)
        if typ in ("int", "long"):
            val = rng.integers(0, 1000, n).astype(np.int64)
            return val, (val.tolist(), False)
        if typ == "double":
            val = np.round(rng.random(n) * 100, 3)
            return val, (val.tolist(), False)
        if typ == "boolean":
            val = rng.random(n) < 0.5
            return val, (np.where(val, "true", "false").astype(object), False)
        raise AssertionError(f"unhandled type {typ}")  # pragma: no cover

    # -- bad records ------------------------------------------------------------------------


def _good_frame(s: _Side, extra: dict[str, list]) -> pd.DataFrame:
    """Typed good events in arrival order (plus extra-field events kept under ``ignore``)."""
    stream = s.stream
    tmpl = np.asarray(extra["template"], dtype=np.int64)
    string_id = stream.schema_[stream.id] == "string"
    arrival = np.concatenate([s.arrival_ms, np.asarray(extra["arrival_ms"], dtype=np.int64)])
    event = np.concatenate([s.event_ms, s.event_ms[tmpl]])
    order = np.lexsort((event, arrival))

    def col(values: np.ndarray, extra_values: np.ndarray | None = None) -> np.ndarray:
        ev = values[tmpl] if extra_values is None else extra_values
        return np.concatenate([values, ev])[order]

    def ts(ms: np.ndarray) -> pd.Series:
        return pd.Series(ms.astype("datetime64[ms]")).dt.tz_localize("UTC")

    id_col = col(s.typed[stream.id], np.array(extra["id"], dtype=object if string_id else np.int64))
    data: dict[str, Any] = {
        "event_id": id_col,
        "key": col(s.kafka_key),
        "event_time": ts(event[order]),
        "arrival_time": ts(arrival[order]),
    }
    for c, typ in stream.schema_.items():
        if c in data:
            continue
        if c == stream.id:
            data[c] = id_col
        elif typ == "timestamp":
            data[c] = ts(col(s.typed[c]))
        else:
            data[c] = col(s.typed[c])
    return pd.DataFrame(data)


def generate(params: WorkloadParams, spec: JoinSpec) -> Workload:
    """Generate the workload of ``params`` for ``spec`` (pure and deterministic)."""
    g = _Generator(params, spec)
    left_ms, left_arr, left_key = g.left_events()
    right_ms, right_arr, right_key, li = g.right_events(left_ms, left_key)
    n_keys = params.days * params.keys_per_day + int((li < 0).sum())

    matched = np.zeros(len(left_ms), dtype=bool)
    matched[li[li >= 0]] = True
    left = g.build_side("left", left_ms, left_arr, left_key, n_keys, {"matched": matched})
    rc = left.typed.get("result_count")
    max_pos = np.where(li >= 0, rc[np.maximum(li, 0)], 50) if rc is not None and rc.dtype.kind == "i" else None
    right = g.build_side("right", right_ms, right_arr, right_key, n_keys, {"max_position": max_pos})

    cols: dict[str, list[np.ndarray]] = {c: [] for c in RECORD_COLUMNS}
    frames = {}
    for s in (left, right):
        bad, extra = g.bad_records(s)
        n, m = len(s.ids), len(bad["value"])
        cols["side"].append(np.full(n + m, s.name, dtype=object))
        cols["topic"].append(np.full(n + m, s.stream.topic, dtype=object))
        cols["key"].append(np.concatenate([s.kafka_key, np.array(bad["key"], dtype=object)]))
        values = np.empty(n + m, dtype=object)
        values[:n] = s.values
        values[n:] = bad["value"]
        cols["value"].append(values)
        cols["arrival_ms"].append(np.concatenate([s.arrival_ms, np.array(bad["arrival_ms"], dtype=np.int64)]))
        cols["event_id"].append(np.concatenate([s.ids, np.array(bad["event_id"], dtype=object)]))
        cols["expected_reason"].append(
            np.concatenate([np.full(n, None, dtype=object), np.array(bad["expected_reason"], dtype=object)])
        )
        frames[s.name] = _good_frame(s, extra)

    flat = {c: np.concatenate(v) for c, v in cols.items()}
    side_code = (flat["side"] == "right").astype(np.int8)
    order = np.lexsort((np.arange(len(side_code)), side_code, flat["arrival_ms"]))
    records = pd.DataFrame({c: flat[c][order] for c in RECORD_COLUMNS})

    linked = np.flatnonzero(li >= 0)
    by_left = linked[np.lexsort((linked, li[linked]))]
    links = pd.DataFrame({"left_event_id": left.ids[li[by_left]], "right_event_id": right.ids[by_left]})
    return Workload(records=records, left=frames["left"], right=frames["right"], links=links, params=params, spec=spec)

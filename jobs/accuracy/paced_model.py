"""What the paced engine would answer for a candidate window, predicted by running its own rules
over the landed records: the aligned source's pacing (:func:`jobs.join.pacing.pace_steps`, with
its PT estimators) slice by slice at the cadence, then the operator (:func:`jobs.join.paced.step`)
per join key and micro-batch. Pure: the records' arrays in, the answers out.

Why run the rules and not a closed form like the native engine's (:mod:`jobs.accuracy.tradeoff`):
the paced engine has no watermark delay to vary; what it loses is decided by its PTs, which the
pacing moves per step from the percentile of the records it admitted, and by which right events
a key still holds when its left event arrives. Both depend on the window's upper bound (the
synchronization point), so each upper bound is paced once and each window's operator run over it.

A candidate's numbers, as :data:`jobs.accuracy.tradeoff.COLUMNS` (its watermark delays 0: they
do not apply) and ``first_answer_rate``:

* ``match_rate``: the final answers, late corrections merged in (``corrections.horizon``);
  ``first_answer_rate``: the rows as first emitted;
* ``p99_latency_s``: of the first answers (each left event's first row, a non-match a correction
  replaced too: its micro-batch's end minus its latest event time, as ``recommend --verify``
  measures it, :func:`jobs.join.columns.first_answers`);
* ``memory_bytes``: the peak of the events the operator holds over the micro-batches, times the
  bytes per held event its state stored when the stream ran.

As the engine steps a key: in every micro-batch (its tick reaches every shard), when it has
records or its next timer is due by the micro-batch's right PT, with the micro-batch's PTs. The
same run's end as a replay-as-live trial's: the held-back records are read after the last slice,
then the source drains (both PTs to :data:`~jobs.join.pacing.DRAIN_PT`, one micro-batch).
``recommend --verify`` holds it to such a trial (README, "The recommendation").
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

import numpy as np
import pandas as pd

from jobs.accuracy.lateness import Cadence
from jobs.accuracy.state_model import DEFAULT_BYTES_PER_ROW
from jobs.accuracy.tradeoff import COLUMNS, p99, window_rates
from jobs.join.paced import Event, KeyState, Rules, next_timer, step
from jobs.join.pacing import DRAIN_PT, SIDES, ReadAhead, pace_steps
from jobs.join.pt_estimator import PTEstimator
from jobs.spec import Engine, JoinSpec, format_duration

#: What a candidate row has beyond :data:`jobs.accuracy.tradeoff.COLUMNS`.
FIRST_ANSWER_RATE = "first_answer_rate"


@dataclass(frozen=True)
class Records:
    """One stream's records: join key (any hashable), event time and arrival (epoch ms), and id."""

    keys: list
    t_ms: np.ndarray
    arrival_ms: np.ndarray
    ids: list[str]

    def __post_init__(self) -> None:
        n = len(self.keys)
        if not (len(self.t_ms) == len(self.arrival_ms) == len(self.ids) == n):
            raise ValueError("keys, t_ms, arrival_ms and ids must have one entry per record")

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class Pacing:
    """The spec's pacing knobs (``streaming.paced``) and the cadence of the micro-batches."""

    batch_ms: int
    drift_ms: int
    percentile: float
    pt_windows: int
    max_records: int


@dataclass(frozen=True)
class Batch:
    """One micro-batch: its end (what the replay stamps as emitted), the records it admitted
    (indices into each side's :class:`Records`) and the PTs it ran with."""

    end_ms: int
    left: list[int]
    right: list[int]
    left_pt: int | None
    right_pt: int | None
    #: the end of a bounded run (a trial): both PTs past every event; a live stream never drains
    drain: bool = False


def paced_batches(left: Records, right: Records, upper_ms: int, p: Pacing) -> list[Batch]:
    """The micro-batches the aligned source makes of these arrivals: one per non-empty slice of
    ``p.batch_ms``, each admitting what :func:`~jobs.join.pacing.pace_steps` allows of the records
    waiting (at most ``p.max_records`` a stream); after the last slice, the records still held
    back, then the drain."""
    recs = {"left": left, "right": right}
    order = {s: np.lexsort((np.arange(len(r)), r.arrival_ms)) for s, r in recs.items()}
    slice_of = {s: np.asarray(recs[s].arrival_ms, dtype=np.int64)[order[s]] // p.batch_ms for s in SIDES}
    slices = np.unique(np.concatenate([slice_of["left"], slice_of["right"]]))
    estimators = {s: PTEstimator(sequence_length=p.pt_windows, statistic=p.percentile) for s in SIDES}
    pt: dict[str, int | None] = {"left": None, "right": None}
    waiting: dict[str, list] = {s: [] for s in SIDES}
    at = dict.fromkeys(SIDES, 0)
    batches: list[Batch] = []

    def admit(end_ms: int) -> bool:
        cands = {s: waiting[s][: p.max_records] for s in SIDES}
        taken, _, _ = pace_steps(cands, pt, estimators, upper=upper_ms, drift=p.drift_ms, q=p.percentile)
        for s in SIDES:
            waiting[s] = waiting[s][len(taken[s]) :]
        got = {s: [r.offset for _, r in taken[s]] for s in SIDES}
        batches.append(Batch(end_ms, got["left"], got["right"], pt["left"], pt["right"]))
        return bool(got["left"] or got["right"])

    for sl in slices:
        for s in SIDES:
            r, o, i = recs[s], order[s], at[s]
            while i < len(o) and slice_of[s][i] == sl:
                k = int(o[i])
                waiting[s].append(((s, 0), ReadAhead(k, int(r.arrival_ms[k]), int(r.t_ms[k]), True)))
                i += 1
            at[s] = i
        admit(int((sl + 1) * p.batch_ms))
    end = int((slices[-1] + 1) * p.batch_ms) if len(slices) else 0
    while (waiting["left"] or waiting["right"]) and admit(end):
        pass
    batches.append(Batch(end, [], [], DRAIN_PT, DRAIN_PT, drain=True))
    return batches


@dataclass
class Answers:
    """What the operator answered per left event, and the peak of the events it held."""

    first_matched: np.ndarray
    final_matched: np.ndarray
    decided: np.ndarray
    #: per first-answer output row: (left index, latency in s); the drain's rows only when counted
    latency_left: list[int] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)
    peak_events: int = 0
    micro_batches: int = 0
    counts: dict[str, int] = field(default_factory=dict)


def _held(state: KeyState) -> int:
    return len(state.lefts) + len(state.rights) + len(state.amendable)


def _changes_at(state: KeyState, rules: Rules) -> tuple[int | None, int | None]:
    """When a step with no records can change this key: once the right PT reaches the first value
    (a window closes, a non-match stops being amendable), or the left PT passes the second (a right
    event no left event can match any more is let go, an id is forgotten); None: never by that PT.
    Between them a step is a no-op: the engine's timer for a key whose ids wait for a lagging left
    PT fires every micro-batch and does nothing (at a 1-minute trigger, most of the steps)."""
    by_right = [e.t + rules.upper for e in state.lefts]
    if rules.horizon is not None:
        by_right += [a.left.t + rules.upper + rules.horizon for a in state.amendable]
    first_left = min((e.t for e in state.lefts), default=None)
    # a right event is let go once min(left PT, open lefts) + lower passes it: the open lefts close by the right PT
    by_left = [e.t - rules.lower for e in state.rights if first_left is None or e.t < first_left + rules.lower]
    held = {("l", e.id) for e in state.lefts} | {("r", e.id) for e in state.rights}
    held |= {("l", a.left.id) for a in state.amendable}
    by_left += [until for k, until in state.seen.items() if k not in held]
    return min(by_right, default=None), min(by_left, default=None)


def _unpark(entry: tuple[int, int, object], parked: dict, todo: dict) -> list:
    """A parked key whose PT has come, unless the entry is stale or the key is stepped anyway."""
    _, t, k = entry
    if parked.get(k) != t or k in todo:
        return []
    del parked[k]
    return [(k, t)]


def run_operator(
    batches: list[Batch],
    left: Records,
    right: Records,
    rules: Rules,
    *,
    drain_latency: bool = True,
    skip_idle: bool = True,
) -> Answers:
    """The operator over ``batches``, per join key, as the engine steps it: in every micro-batch
    (its tick reaches every shard), each key with records or whose next timer is due by the
    micro-batch's right PT, with its PTs.

    ``drain_latency``: count the latency of the rows the drain emits (a trial's, which ends); a live
    stream's prediction does not (its windows close by the data that keeps coming). ``skip_idle``:
    a due key waits until a step can change it (:func:`_changes_at`), the same answers in a fraction
    of the steps."""
    n = len(left)
    ans = Answers(np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool))
    ans.micro_batches = len(batches)
    states: dict = {}
    dues: dict = {}
    # (at, tie, key) heaps; an entry is stale unless its tie is the key's latest
    timers: list[tuple[int, int, object]] = []  # the engine's: its next timer, by the right PT
    parked_r: list[tuple[int, int, object]] = []  # due, waiting for the right PT to change it
    parked_l: list[tuple[int, int, object]] = []  # due, waiting for the left PT to change it
    parked: dict = {}
    tie = held = 0
    for b in batches:
        todo: dict = {}
        for i in b.left:
            e = Event(int(left.t_ms[i]), int(left.arrival_ms[i]), 0, i, left.ids[i], i)
            todo.setdefault(left.keys[i], ([], []))[0].append(e)
        for j in b.right:
            e = Event(int(right.t_ms[j]), int(right.arrival_ms[j]), 0, j, right.ids[j], j)
            todo.setdefault(right.keys[j], ([], []))[1].append(e)
        lpt, rpt = b.left_pt, b.right_pt
        woken: list = []
        while timers and rpt is not None and timers[0][0] <= rpt:
            due, t, k = heapq.heappop(timers)
            if dues.get(k) == due and k not in todo:
                woken.append((k, t))
        eff = lpt if lpt is not None else rules.left_pt_bound(rpt)  # what eviction goes by
        while parked_r and rpt is not None and parked_r[0][0] <= rpt:
            woken += _unpark(heapq.heappop(parked_r), parked, todo)
        while parked_l and eff is not None and parked_l[0][0] < eff:
            woken += _unpark(heapq.heappop(parked_l), parked, todo)
        for k, t in woken:
            by_r, by_l = _changes_at(states[k], rules) if skip_idle else (None, None)
            if (
                (by_r is None and by_l is None)
                or (by_r is not None and rpt is not None and by_r <= rpt)
                or (by_l is not None and eff is not None and eff > by_l)
            ):
                todo[k] = ([], [])
                continue
            parked[k] = t
            if by_r is not None:
                heapq.heappush(parked_r, (by_r, t, k))
            if by_l is not None:
                heapq.heappush(parked_l, (by_l, t, k))
        for k, (lefts, rights) in todo.items():
            parked.pop(k, None)
            state = states.pop(k, None) or KeyState()
            held -= _held(state)
            out = step(state, rules, lefts, rights, lpt, rpt)
            for li, ri in out.pairs:
                ans.decided[li] = True
                if drain_latency or not b.drain:
                    t = left.t_ms[li] if ri is None else max(left.t_ms[li], right.t_ms[ri])
                    ans.latency_left.append(li)
                    ans.latency_s.append((b.end_ms - int(t)) / 1000)
                if ri is not None:
                    ans.first_matched[li] = ans.final_matched[li] = True
            for li, _ri, _rev in out.corrections:
                ans.final_matched[li] = True
            for name, c in out.counts.items():
                ans.counts[name] = ans.counts.get(name, 0) + c
            dues.pop(k, None)
            if not state.empty():
                states[k] = state
                held += _held(state)
                when = next_timer(state, rules)
                if when is not None:
                    dues[k] = when
                    tie += 1
                    heapq.heappush(timers, (when, tie, k))
        ans.peak_events = max(ans.peak_events, held)
    return ans


def evaluate_paced(
    left: Records,
    right: Records,
    windows: list[tuple[int, int]],
    rules: Rules,
    pacing: Pacing,
    *,
    in_days: np.ndarray,
    window_rate: dict[tuple[int, int], float],
    bytes_per_event: float,
    drain_latency: bool = True,
    on_window: Callable[[int, int], None] | None = None,
) -> tuple[pd.DataFrame, dict[tuple[int, int], Answers]]:
    """Every window (seconds) run as the paced engine: the rows of :data:`jobs.accuracy.tradeoff.COLUMNS`
    plus :data:`FIRST_ANSWER_RATE`, over the left events ``in_days`` (a mask over ``left``); and each
    window's :class:`Answers`. ``rules`` gives everything but the window; ``drain_latency`` as
    :func:`run_operator`'s; ``on_window(done, total)`` after each window (each is a run of the
    rules: seconds)."""
    n = int(np.count_nonzero(in_days))
    rows, answers = [], {}
    for upper in sorted({b for _, b in windows}):
        batches = paced_batches(left, right, upper * 1000, pacing)
        for a, b in sorted(w for w in windows if w[1] == upper):
            rules_ab = replace(rules, lower=a * 1000, upper=b * 1000)
            ans = run_operator(batches, left, right, rules_ab, drain_latency=drain_latency)
            answers[(a, b)] = ans
            if on_window:
                on_window(len(answers), len(windows))
            lat = np.asarray(ans.latency_s)[in_days[np.asarray(ans.latency_left, dtype=np.int64)]]
            final = int(np.count_nonzero(ans.final_matched & in_days))
            first = int(np.count_nonzero(ans.first_matched & in_days))
            final_rate, first_rate = (final / n, first / n) if n else (float("nan"), float("nan"))
            rows.append(
                (a, b, 0, 0, n, final, final_rate, window_rate.get((a, b), float("nan")), p99(lat),
                 ans.peak_events * bytes_per_event, first_rate)
            )  # fmt: skip
    return pd.DataFrame(rows, columns=[*COLUMNS, FIRST_ANSWER_RATE]), answers


def per_ds_rates(ans: Answers, left_ds: np.ndarray, days: list[str]) -> dict[str, float]:
    """The final match rate per ds (``left_ds``: each left event's index into ``days``, -1 outside)."""
    return {
        ds: float(ans.final_matched[left_ds == i].mean()) if np.any(left_ds == i) else float("nan")
        for i, ds in enumerate(days)
    }


# ------------------------------------------------------------------------------ the shell: the landed records in


def engine_note(spec: JoinSpec) -> list[str]:
    """What a paced spec's reader must know first: the window is its only knob here."""
    if spec.streaming.engine != Engine.paced:
        return []
    horizon = spec.corrections.horizon
    return [
        "the spec runs the paced engine: each window is predicted by running its pacing and its operator over the "
        "landed records (jobs.accuracy.paced_model); it has no watermark delays (it waits for PTs, paper §5.2); "
        + (
            f"the match rate is the final answer, late corrections within {format_duration(horizon)} merged in, "
            "and the p99 latency the first answer's"
            if horizon is not None
            else "no late corrections: the match rate is the first answer"
        )
    ]


def paced_grid(
    spec: JoinSpec,
    obs: Any,
    rec: dict[str, Any],
    cadence: Cadence,
    windows: list[tuple[int, int]],
    progress: list,
    on_window: Callable[[int, int], None] | None = None,
) -> tuple[pd.DataFrame, dict, float, dict]:
    """The paced engine's candidates (:func:`evaluate_paced`) over the records a trial of these days
    replays (``rec``: :func:`jobs.accuracy.tradeoff.observe`'s, with ``keys``): (grid, per window
    its final rates per ds, bytes per held event, per window the micro-batches its run makes)."""
    from jobs.join.paced_operator import rules_of
    from jobs.steps.replay_live import replay_span_ms

    # the records a replay-as-live trial of these days reads (recommend --verify runs one)
    start_ms, end_ms = replay_span_ms([date.fromisoformat(d) for d in obs.days], spec.timezone)
    sides = {side: rec[side][rec[side].a.between(start_ms, end_ms - 1)].reset_index(drop=True) for side in rec}

    def records(side: str) -> Records:
        r = sides[side]
        t, a = (r.e // 1000).to_numpy(np.int64), r.a.to_numpy(np.int64)
        return Records(list(r.k), t, a, list(r.id))

    p = spec.streaming.paced
    pacing = Pacing(
        cadence.batch_s * 1000, int(p.max_drift.total_seconds() * 1000), p.pt_percentile, p.pt_windows,
        p.max_records_per_batch,
    )  # fmt: skip
    in_days = sides["left"].ds.isin(obs.days).to_numpy()
    bpe = paced_bytes_per_event(progress) or DEFAULT_BYTES_PER_ROW
    grid, answers = evaluate_paced(
        records("left"), records("right"), windows, rules_of(spec), pacing,
        in_days=in_days, window_rate=window_rates(obs, windows), bytes_per_event=bpe,
        drain_latency=cadence.replay, on_window=on_window,  # a trial drains at its end; a live stream does not
    )  # fmt: skip
    left_ds = pd.Categorical(sides["left"].ds, categories=obs.days).codes.astype(np.int64)
    per_ds = {w: per_ds_rates(a, left_ds, obs.days) for w, a in answers.items()}
    return grid, per_ds, bpe, {w: a.micro_batches for w, a in answers.items()}


def paced_bytes_per_event(progress: list[dict]) -> float | None:
    """Bytes per held event the paced operator's state stored, from its sampled size counters."""
    from jobs.storage.progress import paced_counters

    stored = rows = 0
    for p in progress[-20:]:
        c = paced_counters(p)
        stored, rows = stored + int(c.get("state_bytes") or 0), rows + int(c.get("state_rows") or 0)
    return stored / rows if rows > 100 else None


__all__ = [
    "FIRST_ANSWER_RATE",
    "Answers",
    "Batch",
    "Pacing",
    "Records",
    "engine_note",
    "evaluate_paced",
    "paced_batches",
    "paced_bytes_per_event",
    "paced_grid",
    "per_ds_rates",
    "run_operator",
]

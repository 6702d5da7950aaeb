"""Stream synchronization (paper §5.2): what each of a join's two streams may admit of the records
waiting, so that their processing times stay at ``left_PT + upper = right_PT``. Pure: records in
arrival order with their event times in, the admitted prefixes and the moved PTs out; the paced
engine's source (:mod:`jobs.storage.aligned_source`) reads Kafka around it.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

import numpy as np

from jobs.join.pt_estimator import PTEstimator

SIDES = ("left", "right")
#: Pacing steps per micro-batch at most (:func:`pace_steps`); ``max_records_per_batch`` bounds it too.
MAX_STEPS = 256
#: Records a stream admits per pacing step while a PT is still unknown (:func:`pace_steps`).
WARMUP_RECORDS = 200
#: The side of the source's row that carries no record, only its micro-batch's PTs: every micro-batch
#: has one, which the operator hands every shard (:func:`jobs.join.paced_operator.paced_join`).
TICK = "tick"
#: Both PTs once a bounded run drains (its last windows close with what was read): 9999-12-31T23:59:59Z.
DRAIN_PT = 253_402_300_799_000


@dataclass
class ReadAhead:
    """A record the source read ahead: its offset, record timestamp (arrival), event time (None:
    unreadable) and whether that event time is within ``timestamp_validity`` (else kept out of PT)."""

    offset: int
    timestamp: int
    event_time: int | None
    valid: bool


#: Each stream's records waiting, in arrival order: ((topic, partition), the record).
Candidates = dict[str, list[tuple[tuple[str, int], ReadAhead]]]


def pace(
    candidates: Candidates, pt: dict[str, int | None], *, upper: int, drift: int, q: float
) -> tuple[Candidates, list[str]]:
    """One pacing step: what each stream admits of its records waiting in arrival order, given the
    two PTs so far; and which stream is paused.

    The synchronization point is ``right_PT = left_PT + upper``. A right PT past it closes left
    windows before their on-time left events are read (they would count as late), so the right
    stream never passes it; a left PT past it only makes left events wait, so the left stream may
    run up to ``drift`` ahead. No bound while the other's PT is unknown or it has nothing to read
    (idle). When neither fits (the next records lie further apart than the drift), the stream that
    is not paused steps to its next records, the left one when neither is paused."""
    idle = [s for s in SIDES if not candidates[s]]
    lpt, rpt = pt["left"], pt["right"]
    bound: dict[str, float | None] = {
        "left": rpt - upper + drift if rpt is not None and "right" not in idle else None,
        "right": lpt + upper if lpt is not None and "left" not in idle else None,
    }
    paused = []
    if lpt is not None and rpt is not None and not idle:
        if lpt + upper - rpt > drift:
            paused = ["left"]
        elif rpt > lpt + upper:
            paused = ["right"]
    admitted = {s: [] if s in paused else _admissible(candidates[s], bound[s], q) for s in SIDES}
    if not admitted["left"] and not admitted["right"] and len(idle) < 2:
        side = "right" if paused == ["left"] else "left"
        side = side if candidates[side] else ("right" if side == "left" else "left")
        first = next((p.event_time for _, p in candidates[side] if p.valid), None)
        admitted[side] = _admissible(candidates[side], None if first is None else first + drift, q)
        admitted[side] = admitted[side] or candidates[side][:1]
    return admitted, paused


def pace_steps(
    candidates: Candidates,
    pt: dict[str, int | None],
    estimators: dict[str, PTEstimator],
    *,
    upper: int,
    drift: int,
    q: float,
    max_steps: int = MAX_STEPS,
    warmup: int = WARMUP_RECORDS,
    read_to_end: Container[str] = (),
) -> tuple[Candidates, list[str], int]:
    """One micro-batch's admission as a run of :func:`pace` steps: each step admits what the PTs so far
    allow, feeds each stream's estimator with what it admitted (a step is the estimator's micro-
    batch) and so moves the PTs for the next step. Without it a micro-batch moved each PT by at most
    ``drift`` (the streams leapfrog: one admits up to the other's bound, then waits for the next
    micro-batch), so a backlog, a 60-minute replay slice or a trigger longer than the drift fell
    behind. Stops when nothing more is admitted, or when a stream has used up what was read ahead of
    it (it may hold more, which the next micro-batch reads: treating it as idle here would let the
    other run past it), unless it is in ``read_to_end`` (what was read ahead of it is all this run
    will read of it: a bounded run's end): it is idle from the next step on, and the other one goes
    on in this micro-batch instead of the next (a backlog's tail took a micro-batch more). While
    either PT is unknown (an estimator needs its first ascending windows, ``pt_windows`` steps),
    nothing bounds either stream, so each admits at most ``warmup`` records a step: the PTs are
    known a few hundred records in, not after as many micro-batches of unbounded reading (in a
    backlog with the right stream 2 h behind, the left ran ~3 h ahead in its first five
    micro-batches, whose events were most of the state's peak). ``pt`` is updated in place; returns
    what each stream admitted, what the last step paused, and the steps taken."""
    taken: Candidates = {s: [] for s in SIDES}
    remaining = {s: list(candidates[s]) for s in SIDES}
    paused: list[str] = []
    steps = 0
    while steps < max_steps:
        admitted, paused = pace(remaining, pt, upper=upper, drift=drift, q=q)
        if pt["left"] is None or pt["right"] is None:
            admitted = {side: recs[:warmup] for side, recs in admitted.items()}
        if not admitted["left"] and not admitted["right"]:
            break
        steps += 1
        for side in SIDES:
            recs = admitted[side]
            taken[side].extend(recs)
            remaining[side] = remaining[side][len(recs) :]
            times = [p.event_time for _, p in recs if p.valid]
            if times:
                state = estimators[side].update(times)
                if state.pt is not None:
                    pt[side] = int(state.pt)
        if any(candidates[s] and not remaining[s] and s not in read_to_end for s in SIDES):
            break
    return taken, paused, steps


def _admissible(
    candidates: list[tuple[tuple[str, int], ReadAhead]], bound: float | None, q: float
) -> list[tuple[tuple[str, int], ReadAhead]]:
    """The longest prefix (in arrival order) whose valid event times' ``q`` percentile, what the
    stream's PT would become, stays within ``bound``; all of them with no bound."""
    if bound is None or not candidates:
        return candidates
    times = np.array([p.event_time if p.valid else np.nan for _, p in candidates], dtype=np.float64)

    def within(n: int) -> bool:
        head = times[:n]
        head = head[~np.isnan(head)]
        return head.size == 0 or float(np.percentile(head, q)) <= bound

    lo, hi = 0, len(candidates)  # the largest n with within(n), by bisection (the statistic grows with n)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if within(mid):
            lo = mid
        else:
            hi = mid - 1
    return candidates[:lo]

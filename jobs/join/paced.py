"""The paper's join operator (§5, §6.6, §6.7), per join key: what the paced engine keeps and emits.

Pure Python over one key's events, no Spark: :mod:`jobs.join.paced_operator` runs it inside
Spark's ``transformWithStateInPandas``, one call per key and micro-batch.

Two clocks drive it, each stream's **processing time** (PT, §5.3: a low watermark of the event
times read so far, :class:`jobs.join.pt_estimator.PTEstimator`), which the aligned source
(:mod:`jobs.storage.aligned_source`) computes per micro-batch and keeps synchronized
(``left_PT + upper = right_PT``, §5.2):

* a **left** event at ``t`` waits until the right stream's PT passes its window's end
  (``right_PT >= t + upper``): then the right events of its window have (very likely) all been read.
  1-to-1 emits the first-arrived match as soon as one is buffered and keeps nothing more for that
  left event; 1-to-n emits its pairs at the window's close; left outer emits a left event with no
  match as a non-match there.
* a **right** event at ``r`` is buffered until no left event can still match it: every open left
  event of its key is later than ``r - lower`` and so is the left stream's PT
  (``r < min(left_PT, open lefts) + lower``).
* per-key caps (§6.6): past ``per_key_cap`` buffered events of a side, the oldest left event is
  closed at once (its matches so far, or a non-match) and the oldest right event is evicted;
  both counted.
* late corrections (beyond the paper, ``corrections.horizon``): a left event closed as a non-match
  stays until the right PT passes its window's end plus the horizon; a right event of its window
  read meanwhile amends it (a pair with a revision number: 1, then 2, ... for 1-to-n, 1 only for
  1-to-1), counted as ``left_amended``.
* timestamp validity (§6.7) and lateness: a left event whose window closed before it was read is
  matched against what is buffered and closed at once (``left_late_closed``); a right event no open
  or future left event can match is dropped on arrival (``right_late_dropped``). Event times
  outside ``timestamp_validity`` are the source's to keep out of PT (and quarantined by parsing).

Event times are epoch milliseconds. A clock that is still unknown (a PT before its first ascending
sequence) is None: nothing closes, nothing is evicted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Counters the operator reports per micro-batch (progress log ``paced``).
METRICS = (
    "left_late_closed",
    "right_late_dropped",
    "left_cap_closed",
    "right_cap_evicted",
    "left_duplicates",
    "right_duplicates",
    "left_amended",
)


@dataclass(frozen=True)
class Event:
    """One event of a side as the operator holds it: when it happened and arrived (the 1-to-1
    order: arrival, then Kafka position), its id, and its output columns' values (opaque here:
    carried to the output as they are; the Spark operator's JSON text of them)."""

    t: int
    arrival: int
    partition: int
    offset: int
    id: str
    row: Any

    @property
    def arrival_order(self) -> tuple[int, int, int]:
        return (self.arrival, self.partition, self.offset)


@dataclass(frozen=True)
class Rules:
    """The spec's parts the operator needs (milliseconds)."""

    lower: int
    upper: int
    outer: bool
    one_to_one: bool
    per_key_cap: int | None
    #: How far the aligned source lets one stream's PT run past the synchronization point: a
    #: micro-batch with no rows of a key (a timer) bounds the left PT by ``right_PT - upper - max_drift``.
    max_drift: int
    #: ``corrections.horizon``: how long past its window's end a non-match may still be amended.
    horizon: int | None = None

    def left_pt_bound(self, right_pt: int | None) -> int | None:
        """The least the left stream's PT can be when the right's is ``right_pt`` (synchronized)."""
        return None if right_pt is None else right_pt - self.upper - self.max_drift


@dataclass
class Amendable:
    """A left event emitted as a non-match, and the corrections emitted for it so far."""

    left: Event
    revisions: int = 0


@dataclass
class KeyState:
    """One key's buffers: open left events, buffered right events, the ids seen (with the left PT
    past which they may be forgotten) to drop a record its producer re-sent, and the non-matches
    that may still be amended."""

    lefts: list[Event] = field(default_factory=list)
    rights: list[Event] = field(default_factory=list)
    seen: dict[tuple[str, str], int] = field(default_factory=dict)
    amendable: list[Amendable] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.lefts and not self.rights and not self.seen and not self.amendable


@dataclass
class Output:
    """What one step emits: (left row, right row or None) pairs, corrections (left row, right row,
    revision), and its counters."""

    pairs: list[tuple[Any, Any | None]] = field(default_factory=list)
    corrections: list[tuple[Any, Any, int]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n


def step(
    state: KeyState,
    rules: Rules,
    new_lefts: list[Event],
    new_rights: list[Event],
    left_pt: int | None,
    right_pt: int | None,
) -> Output:
    """Take one micro-batch's events of a key (possibly none: a timer), emit what is decided.

    Most steps are a timer's, with no events, and most parts below then have nothing to do: each
    is skipped when what it works on is empty (the same answers; the paced model's operator runs
    take 0.7-0.8x the CPU, BENCHMARKS "The paced operator's timer steps")."""
    out = Output()
    lefts = _unseen(state, new_lefts, "l", rules, out) if new_lefts else []
    rights = _unseen(state, new_rights, "r", rules, out) if new_rights else []

    used = _amend(state, rules, rights, right_pt, out)
    if rights:  # state.rights is kept in arrival order: every other change only filters it
        state.rights = sorted([*state.rights, *rights], key=_arrival_order)
    if rules.one_to_one:  # each open left event takes the first-arrived buffered match at once
        waiting = []
        for left in [*state.lefts, *sorted(lefts, key=_arrival_order)]:
            match = _first_match(left, state.rights, rules)
            if match is not None:
                out.pairs.append((left.row, match.row))
            else:
                waiting.append(left)
        state.lefts = waiting
    else:
        state.lefts.extend(lefts)

    if right_pt is not None:  # a window closes once the right PT passes its end
        closes_by = right_pt - rules.upper
        late = {id(e) for e in lefts if e.t <= closes_by}
        if state.lefts:
            _close(state, rules, out, lambda e: e.t <= closes_by)
        if late:  # new events read after their window closed, now closed (1-to-1: matched at once, too)
            out.count("left_late_closed", sum(1 for e in lefts if id(e) in late and e not in state.lefts))

    if rules.per_key_cap is not None:
        cap = rules.per_key_cap
        while len(state.lefts) > cap:
            oldest = min(state.lefts, key=lambda e: (e.t, e.arrival_order))
            _close(state, rules, out, lambda e, o=oldest: e is o)
            out.count("left_cap_closed")
        if len(state.rights) > cap:
            by_age = sorted(state.rights, key=lambda e: (e.t, e.arrival_order))
            evicted = {id(e) for e in by_age[: len(state.rights) - cap]}
            state.rights = [e for e in state.rights if id(e) not in evicted]
            out.count("right_cap_evicted", len(evicted))

    eviction_pt = left_pt if left_pt is not None else rules.left_pt_bound(right_pt)
    horizon = _eviction_horizon(state, rules, eviction_pt) if state.rights else None  # nothing to evict
    if horizon is not None:
        kept = [e for e in state.rights if e.t >= horizon]
        if len(kept) < len(state.rights):
            fresh = {id(e) for e in rights} - used
            dropped = sum(1 for e in state.rights if e.t < horizon and id(e) in fresh)
            if dropped:
                out.count("right_late_dropped", dropped)
            state.rights = kept
    _forget(state, left_pt)
    out.counts = {k: v for k, v in out.counts.items() if v}
    return out


def _arrival_order(e: Event) -> tuple[int, int, int]:
    return (e.arrival, e.partition, e.offset)


def _forget(state: KeyState, left_pt: int | None) -> None:
    """Let go of the ids a re-sent copy could no longer be joined by (see :func:`_unseen`), judged
    by the left PT itself: a bound of it derived from the right PT does not hold while the left
    stream is idle (the right then runs past the synchronization point, at every replay slice's
    end), and a left event read after its id was forgotten joined its buffered partners again. An
    event still held keeps its id. After this micro-batch's records were checked, since its PTs may
    have jumped past them (a backlog, a long replay slice) while a re-sent copy arrives in it."""
    if left_pt is None:
        return
    past = [k for k, until in state.seen.items() if until < left_pt]
    if not past:
        return
    held = {("l", e.id) for e in state.lefts} | {("r", e.id) for e in state.rights}
    held |= {("l", a.left.id) for a in state.amendable}
    for k in past:
        if k not in held:
            del state.seen[k]


def next_timer(state: KeyState, rules: Rules) -> int | None:
    """The right PT (the operator's event-time watermark) at which this key has something to do:
    its first open window to close, or its first right event a timer may evict (the left PT then
    bounded by :meth:`Rules.left_pt_bound`), or its first seen id to forget (once the left PT,
    synchronized a window's upper bound behind the right one, can have passed it)."""
    # +1: at exactly that right PT the bound reaches the event itself, which stays (a timer fired
    # once is gone: due then must be past it)
    due = []
    if state.lefts:
        due.append(min(e.t for e in state.lefts) + rules.upper)
    if state.rights:
        due.append(min(e.t for e in state.rights) - rules.lower + rules.upper + rules.max_drift + 1)
    if state.seen:
        due.append(min(state.seen.values()) + rules.upper + 1)
    if rules.horizon is not None and state.amendable:
        due.append(min(a.left.t for a in state.amendable) + rules.upper + rules.horizon)
    return min(due) if due else None


def _amend(state: KeyState, rules: Rules, rights: list[Event], right_pt: int | None, out: Output) -> set[int]:
    """Corrections: the new right events (in arrival order) that fall in the window of a left event
    emitted as a non-match; those past the horizon are let go. Returns the ids of the right events used."""
    if rules.horizon is None or not state.amendable:
        return set()
    horizon = rules.horizon
    state.amendable = [a for a in state.amendable if right_pt is None or right_pt < a.left.t + rules.upper + horizon]
    used: set[int] = set()
    for r in sorted(rights, key=lambda e: e.arrival_order):
        for a in state.amendable:
            if _in_window(a.left, r, rules) and not (rules.one_to_one and a.revisions):
                a.revisions += 1
                out.corrections.append((a.left.row, r.row, a.revisions))
                out.count("left_amended")
                used.add(id(r))
    if rules.one_to_one:
        state.amendable = [a for a in state.amendable if not a.revisions]
    return used


def _unseen(state: KeyState, events: list[Event], side: str, rules: Rules, out: Output) -> list[Event]:
    """The events whose id this key has not seen (a re-sent record is dropped, counted); the new
    ones are remembered until no event of their window can arrive any more."""
    fresh = []
    name = "left_duplicates" if side == "l" else "right_duplicates"
    for e in events:
        if (side, e.id) in state.seen:
            out.count(name)
            continue
        # the left PT past which a copy joins nothing any more (and a drift more): a left's, once
        # the right events of its window are let go; a right's, once it is
        state.seen[(side, e.id)] = e.t - rules.lower + rules.max_drift + (rules.upper if side == "l" else 0)
        fresh.append(e)
    return fresh


def _in_window(left: Event, right: Event, rules: Rules) -> bool:
    return left.t + rules.lower <= right.t <= left.t + rules.upper


def _first_match(left: Event, rights: list[Event], rules: Rules) -> Event | None:
    """The first-arrived buffered right event in the left event's window (``rights`` are kept in
    arrival order)."""
    for r in rights:
        if _in_window(left, r, rules):
            return r
    return None


def _close(state: KeyState, rules: Rules, out: Output, due) -> None:
    """Close the open left events ``due`` says: 1-to-n emits their pairs, and a left outer join
    a non-match for one with none; a 1-to-1 left event still open had no match."""
    still = []
    for left in state.lefts:
        if not due(left):
            still.append(left)
            continue
        matches = [] if rules.one_to_one else [r for r in state.rights if _in_window(left, r, rules)]
        out.pairs.extend((left.row, r.row) for r in matches)
        if not matches and rules.outer:
            out.pairs.append((left.row, None))
            if rules.horizon is not None:
                state.amendable.append(Amendable(left))
    state.lefts = still


def _eviction_horizon(state: KeyState, rules: Rules, left_pt: int | None) -> int | None:
    """Right events earlier than this can match no open or future left event of the key."""
    if left_pt is None:
        return None
    earliest = min([left_pt, *(e.t for e in state.lefts)])
    return earliest + rules.lower

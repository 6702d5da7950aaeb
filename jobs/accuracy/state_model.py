"""The state a native stream holds at its peak, per candidate: the join's window rows and the
event-id de-duplication's ids, as rows and as bytes.

A row stays in state until the global watermark passes it, and that trails the event-time front
by the larger watermark delay plus the micro-batch that eviction lags (as the unmatched rows'
latency has it in :mod:`jobs.accuracy.tradeoff`; the late filter's lag is a batch longer). So:

* the join holds a right event for ``-lower`` + that trail, a left event for ``upper`` + it;
* the de-duplication holds each side's ids for the side's own delay + it (Spark's
  ``dropDuplicatesWithinWatermark`` keeps an id until the watermark passes its event time plus
  the delay);

each times the side's peak arrival rate (its busiest hour), and times the bytes a row of that
operator took where its state held the most rows. Replayed as live at three window spans, the
join held 0.91-0.98× the rows predicted and the de-duplication 0.96× (BENCHMARKS.md, "The join's
state as a live stream holds it").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from jobs.accuracy.lateness import Cadence
from jobs.storage.progress import DEDUP_STATE, JOIN_STATE, state_operators

#: Bytes per buffered join row until the stream's state store has measured it (~200 B of payload, x2 in RocksDB).
DEFAULT_BYTES_PER_ROW = 400.0
#: Bytes per de-duplicated id until measured (an id and its expiry).
DEFAULT_ID_BYTES_PER_ROW = 100.0
#: The share of a stream's micro-batches, those holding the most rows, whose bytes per row count.
PEAK_SHARE = 0.1


@dataclass(frozen=True)
class MemoryModel:
    """State rows ≈ peak rate × time in state; × bytes per buffered row (measured when it ran)."""

    left_rows_per_s: float
    right_rows_per_s: float
    bytes_per_row: float
    id_bytes_per_row: float = DEFAULT_ID_BYTES_PER_ROW

    @staticmethod
    def _trail(dl: float, dr: float, cadence: Cadence) -> float:
        return max(dl, dr) + cadence.batch_s * cadence.evict_lag

    def rows(self, lower_s: float, upper_s: float, dl: float, dr: float, cadence: Cadence) -> float:
        """The join's window rows at their peak."""
        trail = self._trail(dl, dr, cadence)
        return self.right_rows_per_s * (max(-lower_s, 0) + trail) + self.left_rows_per_s * (max(upper_s, 0) + trail)

    def id_rows(self, dl: float, dr: float, cadence: Cadence) -> float:
        """The de-duplication's ids at their peak (whatever the window)."""
        trail = self._trail(dl, dr, cadence)
        return self.left_rows_per_s * (dl + trail) + self.right_rows_per_s * (dr + trail)

    def state_rows(self, lower_s: float, upper_s: float, dl: float, dr: float, cadence: Cadence) -> dict[str, float]:
        """Each operator's rows at their peak: what ``recommend --verify`` holds a trial to."""
        return {JOIN_STATE: self.rows(lower_s, upper_s, dl, dr, cadence), DEDUP_STATE: self.id_rows(dl, dr, cadence)}

    def bytes(self, lower_s: float, upper_s: float, dl: float, dr: float, cadence: Cadence) -> float:
        return (
            self.rows(lower_s, upper_s, dl, dr, cadence) * self.bytes_per_row
            + self.id_rows(dl, dr, cadence) * self.id_bytes_per_row
        )


def operator_state(progress: list[dict], kind: str) -> list[tuple[int, int]]:
    """Per micro-batch, (rows, memory bytes) of the state operators whose name holds ``kind``
    (:data:`JOIN_STATE` or :data:`DEDUP_STATE`), summed over them."""
    out = []
    for p in progress:
        ops = state_operators(p.get("stateOperators") or [], kind)
        out.append((sum(op.get("numRowsTotal") or 0 for op in ops), sum(op.get("memoryUsedBytes") or 0 for op in ops)))
    return out


def peak_rows(progress: list[dict], kind: str) -> int:
    """The most rows those operators held after a micro-batch."""
    return max((rows for rows, _ in operator_state(progress, kind)), default=0)


def _measured_bytes_per_row(progress: list[dict], kind: str = JOIN_STATE) -> float | None:
    """Bytes per row where the operator's state was largest: the median over the tenth of the
    micro-batches holding the most rows. A store's memory has a part that does not shrink with
    its rows (RocksDB's memtables and cache), so batches holding few rows (a quiet hour, the tail
    of a trial) would price each row at that part over a few: 149 KB a join row at the end of a
    replay whose peak held ~1 KB a row (BENCHMARKS, "The join's state as a live stream holds it")."""
    per_batch = [(rows, mem) for rows, mem in operator_state(progress, kind) if rows > 100 and mem > 0]
    if not per_batch:
        return None
    per_batch.sort(reverse=True)
    top = per_batch[: max(1, int(len(per_batch) * PEAK_SHARE))]
    return float(np.median([mem / rows for rows, mem in top]))


def _peak_rate(arrival_ms: pd.Series) -> float:
    hourly = pd.Series(1, index=pd.to_datetime(arrival_ms, unit="ms")).resample("1h").sum()
    return float(hourly.max() / 3600) if len(hourly) else 0.0


def memory_model(progress: list[dict], records: dict[str, Any]) -> MemoryModel:
    """State per candidate: each stream's peak arrival rate in ``records`` (from
    :func:`jobs.accuracy.tradeoff.observe`), times the bytes per row each operator's state store
    measured (``progress``), else :data:`DEFAULT_BYTES_PER_ROW` / :data:`DEFAULT_ID_BYTES_PER_ROW`."""
    return MemoryModel(
        _peak_rate(records["left"].a),
        _peak_rate(records["right"].a),
        _measured_bytes_per_row(progress, JOIN_STATE) or DEFAULT_BYTES_PER_ROW,
        _measured_bytes_per_row(progress, DEDUP_STATE) or DEFAULT_ID_BYTES_PER_ROW,
    )

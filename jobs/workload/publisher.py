"""Publishing a generated workload to Kafka in arrival order.

The publisher (:func:`publish`) is a thin kafka-python shell: it sends ``records`` in arrival order
with the Kafka record timestamp set to ``arrival_ms``; its producer is
:func:`jobs.storage.kafka.producer`.

Command line: ``joinshift generate [--workload FILE] [--dry-run]``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd

log = logging.getLogger("joinshift.workload")


def iter_slices(
    records: pd.DataFrame, slice_minutes: float, *, start_ms: int | None = None, end_ms: int | None = None
) -> Iterator[tuple[int, pd.DataFrame]]:
    """Cut ``records`` (sorted by ``arrival_ms``) into consecutive arrival-time slices: the one
    slicing rule of every paced run (a generated workload's simulation and ``replay-as-live``).

    Yields ``(slice_end_ms, frame)`` for every slice from the one holding ``start_ms`` (default:
    the first record) to the one holding ``end_ms - 1`` (default: the last record), empty slices
    included (simulated real time keeps ticking); a slice holds the records with
    ``slice_end_ms - slice_ms <= arrival_ms < slice_end_ms``. Slice boundaries are multiples of
    the slice length since the epoch, so two runs over the same records cut them identically.
    """
    if slice_minutes <= 0:
        raise ValueError("slice_minutes must be positive")
    arr = records["arrival_ms"].to_numpy(dtype=np.int64)
    if np.any(np.diff(arr) < 0):
        raise ValueError("records must be sorted by arrival_ms")
    if start_ms is None and len(arr) == 0:
        return
    step = int(round(slice_minutes * 60_000))
    first = int(arr[0]) if start_ms is None else start_ms
    last = int(arr[-1]) if end_ms is None else end_ms - 1
    if len(arr) and (int(arr[0]) < first or int(arr[-1]) > last):
        raise ValueError("records arrive outside [start_ms, end_ms)")
    end = (first // step + 1) * step
    pos = 0
    while end - step <= last:
        nxt = int(np.searchsorted(arr, end, side="left"))
        yield end, records.iloc[pos:nxt]
        pos = nxt
        end += step


def _bytes(v: object) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    return str(v).encode("utf-8")


class PublishFailed(RuntimeError):
    """Records the brokers refused: how many, and the first refusal, in one line."""


def publish(
    records: pd.DataFrame,
    bootstrap: str,
    *,
    progress: Callable[[int, int], None] | None = None,
    every: int = 50_000,
    producer: Any = None,
    batch_size: int | None = None,
) -> dict[str, int]:
    """Send every record to its topic, in arrival order, with ``timestamp_ms = arrival_ms``.

    Keys and values are sent as UTF-8, or as they are when they are bytes (a ``None`` key or
    value stays null); an optional ``headers`` column (lists of ``(name, bytes)``) is sent too. The producer batches
    (linger, large batches), compresses with zstd, waits for all in-sync replicas
    (``acks='all'``) and is idempotent, so records keep their order within a partition; records
    with the same key go to the same partition (default partitioner). ``progress(sent, total)``
    is called every ``every`` records and at the end. Returns the number of records sent per
    topic; raises :class:`PublishFailed` if any record could not be sent.

    Publishing slice after slice? Pass one ``producer=jobs.storage.kafka.producer(bootstrap)``
    to every call (it is flushed, not closed) instead of connecting again for each slice.
    """
    from jobs.storage import kafka  # the generator does not need Kafka

    if records.empty:
        return {}
    topics = records["topic"].to_numpy()
    keys = [_bytes(k) for k in records["key"].to_numpy()]
    values = [_bytes(v) for v in records["value"].to_numpy()]
    headers = records["headers"].tolist() if "headers" in records.columns else [None] * len(values)
    stamps = records["arrival_ms"].to_numpy(dtype=np.int64).tolist()
    total = len(values)
    errors: list[BaseException] = []

    def on_error(exc: BaseException) -> None:
        errors.append(exc)

    own = producer is None
    if own:  # batch_size: a topic of the user's own may take smaller batches than ours
        producer = kafka.producer(bootstrap, **({"batch_size": batch_size} if batch_size else {}))
    sent, broken = 0, None
    try:
        for topic, key, value, ts, hs in zip(topics, keys, values, stamps, headers):
            if errors:  # an idempotent producer fails every record after a refused one: stop here
                break
            producer.send(topic, value=value, key=key, headers=hs or None, timestamp_ms=ts).add_errback(on_error)
            sent += 1
            if progress is not None and sent % every == 0:
                progress(sent, total)
        producer.flush()
    except Exception as exc:  # the producer itself failed (its flush raises after a refused batch)
        if not kafka.is_client_error(exc):
            raise
        broken = exc
    finally:
        if own:
            with contextlib.suppress(Exception):  # closing flushes again, and fails again
                producer.close(timeout=0 if broken or errors else None)
    if errors or broken:
        first = errors[0] if errors else broken
        raise PublishFailed(  # which records the brokers took is not known here: the producer is asynchronous
            f"Kafka refused records (first: {type(first).__name__}: {first}) after {sent} of {total} had been "
            "handed to the producer; those before it may be in the topics: mend the cause (a topic's "
            "max.message.bytes, its ACLs) and look at the topics' end offsets before sending again"
        )
    if progress is not None:
        progress(total, total)
    counts = pd.Series(topics).value_counts()
    return {str(t): int(n) for t, n in counts.sort_index().items()}


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

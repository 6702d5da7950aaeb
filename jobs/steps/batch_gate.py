"""A stop that ends a stream between its micro-batches, not inside one.

``StreamingQuery.stop()`` cancels the query's running Spark jobs and interrupts its thread. Called
while a micro-batch writes, it aborts the Delta write (errors logged; here, in both runs tried, a
``StackOverflowError`` in the stream's thread after them), and the next start redoes the batch. Under a backlog a
query is never between micro-batches, so waiting for a pause does not help either.

So each query's ``foreachBatch`` function goes through a :class:`BatchGate`: once a stop is
requested, the function, its micro-batch written, waits at its end ("parked"); the query is then
stopped, which finds no job to cancel; and the function returns, so Spark records the micro-batch
as done (or, interrupted while it does, the next start finds the batch written and skips its
write, as after any crash). A query between triggers, with nothing to read, is stopped at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("joinshift.stream")

#: How long a stop waits for a query's micro-batch in flight to end before it interrupts it (the
#: supervisor's SIGKILL comes 20 s after its SIGTERM).
BATCH_FINISH_S = 12.0


class BatchGate:
    def __init__(self, requested: threading.Event):
        self.requested = requested
        self._parked: dict[str, threading.Event] = {}
        self._release: dict[str, threading.Event] = {}

    def _events(self, name: str) -> tuple[threading.Event, threading.Event]:
        return self._parked.setdefault(name, threading.Event()), self._release.setdefault(name, threading.Event())

    def wrap(self, name: str, write: Callable[[DataFrame, int], None]) -> Callable[[DataFrame, int], None]:
        """``write`` (a ``foreachBatch`` function of the query named ``name``), parked at its end
        once a stop is requested."""
        parked, release = self._events(name)

        def gated(batch: DataFrame, batch_id: int) -> None:
            write(batch, batch_id)
            if self.requested.is_set():
                parked.set()
                release.wait(3 * BATCH_FINISH_S)  # bounded: a gate never holds a stream for good

        return gated

    def stop(self, query: StreamingQuery, finish_s: float = BATCH_FINISH_S) -> None:
        """Stop ``query`` once its micro-batch in flight is written and parked, or at once when it
        waits for its next trigger; after ``finish_s`` whatever it does."""
        parked, release = self._events(query.name)
        deadline = time.monotonic() + finish_s
        while not parked.is_set() and query.isActive and query.status["isTriggerActive"]:
            if time.monotonic() >= deadline:
                log.warning("%s: its micro-batch did not end within %ss: interrupted", query.name, finish_s)
                break
            time.sleep(0.05)
        stopper = threading.Thread(target=query.stop, name=f"stop {query.name}", daemon=True)
        stopper.start()
        while query.isActive and stopper.is_alive():  # until Spark has marked it stopping
            time.sleep(0.02)
        release.set()
        stopper.join()
        log.info("stopped %s%s", query.name, " after its micro-batch" if parked.is_set() else "")

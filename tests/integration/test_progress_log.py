"""The progress log holds every micro-batch a query ran, once, as soon as the query ends: the
listener on Spark's event bus may lag or come after; readers (the watermark's drop count, the
next increment's lag) must not depend on it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.integration


def test_a_finished_query_is_on_record_once_whoever_writes_first(spark, test_root):
    from jobs.storage.progress import ProgressRecorder, query_name, read_progress, settle_log

    src = test_root / "progress_log" / "in"
    src.mkdir(parents=True)
    for i in range(3):
        (src / f"part-{i}.json").write_text(json.dumps({"n": i}) + "\n")
    log_path = str(test_root / "progress_log" / "progress.jsonl")
    name = query_name("progress_log", "stream_join")
    # no listener yet: the query's own record is the only writer
    q = (
        spark.readStream.schema("n INT")
        .option("maxFilesPerTrigger", 1)
        .json(str(src))
        .writeStream.format("noop")
        .queryName(name)
        .option("checkpointLocation", str(test_root / "progress_log" / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    ran = [p["batchId"] for p in q.recentProgress]
    assert len(ran) >= 3

    settle_log(log_path, q)
    assert [p["batchId"] for p in read_progress(log_path)] == ran
    assert read_progress(log_path)[-1]["runId"] == str(q.runId)

    # the listener delivers the same batches late (Spark's own progress objects, as the event
    # bus hands them over), and a second settle comes: nothing twice
    late = ProgressRecorder({name: log_path})
    for jprogress in q._jsq.recentProgress():
        late.onQueryProgress(SimpleNamespace(progress=lambda jp=jprogress: jp))
    settle_log(log_path, q)
    assert [p["batchId"] for p in read_progress(log_path)] == ran

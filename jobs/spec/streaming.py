"""The spec's ``streaming`` and ``health`` sections: how the streaming job runs (its engine, the
paced engine's pacing and caps, micro-batches) and the thresholds its health is judged by."""

from __future__ import annotations

from datetime import timedelta
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from jobs.spec.duration import Duration, require_positive
from jobs.spec.size import ByteSize


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class Engine(str, Enum):
    """The streaming join's engine: Spark's own interval join, or the paper's paced operator."""

    native = "native"
    paced = "paced"


class StateStore(str, Enum):
    """Where the native engine keeps the join's window and its event-id de-duplication."""

    rocksdb = "rocksdb"  # off the JVM heap, spills to local disk: a window larger than memory
    memory = "memory"  # the JVM heap (Spark's HDFS-backed store): 1.3x the join's throughput (BENCHMARKS)


class PacedOptions(_Strict):
    """The paced engine (paper §5-§6): its two streams' synchronization and per-key caps."""

    max_drift: Duration = Field(
        default=timedelta(minutes=10),
        description="how far one stream's PT may run past the other's (left_PT + upper = right_PT) before it waits",
    )
    per_key_cap: int | None = Field(
        default=None, gt=0, description="most events a key buffers per side; past it the oldest is let go (counted)"
    )
    pt_percentile: float = Field(default=5.0, ge=0, le=100, description="the PT statistic: a low percentile (§7.4)")
    pt_windows: int = Field(default=5, ge=2, description="ascending windows PT needs (§5.3)")
    max_records_per_batch: int = Field(default=50_000, gt=0, description="records per stream and micro-batch")
    shards: int = Field(
        default=256, gt=0, description="groups of join keys the state is kept in (§6.2); fixed once a checkpoint exists"
    )
    blocks: int = Field(
        default=4,
        gt=0,
        description="blocks of a shard's join keys, each read and written as one state value; fixed once a "
        "checkpoint exists",
    )

    @field_validator("max_drift")
    @classmethod
    def _positive(cls, v: timedelta) -> timedelta | None:
        return require_positive(v, "10m: with none, neither stream could move")


class StreamingOptions(_Strict):
    trigger_interval: Duration = Field(default=timedelta(minutes=1))
    max_offsets_per_trigger: int | None = Field(default=None, gt=0)
    shuffle_partitions: int = Field(default=2, gt=0, description="state partitions; fixed once a checkpoint exists")
    engine: Engine = Field(default=Engine.native, description="native (Spark's interval join) | paced (paper §5)")
    state_store: StateStore = Field(
        default=StateStore.rocksdb,
        description="native engine: rocksdb (off the heap) | memory (the JVM heap, which must hold the window "
        "two to three times over: Spark keeps the last two versions); fixed once a checkpoint exists",
    )
    paced: PacedOptions = PacedOptions()

    @field_validator("trigger_interval")
    @classmethod
    def _positive_trigger(cls, v: timedelta) -> timedelta | None:
        return require_positive(v, "1m: the continuous stream's micro-batch interval")


class HealthSpec(_Strict):
    """Thresholds of the stream's health (``joinshift health``, the UI's "Stream health", the
    supervisor's stall and backlog rules): one threshold per rule; a value beyond it is a warning."""

    max_lag_records: int = Field(default=10_000, ge=0, description="records per stream not read yet")
    max_lag_time: Duration = Field(
        default=timedelta(minutes=10),
        description="age of a stream's oldest unread record (backlog when both exceed it)",
    )
    max_batch_age: Duration = Field(
        default=timedelta(minutes=2), description="no micro-batch for this long while records wait: stalled (restart)"
    )
    max_restarts_per_day: int = Field(default=3, ge=0, description="restarts of the stream process in 24 h")
    max_late_drop_rate: float = Field(
        default=0.01, ge=0, le=1, description="share of input rows the watermark dropped over late_drop_window"
    )
    late_drop_window: Duration = Field(
        default=timedelta(hours=1), description="the micro-batches of this long before the last one"
    )
    max_state_rows: int = Field(default=5_000_000, ge=0, description="rows in the stream's state stores")
    max_state_bytes: ByteSize = Field(
        default=1_000_000_000, description="memory of the stream's state stores: 1GB, 512MiB or bytes"
    )
    min_pt_margin: Duration = Field(
        default=timedelta(0), description="how far each stream's PT must be ahead of the join's watermark"
    )

    @field_validator("max_lag_time", "max_batch_age", "late_drop_window", "min_pt_margin")
    @classmethod
    def _non_negative(cls, v: timedelta) -> timedelta:
        if v.total_seconds() < 0:
            raise ValueError("must be zero or positive")
        return v

    @field_validator("max_batch_age", "late_drop_window")
    @classmethod
    def _positive(cls, v: timedelta) -> timedelta | None:
        return require_positive(v, "2m")

"""Where every table of a pipeline lives, named in the product's language.

All paths sit under ``<storage_root>/tables/<pipeline>/`` and checkpoints under
``<storage_root>/checkpoints/<pipeline>/``, so one pipeline's data is one folder.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.join.variants import VARIANTS
from jobs.settings import Settings, settings
from jobs.spec import JoinSpec


def gate_state_path(s: Settings, pipeline: str) -> str:
    """``<storage_root>/gate/<pipeline>/state.json`` (what the UI reads, knowing only the name)."""
    return s.path("gate", pipeline, "state.json")


@dataclass(frozen=True)
class Tables:
    spec: JoinSpec
    settings: Settings

    @classmethod
    def of(cls, spec: JoinSpec, s: Settings | None = None) -> Tables:
        return cls(spec, s or settings())

    def _t(self, name: str) -> str:
        return self.settings.table_path(self.spec.pipeline, name)

    def landed(self, side: str) -> str:
        """The Hive-style daily table of one stream (partitioned by arrival ds)."""
        return self._t(self.spec.side(side).table)

    @property
    def quarantine(self) -> str:
        return self._t("quarantine")

    @property
    def landing_log(self) -> str:
        return self._t("landing_log")

    def output(self, variant: str) -> str:
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, not {variant!r}")
        if variant == "stream":
            return self._t(self.spec.output_table)
        return self._t(f"{self.spec.output_table}__{variant}")

    @property
    def match_metrics(self) -> str:
        return self._t("match_metrics")

    @property
    def match_metrics_hourly(self) -> str:
        """Match rates per ds, hour of the left event time (spec's zone) and variant."""
        return self._t("match_metrics_hourly")

    @property
    def stream_progress(self) -> str:
        return self._t("stream_progress")

    @property
    def gate_evidence(self) -> str:
        """The cut-over gate's checks, one row per (ds, check)."""
        return self._t("gate_evidence")

    @property
    def gate_decisions(self) -> str:
        """Every promotion and rollback of the cut-over gate: who, when, from, to, why."""
        return self._t("gate_decisions")

    def gate_state(self) -> str:
        """The gate's current stage, serving tables and latest days as JSON: what consumers and the
        UI read without Spark (rewritten from the two tables after every gate command)."""
        return gate_state_path(self.settings, self.spec.pipeline)

    def checkpoint(self, query: str = "stream_join") -> str:
        return self.settings.checkpoint_path(self.spec.pipeline, query)

    def progress_log(self, query: str = "stream_join") -> str:
        """JSON lines of every micro-batch's progress, written by the listener as it happens."""
        return self.settings.path("progress", self.spec.pipeline, f"{query}.jsonl")

"""Where every table of a pipeline lives, named in the product's language.

All paths sit under ``<storage_root>/tables/<pipeline>/`` and checkpoints under
``<storage_root>/checkpoints/<pipeline>/``, so one pipeline's data is one folder.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.join.variants import VARIANTS
from jobs.settings import Settings, settings
from jobs.spec import JoinSpec


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

    def checkpoint(self, query: str = "stream_join") -> str:
        return self.settings.checkpoint_path(self.spec.pipeline, query)

    def progress_log(self, query: str = "stream_join") -> str:
        """JSON lines of every micro-batch's progress, written by the listener as it happens."""
        return self.settings.path("progress", self.spec.pipeline, f"{query}.jsonl")

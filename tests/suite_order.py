"""The order ``make test``'s two pytest-xdist workers take the suite's scopes in (``conftest.py``)."""

from __future__ import annotations

import json
from pathlib import Path

#: The modules that read the demo pipeline (the ``demo_pipeline`` fixture): one pytest-xdist worker
#: runs them all, so the pipeline is built once (~2 minutes). Checked at collection.
DEMO_PIPELINE_MODULES = frozenset({"test_pipeline_e2e.py", "test_recommendation_verified.py", "test_ui_plugin.py"})

#: Seconds each scope (a module, or the demo pipeline's readers together) took in a run of the
#: suite on two workers, written by ``pytest -n 2 --store-durations``. The scopes start longest
#: first, so no long module is left for the end while the other worker has nothing to do.
SCOPE_SECONDS = Path(__file__).with_name("scope_seconds.json")


def scope_of(nodeid: str) -> str:
    """A test's scheduling scope: its module, or ``demo_pipeline`` for the modules that share it."""
    module = nodeid.split("::", 1)[0]
    return "demo_pipeline" if Path(module).name in DEMO_PIPELINE_MODULES else module


def longest_first(tests_per_scope: dict[str, int], seconds: dict[str, float]) -> list[str]:
    """The scopes, longest first by their recorded seconds; a scope with none recorded (a new
    module) is estimated at the recorded scopes' mean seconds per test. Ties keep their order."""
    known = [scope for scope in tests_per_scope if scope in seconds]
    per_test = sum(seconds[s] for s in known) / max(1, sum(tests_per_scope[s] for s in known))
    return sorted(tests_per_scope, key=lambda s: -seconds.get(s, per_test * tests_per_scope[s]))


def recorded_seconds() -> dict[str, float]:
    return json.loads(SCOPE_SECONDS.read_text()) if SCOPE_SECONDS.exists() else {}


def store_seconds(measured: dict[str, float], root: Path) -> None:
    """Merge a run's seconds per scope into ``SCOPE_SECONDS``; scopes whose module is gone drop out."""
    stored = {**recorded_seconds(), **{scope: round(seconds) for scope, seconds in measured.items()}}
    kept = {s: v for s, v in stored.items() if s == "demo_pipeline" or (root / s).exists()}
    SCOPE_SECONDS.write_text(json.dumps(dict(sorted(kept.items(), key=lambda kv: -kv[1])), indent=1) + "\n")

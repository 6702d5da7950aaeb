"""Integration fixtures shared across modules."""

from __future__ import annotations

import pytest
from demo_pipeline import DemoPipeline, build


@pytest.fixture(scope="session")
def demo_pipeline(spark, kafka, dagbag, demo_spec, test_settings, test_root) -> DemoPipeline:
    """The demo pipeline (two generated days through every DAG), built once per session: read only."""
    return build(dagbag, demo_spec, test_root)

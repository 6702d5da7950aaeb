"""Which topic configs ``joinshift import`` refuses before sending a row (pure core)."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from jobs.steps.importing import RECORD_OVERHEAD, topic_refusal
from jobs.storage.kafka_config import TOPIC_CONFIGS

NOW = 1_800_000_000_000
DAY = 86_400_000


def _rows(*arrivals_ms: int, size: int = 100) -> pd.DataFrame:
    """Rows of ``size`` bytes that compression cannot shrink."""
    return pd.DataFrame({"value": [os.urandom(size) for _ in arrivals_ms], "arrival_ms": list(arrivals_ms)})


def test_the_topics_joinshift_makes_take_any_import():
    assert topic_refusal("t", dict(TOPIC_CONFIGS), _rows(NOW - 3650 * DAY, NOW + 365 * DAY, size=10**6), NOW) is None


@pytest.mark.parametrize(
    ("configs", "rows", "says"),
    [
        ({"message.timestamp.type": "LogAppendTime"}, _rows(NOW), "message.timestamp.type=CreateTime"),
        ({"cleanup.policy": "compact,delete"}, _rows(NOW), "keeps the last record of each key"),
        (
            {"max.message.bytes": str(100 + RECORD_OVERHEAD - 1)},
            _rows(NOW, NOW),
            "2 rows are larger than topic t takes, com",
        ),
        ({"retention.ms": str(7 * DAY)}, _rows(NOW - 8 * DAY, NOW), "oldest row arrived 8d ago"),
        ({"message.timestamp.before.max.ms": str(DAY)}, _rows(NOW - 2 * DAY), "would refuse rows"),
        ({"message.timestamp.after.max.ms": str(3_600_000)}, _rows(NOW + 2 * 3_600_000), "newest row arrives 2h"),
    ],
)
def test_a_topic_that_would_refuse_or_lose_rows_is_named_with_the_config_to_change(configs, rows, says):
    line = topic_refusal("t", {**TOPIC_CONFIGS, **configs}, rows, NOW)
    name = next(iter(configs))
    assert line is not None and says in line and f"--add-config {name}={TOPIC_CONFIGS[name]}" in line, line


def test_rows_just_inside_every_limit_pass():
    configs = {
        **TOPIC_CONFIGS,
        "max.message.bytes": str(100 + RECORD_OVERHEAD),
        "retention.ms": str(7 * DAY),
        "message.timestamp.before.max.ms": str(7 * DAY),
        "message.timestamp.after.max.ms": str(DAY),
    }
    assert topic_refusal("t", configs, _rows(NOW - 7 * DAY, NOW + DAY), NOW) is None
    assert topic_refusal("t", configs, _rows(), NOW) is None  # a side with no rows sends nothing
    unknown = dict.fromkeys(TOPIC_CONFIGS)  # configs a broker did not describe
    assert topic_refusal("t", unknown, _rows(NOW), NOW) is None


def test_a_row_over_the_limit_that_compresses_under_it_is_sent():
    """The brokers weigh the compressed batch: a row whose text compresses is taken."""
    rows = pd.DataFrame({"value": [b"x" * 100_000], "arrival_ms": [NOW]})
    assert topic_refusal("t", {**TOPIC_CONFIGS, "max.message.bytes": "20000"}, rows, NOW) is None

"""joinshift's AQE rule (build/jvm, ``joinshift.spark.OuterJoinBuildSide``): a left outer join that
AQE joins by hash is built from its right side when both sides fit, and only then."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest

from jobs.join.conditions import join_events
from jobs.storage.spark import conf_for, joinshift_jar
from tests.unit.tiny_spec import tiny_spec

pytestmark = pytest.mark.integration

SCHEMA = "event_id string, k string, t timestamp, _arrival_time timestamp, _partition int, _offset long, ds date"
RULE = "joinshift.spark.OuterJoinBuildSide"
#: AQE on (the test session has it off), no broadcast: the shuffled joins AQE chooses between.
AQE = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.optimizer.excludedRules": "",
}


def side(spark, prefix: str, n: int):
    """``n`` events over keys k0..k4, a minute apart from noon on 2026-11-20."""
    noon = datetime(2026, 11, 20, 12, tzinfo=UTC)
    rows = [
        (
            f"{prefix}{i}",
            f"k{i % 5}",
            noon + timedelta(minutes=i),
            noon + timedelta(minutes=i + 1),
            0,
            i,
            date(2026, 11, 20),
        )
        for i in range(n)
    ]
    return spark.createDataFrame(rows, SCHEMA)


def build_side(df) -> tuple[str, int]:
    """(the side the final plan's shuffled hash join builds, the output's rows). A DataFrame keeps
    the plan of its first action: pass a new one each time."""
    rows = len(df.collect())
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "isFinalPlan=true" in plan, plan
    found = re.findall(r"ShuffledHashJoin .*?(BuildLeft|BuildRight)", plan)
    assert len(found) == 1, plan
    return found[0], rows


@pytest.fixture(scope="module")
def frames(spark, test_settings):
    """Set-up compiled joinshift's jar (it has a JDK wherever the suite runs) and the session has it."""
    assert joinshift_jar(test_settings).is_file()
    assert spark.conf.get("spark.sql.extensions").endswith(",joinshift.spark.Extensions")
    return side(spark, "L", 3), side(spark, "R", 400)


def test_a_left_outer_join_both_of_whose_sides_fit_is_built_from_the_right(spark, frames):
    left, right = frames
    with conf_for(spark, AQE):
        ours = build_side(join_events(left, right, tiny_spec(), windowed=True))
    off = {**AQE, "spark.sql.adaptive.optimizer.excludedRules": RULE}  # the off switch
    with conf_for(spark, off):
        sparks = build_side(join_events(left, right, tiny_spec(), windowed=True))
    assert ours == ("BuildRight", sparks[1]) and sparks[0] == "BuildLeft"  # AQE builds the smaller side


def test_a_right_side_too_big_to_build_keeps_what_aqe_chose(spark, frames):
    """AQE marks only the sides whose every shuffle partition is under its threshold (which counts
    only when it is at least the advisory partition size): with the threshold between the two
    sides' partitions (the left's under 256 bytes, the right's 4-8 KB), the rule has no second
    side to choose and leaves AQE's plan, the left built, as it is."""
    left, right = frames
    out = join_events(left, right, tiny_spec(), windowed=True)
    small = {
        "spark.sql.adaptive.maxShuffledHashJoinLocalMapThreshold": "1KB",
        "spark.sql.adaptive.advisoryPartitionSizeInBytes": "256B",
    }
    with conf_for(spark, {**AQE, **small}):
        assert build_side(out)[0] == "BuildLeft"


def test_an_inner_join_keeps_the_smaller_side_built(spark, frames):
    left, right = frames
    inner = join_events(left, right, tiny_spec(join={"type": "inner", "cardinality": "1-to-n"}), windowed=True)
    with conf_for(spark, AQE):
        assert build_side(inner)[0] == "BuildLeft"


def test_a_right_outer_join_is_built_from_its_left(spark, frames):
    """The mirror case (the product joins left outer; a user's query may not)."""
    left, right = frames
    with conf_for(spark, AQE):
        assert build_side(right.join(left, "k", "right_outer"))[0] == "BuildLeft"
    with conf_for(spark, {**AQE, "spark.sql.adaptive.optimizer.excludedRules": RULE}):
        assert build_side(right.join(left, "k", "right_outer"))[0] == "BuildRight"

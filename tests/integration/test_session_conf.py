"""A step's own Spark conf for one block (the batch join's shuffle partitions) leaves the
session as it was, and never overrides what the user configured."""

from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.integration


def test_a_steps_conf_is_set_for_its_block_only_and_the_users_wins(spark, test_settings):
    from jobs.storage.spark import conf_for

    key, unset = "spark.sql.shuffle.partitions", "spark.sql.adaptive.advisoryPartitionSizeInBytes"
    before = spark.conf.get(key)
    spark.conf.unset(unset)
    default = spark.conf.get(unset)
    with conf_for(spark, {key: "31", unset: "1MB"}, test_settings):
        assert spark.conf.get(key) == "31" and spark.conf.get(unset) == "1MB"
    assert spark.conf.get(key) == before and spark.conf.get(unset) == default

    users = dataclasses.replace(test_settings, spark_conf={key: "9"})
    with conf_for(spark, {key: "31"}, users):
        assert spark.conf.get(key) == before  # the session was made with the user's value; left alone
    assert spark.conf.get(key) == before

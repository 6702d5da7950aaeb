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


def test_the_sessions_driver_keeps_c2_and_the_processes_the_tests_start_stop_at_c1(spark, test_settings):
    """The test session's driver runs the whole suite and keeps the JVM's default JIT; a process a
    test starts (through ``settings_env``, as a supervised stream does, or the inherited environment)
    stops at C1 (``tests/conftest.py``). Under pytest-xdist the worker inherits the controller's
    environment, which must not reach the worker's own driver."""
    from jobs.settings import settings_env

    mx = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert not [a for a in mx.getInputArguments() if "TieredStopAtLevel" in a]
    child = settings_env(test_settings)["JOINSHIFT_SPARK_DRIVER_JAVA_OPTIONS"].split()
    assert child[0] == "-XX:TieredStopAtLevel=1", child


def test_a_local_driver_writes_file_modes_and_reads_links_through_java_not_hadoops_processes(spark, tmp_path):
    """The local file system of a local driver (build/jvm): the modes and links Hadoop's own
    gives, through Java's file API instead of a ``chmod``/``readlink`` process per file; Delta's log
    store (FileContext) gets it too."""
    import os
    import stat

    from py4j.protocol import Py4JJavaError

    from jobs.storage.spark import LOCAL_FILE_SYSTEM

    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    hadoop = jvm.org.apache.hadoop.fs

    def path(name: str):
        return hadoop.Path(f"file://{tmp_path}/{name}")

    local = path("a").getFileSystem(conf)
    assert local.getClass().getName() == LOCAL_FILE_SYSTEM
    mode = jvm.org.apache.hadoop.fs.permission.FsPermission
    local.create(path("a")).close()  # the default mode, the umask applied
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o666 & ~_umask()
    local.setPermission(path("a"), mode("640"))
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o640
    assert local.mkdirs(path("d/e"), mode("750"))  # a folder made with a mode
    assert stat.S_IMODE(os.stat(tmp_path / "d" / "e").st_mode) == 0o750

    os.symlink(tmp_path / "a", tmp_path / "link")
    hadoops = hadoop.LocalFileSystem(hadoop.RawLocalFileSystem())  # Hadoop's own, for its answers
    hadoops.initialize(path("a").toUri(), conf)
    for name in ("link", "a", "d"):  # as a plain path and qualified ("file:", which Hadoop never
        for p in (hadoop.Path(str(tmp_path / name)), path(name)):  # reports as a link: its quirk, kept)
            ours, theirs = local.getFileLinkStatus(p), hadoops.getFileLinkStatus(p)
            assert (ours.isSymlink(), ours.isFile(), ours.getPath().toString()) == (
                theirs.isSymlink(),
                theirs.isFile(),
                theirs.getPath().toString(),
            )
    assert local.getFileLinkStatus(hadoop.Path(str(tmp_path / "link"))).isSymlink()
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        local.getFileLinkStatus(path("missing"))

    context = hadoop.FileContext.getFileContext(path("a").toUri(), conf)
    assert context.getDefaultFileSystem().getClass().getName() == "joinshift.hadoop.NioLocalFs"
    assert context.util().exists(path("a")) and not context.util().exists(path("missing"))


def _umask() -> int:
    import os

    current = os.umask(0)
    os.umask(current)
    return current


def test_a_python_worker_spark_starts_imports_the_installed_compiled_pyspark(spark):
    """Spark puts pyspark.zip first on its Python workers' path; set-up's .pth hands them the
    installed copy, whose bytecode set-up compiled, instead of compiling the zip's in each one."""
    import importlib.util
    import os

    def where(_):
        import pyspark

        return pyspark.__file__

    (origin,) = spark.sparkContext.parallelize([0], 1).map(where).collect()
    assert ".zip" not in origin, origin
    assert os.path.exists(importlib.util.cache_from_source(origin)), origin

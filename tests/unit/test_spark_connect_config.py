"""Spark Connect, the pure parts: the ``spark_remote`` setting, the SQL that replaced Delta's
JVM-side table API (one code path for a local driver and a Connect client), the one-line refusal
of a URI storage root's files in a Connect client process, and the local server's command line.
The server itself runs in ``tests/integration/test_spark_connect.py``."""

from __future__ import annotations

import dataclasses

import pytest

from jobs.settings import SettingsError, load_settings
from jobs.storage import delta_io, fs


def test_spark_remote_comes_from_the_environment_or_the_config_file(tmp_path, monkeypatch):
    monkeypatch.delenv("JOINSHIFT_CONFIG", raising=False)
    assert load_settings({}).spark_remote == ""  # default: every process starts its own Spark
    assert load_settings({"JOINSHIFT_SPARK_REMOTE": "sc://127.0.0.1:15002"}).spark_remote == "sc://127.0.0.1:15002"
    cfg = tmp_path / "joinshift.yaml"
    cfg.write_text("spark_remote: sc://spark-connect:15002/;use_ssl=true\n")
    monkeypatch.setenv("JOINSHIFT_CONFIG", str(cfg))
    assert load_settings({}).spark_remote == "sc://spark-connect:15002/;use_ssl=true"
    env = {"JOINSHIFT_SPARK_REMOTE": ""}  # the variable wins, also to switch it off
    assert load_settings(env).spark_remote == ""


@pytest.mark.parametrize("bad", ["127.0.0.1:15002", "spark://host:7077", "sc://", "sc://host:port"])
def test_a_spark_remote_that_is_not_a_connect_url_is_named(bad, monkeypatch):
    monkeypatch.delenv("JOINSHIFT_CONFIG", raising=False)
    with pytest.raises(SettingsError) as e:
        load_settings({"JOINSHIFT_SPARK_REMOTE": bad})
    assert str(e.value).startswith("JOINSHIFT_SPARK_REMOTE: spark_remote") and "sc://host:port" in str(e.value)


def test_settings_env_hands_spark_remote_to_child_processes():
    from jobs.settings import Settings, settings_env

    assert settings_env(Settings(spark_remote="sc://127.0.0.1:1"))["JOINSHIFT_SPARK_REMOTE"] == "sc://127.0.0.1:1"


def test_delta_sql_names_the_table_by_path_with_backticks_escaped():
    assert delta_io.table_ref("/data/t") == "delta.`/data/t`"
    assert delta_io.table_ref("s3a://b/we`ird") == "delta.`s3a://b/we``ird`"
    assert delta_io.history_sql("/t", 50) == "DESCRIBE HISTORY delta.`/t` LIMIT 50"
    assert delta_io.delete_sql("/t", "ds = '2026-11-20'") == "DELETE FROM delta.`/t` WHERE ds = '2026-11-20'"


def test_insert_new_merges_with_schema_evolution_and_upsert_replaces_matches():
    cond = "t.`id` <=> s.`id`"
    assert delta_io.merge_sql("/t", "v", cond, update=False, evolve_schema=True) == (
        "MERGE WITH SCHEMA EVOLUTION INTO delta.`/t` t USING `v` s ON t.`id` <=> s.`id` WHEN NOT MATCHED THEN INSERT *"
    )
    assert delta_io.merge_sql("/t", "v", cond, update=True, evolve_schema=False) == (
        "MERGE INTO delta.`/t` t USING `v` s ON t.`id` <=> s.`id` "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )


def test_a_connect_client_process_is_told_how_to_reach_files_under_a_uri_root(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")  # what pyspark sets once a Connect session exists
    with pytest.raises(fs.RemoteFilesUnreachable) as e:
        fs.read_text("s3a://bucket/joinshift/stream_runs/p.json")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("s3a://bucket/joinshift/stream_runs/p.json: with spark_remote set")
    assert "local or mounted storage_root" in msg and "unset JOINSHIFT_SPARK_REMOTE" in msg
    fs.write_text(tmp_path / "x.json", "{}")  # a local root needs no JVM: unchanged
    assert fs.read_text(tmp_path / "x.json") == "{}"


def test_the_local_server_listens_on_loopback_with_a_joinshift_drivers_settings(tmp_path):
    from jobs.local.spark_connect import DEFAULT_PORT, SERVER_CLASS, SparkConnectServer, configured_port
    from jobs.settings import Settings

    assert configured_port("sc://127.0.0.1:15099") == 15099
    assert configured_port("sc://localhost") == DEFAULT_PORT
    assert configured_port("sc://spark-connect:15002") is None  # someone else's server
    assert configured_port("") is None
    s = Settings(storage_root=str(tmp_path / "storage"), log_dir=str(tmp_path / "logs"))
    server = SparkConnectServer(s, root=tmp_path / "sc")
    assert server.port == DEFAULT_PORT and server.url == f"sc://127.0.0.1:{DEFAULT_PORT}"
    cmd = server.command(15123)
    conf = dict(c.split("=", 1) for c in cmd[cmd.index("--class") + 3 :: 2] if "=" in c)
    assert cmd[cmd.index("--class") + 1] == SERVER_CLASS and cmd[-1] == "spark-internal"
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15123"
    assert conf["spark.sql.extensions"].split(",")[0] == "io.delta.sql.DeltaSparkSessionExtension"
    assert (
        "spark-sql-kafka" in conf["spark.jars"]
        and "log4j2-spark-connect.properties" in conf["spark.driver.extraJavaOptions"]
    )
    free = SparkConnectServer(s, port=0, root=tmp_path / "sc")
    assert free.port != DEFAULT_PORT and free.port == free.port  # a free one, picked once


def test_a_local_driver_rebuilds_delta_file_lists_in_one_task_per_core_and_a_cluster_keeps_deltas_default(tmp_path):
    import os

    from jobs.settings import Settings
    from jobs.storage.spark import local_cores, session_conf

    key = "spark.databricks.delta.snapshotPartitions"
    assert [local_cores(m) for m in ("local", "local[3]", "local[4,2]")] == [1, 3, 4]
    assert local_cores("local[*]") == local_cores("local[*,3]") == os.cpu_count()
    assert local_cores("spark://127.0.0.1:7077") is None and local_cores("yarn") is None

    def conf(master: str, **spark_conf: str) -> dict[str, str]:
        s = Settings(storage_root=str(tmp_path), log_dir=str(tmp_path), spark_master=master, spark_conf=spark_conf)
        return session_conf(s)

    assert conf("local[3]")[key] == "3"
    assert key not in conf("spark://127.0.0.1:7077")  # Delta's default (50) on a cluster
    assert conf("local[3]", **{key: "16"})[key] == "16"  # the user's spark_conf wins


def test_checkpoints_on_a_local_storage_root_are_written_through_the_file_system_api(tmp_path):
    from jobs.settings import Settings
    from jobs.storage.spark import FILE_SYSTEM_CHECKPOINTS, session_conf

    key = "spark.sql.streaming.checkpointFileManagerClass"

    def conf(root: str, **spark_conf: str) -> dict[str, str]:
        return session_conf(Settings(storage_root=root, log_dir=str(tmp_path), spark_conf=spark_conf))

    assert conf(str(tmp_path))[key] == conf(f"file://{tmp_path}")[key] == FILE_SYSTEM_CHECKPOINTS
    assert key not in conf("s3a://bucket/joinshift")  # an object store keeps Spark's default
    assert conf(str(tmp_path), **{key: "my.Manager"})[key] == "my.Manager"  # the user's spark_conf wins


def test_a_driver_gets_joinshifts_jar_when_set_up_built_it(tmp_path):
    """The extension on every master, the process-free local file system on a local one."""
    from jobs.settings import Settings
    from jobs.storage.spark import EXTENSIONS, LOCAL_FILE_SYSTEM, joinshift_jar, session_conf

    impl, class_path, ext = "spark.hadoop.fs.file.impl", "spark.driver.extraClassPath", "spark.sql.extensions"

    def conf(master: str = "local[2]", **spark_conf: str) -> dict[str, str]:
        s = Settings(
            storage_root=str(tmp_path), log_dir=str(tmp_path), jar_cache=str(tmp_path / "jars"), spark_master=master
        )
        return session_conf(dataclasses.replace(s, spark_conf=spark_conf))

    (tmp_path / "jars" / "spark").mkdir(parents=True)
    for connector in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "delta-spark_4.2_2.13-4.4.0.jar"):
        (tmp_path / "jars" / "spark" / connector).write_bytes(b"")
    none = conf()  # no jar (no javac at set-up): Hadoop's own, Spark's planning
    assert impl not in none and class_path not in none and none[ext] == "io.delta.sql.DeltaSparkSessionExtension"
    jar = joinshift_jar(Settings(jar_cache=str(tmp_path / "jars")))
    jar.parent.mkdir()
    jar.write_bytes(b"")
    assert conf()[impl] == LOCAL_FILE_SYSTEM and conf()[class_path] == str(jar)
    assert conf()["spark.hadoop.fs.AbstractFileSystem.file.impl"] == "joinshift.hadoop.NioLocalFs"
    assert conf()[ext] == f"io.delta.sql.DeltaSparkSessionExtension,{EXTENSIONS}"
    cluster = conf("spark://127.0.0.1:7077")  # executors lack the jar: Hadoop's own; the class path stays
    assert impl not in cluster and cluster[class_path] == str(jar)  # (the class archive was written with it)
    assert cluster[ext] == conf()[ext]  # the extension plans on the driver: any master
    assert conf(**{ext: "my.Extensions"})[ext] == "my.Extensions"  # the user's spark_conf wins
    assert conf(**{impl: "my.FileSystem"})[impl] == "my.FileSystem"  # the user's spark_conf wins
    assert conf(**{class_path: "/opt/mine.jar"})[class_path] == f"{jar}:/opt/mine.jar"  # and keeps the jar


def test_a_connect_server_that_does_not_answer_is_one_line_at_once(tmp_path):
    """pyspark alone would retry for minutes; the CLI names what to do and exits 1 (a child
    process: settings are read once per process, and this one may hold a local driver)."""
    import os
    import subprocess
    import sys

    from jobs.local.kafka_setup import free_ports

    url = f"sc://127.0.0.1:{free_ports(1)[0]}"
    env = {**os.environ, "JOINSHIFT_SPARK_REMOTE": url, "JOINSHIFT_LOG_DIR": str(tmp_path)}
    res = subprocess.run(  # the timeout bounds a hang; the one line below is the CLI's own probe's
        [sys.executable, "-m", "jobs.cli", "compare", "--ds", "2026-11-19"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.strip() == (
        f"joinshift compare: no Spark Connect server answers at {url} (spark_remote): start one "
        "(`joinshift spark-server start`) or unset JOINSHIFT_SPARK_REMOTE to use a Spark of this process"
    )


def _settings_with_jars(tmp_path):
    """Settings under ``tmp_path`` whose jar cache holds (empty) connector jars."""
    from jobs.settings import Settings

    jars = tmp_path / "jars" / "spark"
    jars.mkdir(parents=True)
    for name in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "delta-spark_2.13-4.4.0.jar"):
        (jars / name).write_bytes(b"")
    return Settings(storage_root=str(tmp_path), log_dir=str(tmp_path), jar_cache=str(tmp_path / "jars"))


def test_a_driver_maps_set_ups_class_archive_when_there_is_one_for_its_jvm_and_jars(tmp_path):
    from jobs.storage.spark import class_archive, session_conf

    jars = tmp_path / "jars" / "spark"
    s = _settings_with_jars(tmp_path)
    archive = class_archive(s)
    assert archive.parent == tmp_path / "cds" and archive.suffix == ".jsa"
    assert "-XX:SharedArchiveFile" not in session_conf(s)["spark.driver.extraJavaOptions"]  # none yet: as before

    archive.parent.mkdir()
    archive.write_bytes(b"x")
    opts = session_conf(s)["spark.driver.extraJavaOptions"].split()
    assert opts[0].startswith("-Dlog4j2.configurationFile=file:")
    assert opts[1:] == [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off"]  # and silent if unusable

    (jars / "hadoop-aws-3.5.0.jar").write_bytes(b"")
    assert class_archive(s) != archive  # another jar set: another archive, never a stale one


def test_the_settings_jvm_options_come_after_joinshifts_own_and_reach_child_processes(tmp_path, monkeypatch):
    from jobs.settings import settings_env
    from jobs.storage.spark import class_archive, session_conf

    s = _settings_with_jars(tmp_path)
    archive = class_archive(s)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"x")
    mine = "-XX:TieredStopAtLevel=1 -XX:+HeapDumpOnOutOfMemoryError"
    monkeypatch.setenv("JOINSHIFT_SPARK_DRIVER_JAVA_OPTIONS", mine)
    monkeypatch.delenv("JOINSHIFT_CONFIG", raising=False)
    s = dataclasses.replace(s, spark_driver_java_options=load_settings().spark_driver_java_options)
    opts = session_conf(s)["spark.driver.extraJavaOptions"].split()
    assert opts[0].startswith("-Dlog4j2.configurationFile=file:")  # the quiet logging and the archive stay
    assert opts[1:] == [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off", *mine.split()]
    assert settings_env(s)["JOINSHIFT_SPARK_DRIVER_JAVA_OPTIONS"] == mine  # a supervised stream gets them too


def test_a_step_that_runs_to_its_end_gets_the_throughput_collector_unless_the_user_names_one(tmp_path):
    from jobs.storage.spark import THROUGHPUT_COLLECTOR, class_archive, session_conf

    s = _settings_with_jars(tmp_path)
    archive = class_archive(s)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"x")

    def options(own: str = "", **kw) -> list[str]:
        return session_conf(dataclasses.replace(s, spark_driver_java_options=own), **kw)[
            "spark.driver.extraJavaOptions"
        ].split()

    assert THROUGHPUT_COLLECTOR == "-XX:+UseParallelGC"
    assert THROUGHPUT_COLLECTOR not in options()  # a streaming step: the JVM's default, G1
    mine = "-Xss4m -XX:+UseGCOverheadLimit"  # options, but no collector
    assert options(mine, throughput=True)[1:] == [
        f"-XX:SharedArchiveFile={archive}",
        "-Xlog:cds*=off",
        THROUGHPUT_COLLECTOR,
        *mine.split(),
    ]
    for collector in ("-XX:+UseG1GC", "-XX:+UseSerialGC", "-XX:+UseZGC"):  # two would stop the JVM at its start
        opts = options(f"-Xss4m {collector}", throughput=True)
        assert THROUGHPUT_COLLECTOR not in opts and opts[-1] == collector

"""The one Spark session factory: Delta Lake, the Kafka connector, RocksDB state, UTC.

JVM jars come from the local cache that set-up filled from Maven Central
(``<jar_cache>/spark/*.jar``), so a session starts offline. On a cluster, point
``JOINSHIFT_SPARK_MASTER`` at it; the same jars ship to executors through ``spark.jars``.

With ``spark_remote`` set (``JOINSHIFT_SPARK_REMOTE=sc://host:port``) a process starts no JVM:
its session is a Spark Connect client of that server, which runs with :func:`session_conf`
(``joinshift spark-server start`` starts one here). Streaming steps ask for ``classic=True``:
their ``foreachBatch`` sinks and progress listeners live in this process (README, "One Spark
for many steps"). pyspark allows one kind per process: the first session decides.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.settings import Settings, settings
from jobs.spec.streaming import StateStore
from jobs.storage import fs
from jobs.storage.checkpoints import STATE_STORE_PROVIDER, STATE_STORE_PROVIDERS
from jobs.storage.scratch import driver_scratch, remove_own
from jobs.storage.spark_gateway import answers, check_master, launch_quiet_gateway
from jobs.storage.spark_log import log4j_config

log = logging.getLogger("joinshift.spark")

#: Whether a query runs a micro-batch with no data when its watermark has moved, to evict state
#: and close windows by it: on for every stream; a replay may leave it to the live run (jobs.operate.replay).
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"

#: Settings every joinshift session shares; tests and jobs alike.
BASE_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Event times are instants; ds is computed in the spec's zone explicitly.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    # Paper §6.1: the join window is state; RocksDB keeps it off the JVM heap and
    # changelog checkpointing makes each micro-batch's commit small.
    STATE_STORE_PROVIDER: STATE_STORE_PROVIDERS[StateStore.rocksdb],
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    NO_DATA_BATCHES: "true",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    # Delta's default, which the stream's sinks rely on: a micro-batch with no rows appends nothing
    # and records no commit, so they need no emptiness check (a second action on the batch)
    "spark.databricks.delta.skipRecordingEmptyCommits": "true",
    # A Delta checkpoint costs 6-12 s on a local file system here (measured), against ~0.3 s for
    # a commit; the streaming sink commits every micro-batch, so checkpoint every 100 commits.
    "spark.databricks.delta.properties.defaults.checkpointInterval": "100",
    # Parquet's own 64-bit timestamps, not Spark's default INT96 (deprecated by Parquet): the batch
    # join at 10 M left events 0.92x the time, its files 7 % smaller (BENCHMARKS, "Timestamps as INT64")
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.ansi.enabled": "false",
    # AQE joins shuffled partitions whose build side fits this by hash instead of sorting both sides
    # (the batch windowed join; a bigger partition keeps the sort-merge join, which spills)
    "spark.sql.adaptive.maxShuffledHashJoinLocalMapThreshold": "64MB",
    # Python workers are pooled by their environment, and Spark sets this one's variable for a
    # Python source's reads but not for transformWithStateInPandas: off, the paced engine's
    # reader and operator share one pool, and its first micro-batch starts two workers, not four
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
}


#: The batch join's shuffle partitions (``run_variant``): AQE coalesces them down to what the data
#: needs, and at 10 M left events 32 are small enough to join by hash and not spill
#: (bench.batch_vs_duckdb: 57 s -> 46 s against 4). Not the session's default: a landing writes its
#: cached rows as they are partitioned, 32 files a ds and ~1 s more per write (measured).
JOIN_SHUFFLE_PARTITIONS = 32


@contextlib.contextmanager
def conf_for(spark: SparkSession, conf: dict[str, str], users: Settings | None = None) -> Iterator[None]:
    """``conf`` on the session for the block, its previous values (or none) afterwards. With
    ``users``, a key set in its ``spark_conf`` keeps the user's value."""
    changed = {k: v for k, v in conf.items() if users is None or k not in users.spark_conf}
    before = {k: spark.conf.get(k, None) for k in changed}
    for k, v in changed.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


def join_conf(spark: SparkSession, users: Settings | None = None) -> contextlib.AbstractContextManager[None]:
    """The batch join's settings for the block (:data:`JOIN_SHUFFLE_PARTITIONS`; a user's
    ``spark_conf`` wins): what ``run_variant`` joins under, and a bench timing that join must too."""
    return conf_for(spark, {"spark.sql.shuffle.partitions": str(JOIN_SHUFFLE_PARTITIONS)}, users)


def spark_jars(s: Settings) -> list[str]:
    """The connector jars set-up resolved (Kafka source/sink, Delta, S3A and its AWS SDK modules)."""
    jars = sorted(glob.glob(os.path.join(s.jar_cache, "spark", "*.jar")))
    if not any("spark-sql-kafka" in j for j in jars) or not any("delta-spark" in j for j in jars):
        raise RuntimeError(
            f"Spark connector jars are missing from {s.jar_cache}/spark; run `make setup` "
            "(it resolves them once from Maven Central) or set JOINSHIFT_JAR_CACHE"
        )
    if s.storage_root.startswith("s3a:") and not any("hadoop-aws" in j for j in jars):
        raise RuntimeError(f"storage_root {s.storage_root} needs hadoop-aws in {s.jar_cache}/spark; run `make setup`")
    return jars


def session_conf(
    s: Settings, extra_conf: dict[str, str] | None = None, *, log_name: str = "spark", throughput: bool = False
) -> dict[str, str]:
    """Every setting a joinshift Spark driver starts with: master, jars, memory, the quiet log
    configuration (and for ``throughput``, the collector of :func:`driver_java_options`),
    :data:`BASE_CONF`, then ``Settings.spark_conf`` and ``extra_conf`` (later wins). The one list
    for a driver of this process and for a Spark Connect server alike."""
    own = _joinshift_jar_conf(s)
    conf = {
        "spark.master": s.spark_master,
        "spark.jars": ",".join(spark_jars(s)),
        "spark.driver.memory": s.spark_driver_memory,
        "spark.sql.warehouse.dir": s.path("warehouse"),
        "spark.ui.enabled": os.environ.get("JOINSHIFT_SPARK_UI", "false"),
        "spark.driver.extraJavaOptions": driver_java_options(s, log_name, throughput=throughput),
        **BASE_CONF,
        **_local_delta_conf(s.spark_master),
        **_local_checkpoint_conf(s),
        **own,
        **s.spark_conf,
        **(extra_conf or {}),
    }
    if own:  # a class path of the user's keeps joinshift's jar in front of it
        jar, path = own[_CLASS_PATH], conf[_CLASS_PATH]
        if jar not in path.split(os.pathsep):
            conf[_CLASS_PATH] = f"{jar}{os.pathsep}{path}"
    return conf


#: The collector of a driver started for a step that runs to its end (landing, the batch join,
#: compare, the report, the sweep, a stream's increment, a replay): the parallel collector, which
#: ran the batch join at 10 M left events in 0.94x the wall time and task CPU of G1, its GC time no
#: higher (G1's barriers, most likely), and the streaming join 1.11x as fast (BENCHMARKS.md, "The
#: batch steps' driver on the parallel collector", "The streams' drivers"). The continuous stream's
#: driver keeps the JVM's default, G1: on Parallel its latency did not move (the trigger sets it),
#: and its old generation was collected every few minutes in 250-300 ms stops ("The continuous
#: stream's driver").
THROUGHPUT_COLLECTOR = "-XX:+UseParallelGC"
#: A collector the user's own options name wins: a second one would stop the JVM at its start.
_NAMED_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")


def driver_java_options(
    s: Settings, log_name: str = "spark", *extra: str, use_archive: bool = True, throughput: bool = False
) -> str:
    """The driver JVM's options: the quiet log configuration, set-up's class archive (unless
    ``use_archive`` is False), :data:`THROUGHPUT_COLLECTOR` for ``throughput`` (unless ``extra`` or
    the settings name a collector), ``extra``, then the settings' ``spark_driver_java_options``."""
    archive = class_archive_options(s) if use_archive else []
    own = s.spark_driver_java_options.strip()
    named = _NAMED_COLLECTOR.search(" ".join([*extra, own]))
    collector = [THROUGHPUT_COLLECTOR] if throughput and not named else []
    return " ".join(
        [
            f"-Dlog4j2.configurationFile=file:{log4j_config(s, log_name)}",
            *archive,
            *collector,
            *extra,
            *([own] if own else []),
        ]
    )


def class_archive(s: Settings) -> Path:
    """Where set-up keeps the driver JVM's class-data archive (AppCDS, ``python -m
    jobs.storage.class_archive``): one per JVM, pyspark version and jar set, so a new JDK or jar
    list means a new archive, never a stale one."""
    import hashlib
    import shutil

    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = os.path.realpath(os.path.join(home, "bin", "java") if home else shutil.which("java") or "java")
    stamp = str(os.path.getmtime(java)) if os.path.exists(java) else ""
    own = joinshift_jar(s)  # on the class path when there: the archive must know it
    own_stamp = [str(own), str(own.stat().st_mtime)] if own.is_file() else []
    key = "\n".join([java, stamp, pyspark.__version__, *spark_jars(s), *own_stamp])
    return Path(s.jar_cache).parent / "cds" / f"spark-driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def class_archive_options(s: Settings) -> list[str]:
    """The driver JVM's options to map set-up's class archive: the classes Spark, Delta and the
    connectors load at start come from it instead of thousands of jar reads: a fresh process
    reaches its first Delta write 1.5x sooner (bench/jvm_start.py). No archive: no options; an
    archive this JVM cannot use is skipped in silence."""
    archive = class_archive(s)
    return [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off"] if archive.exists() else []


def local_cores(master: str) -> int | None:
    """The cores a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master runs tasks on;
    None for a cluster master."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if m is None:
        return None
    if m.group(1) is None:  # plain "local": one core
        return 1
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


def _local_delta_conf(master: str) -> dict[str, str]:
    """On a local driver, Delta rebuilds a table's file list in as many tasks as there are cores,
    not its default 50: joinshift's tables hold a handful of files per day, and on 2 cores 50
    tasks cost ~2.5 s of a 3.05 s partition overwrite (0.59 s with 2; bench/delta_overhead.py).
    A cluster keeps Delta's default; ``spark_conf`` overrides either."""
    cores = local_cores(master)
    return {} if cores is None else {"spark.databricks.delta.snapshotPartitions": str(cores)}


#: Spark's checkpoint file manager over Hadoop's FileSystem API (Spark's default is FileContext's).
FILE_SYSTEM_CHECKPOINTS = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"


def _local_checkpoint_conf(s: Settings) -> dict[str, str]:
    """With a local storage root, streaming checkpoints (offsets, commits, the state stores' files)
    are written through Hadoop's FileSystem API, not Spark's default FileContext: FileContext's
    rename checks both paths for symlinks by starting a ``readlink`` process each time, ~100 per
    micro-batch: ~0.4 s of a ~1 s micro-batch (bench/microbatch_cost.py). On a local disk the rename
    is the same atomic rename(2), and a checkpoint has one writer (``jobs.storage.hold.stream_owner``).
    Object stores keep Spark's default; ``spark_conf`` overrides either."""
    if not fs.is_local(s.storage_root):
        return {}
    return {"spark.sql.streaming.checkpointFileManagerClass": FILE_SYSTEM_CHECKPOINTS}


#: Hadoop's local file system without a process per file (``build/jvm``, compiled by set-up), as a
#: FileSystem and as a FileContext's AbstractFileSystem.
LOCAL_FILE_SYSTEM = "joinshift.hadoop.NioLocalFileSystem"
LOCAL_FS = "joinshift.hadoop.NioLocalFs"
#: joinshift's session extension (``build/jvm``): the AQE rule ``joinshift.spark.OuterJoinBuildSide``.
EXTENSIONS = "joinshift.spark.Extensions"
#: The classes of joinshift's jar that a driver's configuration names (the image's build checks them).
NAMED_CLASSES = (EXTENSIONS, LOCAL_FILE_SYSTEM, LOCAL_FS)
_CLASS_PATH = "spark.driver.extraClassPath"


#: joinshift's own JVM classes in the jar cache (``build/jvm/compile.sh``: set-up, the image's build).
OWN_JAR = Path("joinshift", "joinshift.jar")


def joinshift_jar(s: Settings) -> Path:
    """Where set-up puts joinshift's own JVM classes (none without a JDK's ``javac``)."""
    return Path(s.jar_cache) / OWN_JAR


def _joinshift_jar_conf(s: Settings) -> dict[str, str]:
    """What joinshift's own jar gives a driver (none without the jar: Spark as it is).

    * Its session extension (:data:`EXTENSIONS`), on every master: it only plans, on the driver. A
      left outer join both of whose sides AQE finds small enough to join by hash is built from the
      right side, so it tracks no matched left rows (the batch join at 10 M left events 0.96x;
      BENCHMARKS.md, "The outer join built from its inner side"). ``spark.sql.adaptive.optimizer.
      excludedRules`` naming ``joinshift.spark.OuterJoinBuildSide`` turns it off for a session.
    * A local driver reaches local files through :data:`LOCAL_FILE_SYSTEM`: pyspark ships no
      Hadoop native library, so Hadoop's own local file system starts a ``chmod`` process after
      every file it creates and a ``readlink`` whenever it checks a path for a symlink (Delta's
      commits, the state stores' files, every Parquet file): ~40 processes and ~0.14 s of a ~0.55 s
      micro-batch (bench/microbatch_cost.py). It does the same through Java's file API. Both Hadoop
      APIs get it: FileSystem (Parquet files, checkpoints) and FileContext (Delta's log store). A
      cluster keeps Hadoop's (its executors do not have the jar).

    ``spark_conf`` overrides any of it. The jar is on every driver's class path: the class archive
    (:func:`class_archive`) maps only into a JVM of the class path it was written with."""
    jar = joinshift_jar(s)
    if not jar.is_file():
        return {}
    conf = {_CLASS_PATH: str(jar), "spark.sql.extensions": f"{BASE_CONF['spark.sql.extensions']},{EXTENSIONS}"}
    if local_cores(s.spark_master) is not None:
        conf["spark.hadoop.fs.file.impl"] = LOCAL_FILE_SYSTEM
        conf["spark.hadoop.fs.AbstractFileSystem.file.impl"] = LOCAL_FS
    return conf


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client (no JVM in this process: no ``sparkContext``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class SessionKindConflict(RuntimeError):
    """This process has a Spark session of the other kind (pyspark allows one per process)."""


class ConnectUnavailable(RuntimeError):
    """No Spark Connect server answers at ``spark_remote``."""


def _reachable(remote: str, timeout: float = 2) -> bool:
    """Whether the host and port of an ``sc://`` URL accept a TCP connection."""
    from urllib.parse import urlsplit

    url = urlsplit(remote)
    return answers(url.hostname or "localhost", url.port or 15002, timeout)


def get_spark(
    app_name: str = "joinshift",
    s: Settings | None = None,
    extra_conf: dict[str, str] | None = None,
    *,
    classic: bool = False,
    throughput: bool = False,
) -> SparkSession:
    """Return the process's Spark session, creating it on first use: a client of the Spark
    Connect server ``spark_remote`` names when it is set, else a driver in this process.

    ``classic=True`` asks for a driver in this process whatever ``spark_remote`` says: the
    streaming steps (their ``foreachBatch`` sinks hold state and wait on this process's threads).
    A process whose first session was a driver keeps using it for every later step.
    ``throughput=True``: a step that runs to its end; a driver this call starts runs
    :data:`THROUGHPUT_COLLECTOR` (a driver already running keeps its collector).

    Example::

        spark = get_spark("batch_join")
        spark.read.format("delta").load(path)
    """
    active = _active_session()
    if active is not None:
        if classic and is_connect(active):
            raise SessionKindConflict(
                "this process already uses the Spark Connect server; a streaming step needs a Spark "
                "driver of its own: run it as its own command, or unset JOINSHIFT_SPARK_REMOTE"
            )
        if s is not None and not is_connect(active):
            _apply_hadoop_conf(active, s)
        return active
    s = s or settings()
    if s.spark_remote and not classic:
        return _connect(app_name, s, extra_conf)
    _python_for_workers(s.spark_master)
    builder = SparkSession.builder.appName(app_name)
    conf = session_conf(s, extra_conf, throughput=throughput)
    conf.update(driver_scratch(conf))  # a killed driver's folders are removed by the next one
    atexit.register(remove_own)  # after _stop (atexit runs the last registered first)
    for k, v in conf.items():
        builder = builder.config(k, v)
    check_master(s.spark_master)
    launch_quiet_gateway(builder._options)
    spark = builder.getOrCreate()
    atexit.register(_stop, spark)
    spark.sparkContext.setLogLevel(os.environ.get("JOINSHIFT_SPARK_LOG_LEVEL", "WARN"))
    log.info("Spark %s session on %s", spark.version, s.spark_master)
    return spark


def _active_session() -> SparkSession | None:
    """This process's session of either kind, without starting one."""
    if "SPARK_CONNECT_MODE_ENABLED" in os.environ:
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        return ConnectSession.getActiveSession() or ConnectSession._get_default_session()  # type: ignore[return-value]
    return SparkSession.getActiveSession()


def _connect(app_name: str, s: Settings, extra_conf: dict[str, str] | None) -> SparkSession:
    """A Spark Connect session on ``s.spark_remote``. The server was started with the driver
    settings (:func:`session_conf`); ``extra_conf`` (runtime SQL settings) applies to this
    session only. A server that does not answer is one line at once (pyspark would retry for
    minutes)."""
    if not _reachable(s.spark_remote):
        raise ConnectUnavailable(
            f"no Spark Connect server answers at {s.spark_remote} (spark_remote): start one "
            "(`joinshift spark-server start`) or unset JOINSHIFT_SPARK_REMOTE to use a Spark of this process"
        )
    builder = SparkSession.builder.remote(s.spark_remote).appName(app_name)
    for k, v in (extra_conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    atexit.register(_release, spark, s.spark_remote)
    log.info("Spark Connect session on %s (server Spark %s)", s.spark_remote, spark.version)
    return spark


def _python_for_workers(master: str) -> None:
    """Python UDFs (an Avro side's decoder, :mod:`jobs.join.avro`) run in worker processes that
    PySpark starts as ``PYSPARK_PYTHON``, by default ``python3`` on the PATH: not this virtualenv's
    unless it is activated. When the executors run on this machine (a local master, or a cluster
    on loopback), they use this interpreter; elsewhere set ``PYSPARK_PYTHON`` to the executors'
    Python (it needs fastavro, pandas and pyarrow)."""
    on_this_machine = master.startswith("local") or any(h in master for h in ("//127.0.0.1:", "//localhost:"))
    if "PYSPARK_PYTHON" not in os.environ and on_this_machine:
        os.environ["PYSPARK_PYTHON"] = sys.executable


def _apply_hadoop_conf(spark: SparkSession, s: Settings) -> None:
    """Give a running session the ``spark.hadoop.*`` keys of ``s`` (Spark reads them only when it
    starts): a storage root on a file system the session was not started for (a test's S3 server)
    is then reached with its own settings. A file system already opened keeps the settings it was
    opened with (Hadoop caches one per scheme and bucket)."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for k, v in s.spark_conf.items():
        if k.startswith("spark.hadoop."):
            conf.set(k.removeprefix("spark.hadoop."), v)


def release_state_stores(spark: SparkSession) -> None:
    """Unload this JVM's state stores and stop their maintenance thread (Spark starts them again on
    a query's next batch). A stopped query's RocksDB store may still be uploading a snapshot
    (``<version>.zip``) into its checkpoint: deleting that checkpoint for a fresh start would race
    with it, and the new query then finds its state folder not empty at batch 0."""
    with contextlib.suppress(Exception):
        spark._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()  # type: ignore[union-attr]


def _release(spark: SparkSession, remote: str) -> None:
    """End this client's session on the server (its temporary views and cached data go with it);
    the server keeps running. A server that is gone is not waited for: pyspark would retry the
    release for minutes before the process could exit."""
    if not _reachable(remote):
        with contextlib.suppress(Exception):
            spark.client.close()
        return
    with contextlib.suppress(Exception):
        spark.stop()


def _stop(spark: SparkSession) -> None:
    """Close state stores and stop the session before the JVM exits. Left to the JVM's shutdown
    hooks, Spark deletes its local dirs while RocksDB stores are still open, and a run that
    succeeded ends with RocksDB ERRORs ("Unable to close MANIFEST ... No such file"); the
    progress listeners go first (:func:`jobs.storage.progress.remove_recorders`)."""
    from jobs.storage.progress import remove_recorders

    with contextlib.suppress(Exception):
        for q in spark.streams.active:
            q.stop()
    remove_recorders(spark)
    release_state_stores(spark)
    with contextlib.suppress(Exception):
        spark.stop()

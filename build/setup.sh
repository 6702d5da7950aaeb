#!/usr/bin/env bash
# One-time set-up, safe to rerun (a second run is a fast no-op):
#   1. a project-local virtualenv (.venv) with the pinned Python dependencies;
#   2. the JVM pieces from Maven Central into .cache/jars (Spark's Kafka connector, Delta, S3A with
#      the AWS SDK modules it uses, an Apache Kafka broker, and Kafka's tools for the benchmarks), so
#      nothing is downloaded at run time, joinshift's own JVM classes (build/jvm, compiled here:
#      Hadoop's local file system without a process per file, a join planning rule), and the Spark
#      driver's class-data archive (.cache/cds) that makes each Spark process start sooner;
#   3. Debian's chromium (headless) for the Airflow UI page's browser test;
#   4. a local Airflow home (.airflow) with its SQLite metadata database.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
# quietly <log file> <what to do if it fails> <command...>: the command's output goes to the log, shown
# only when it fails (pip relays setuptools' notes on an editable install, quiet Maven still prints
# bare colour resets, apt's debconf says apt-utils is missing)
quietly() {
  local log=$1 hint=$2; shift 2
  if ! "$@" > "$log" 2>&1; then
    cat "$log" >&2
    say "$hint (output above, also in $log)"
    exit 1
  fi
}

# --- 2, started first. The JVM jars from Maven Central, in the background while section 1
# installs Python's: both mostly wait on the network. Spark's (~25 s) and Kafka's (~10 s) resolve
# side by side, each into a Maven repository of its own (two Mavens must not write one): the
# class archive below waits for Spark's and Python's, not for Kafka's -------------------------
resolve() {  # resolve <pom dir> <target dir> <maven repository>
  local pom=build/$1/pom.xml out=.cache/jars/$2 repo=$ROOT/.cache/$3
  local h; h=$(sha256sum "$pom" | cut -c1-16)
  if [ -f "$out/.resolved" ] && [ "$(cat "$out/.resolved")" = "$h" ]; then return; fi
  say "resolving $1 jars from Maven Central into $out"
  rm -rf "$out" && mkdir -p "$out"
  quietly "$out/maven.log" "resolving $1 failed: check the network to Maven Central and rerun make setup" \
    mvn -q -B -f "$pom" -Dmaven.repo.local="$repo" dependency:copy-dependencies \
      -DoutputDirectory="$ROOT/$out" -DincludeScope=runtime
  echo "$h" > "$out/.resolved"
}
resolve spark spark-all m2 &
spark_jars=$!
(
  resolve kafka kafka m2-kafka
  resolve kafka-tools kafka-tools m2-kafka  # ConsumerPerformance, for bench.decompose
) &
kafka_jars=$!
# a failed step leaves no Maven (nor the class archive's JVM, below) running behind it
background="$spark_jars $kafka_jars"
stop_background() {
  for pid in $background; do pkill -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; done
}
trap stop_background EXIT

# --- 1. Python ----------------------------------------------------------------------------
# uv installs the pinned dependencies (the same set pip resolves): 34 s on a fresh clone with its
# cache empty, against pip's 60 s from a warm pip cache, as it unpacks in parallel (measured
# 2026-11-26). It is pinned here and put into .venv by pip. Their bytecode is compiled in section 2.
UV_VERSION=0.13.8
site_packages() { .venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
req_hash=$( (cat pyproject.toml; echo "uv $UV_VERSION, compileall") | sha256sum | cut -c1-16)
compile_deps=0
if [ ! -f .venv/.installed ] || [ "$(cat .venv/.installed)" != "$req_hash" ]; then
  say "creating .venv and installing pinned dependencies (a minute or two the first time)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  pip_failed="installing the Python dependencies failed: fix and rerun make setup"
  quietly .venv/install-uv.log "$pip_failed" .venv/bin/python -m pip install -q "uv==$UV_VERSION"
  quietly .venv/install-deps.log "$pip_failed" .venv/bin/uv pip install -q --python .venv/bin/python -e ".[dev]"
  compile_deps=1  # below, beside the class archive's JVM
fi
# Spark's Python processes import the installed, compiled PySpark, not its zip copy (~1.7 s each):
# build/pyspark_path.py, which the Airflow image runs too
.venv/bin/python build/pyspark_path.py

# --- 2. JVM jars ---------------------------------------------------------------------------
wait "$spark_jars" || exit 1  # a failed resolve has said what to do
if [ ! -f .cache/jars/spark/.resolved ] || ! cmp -s .cache/jars/spark-all/.resolved .cache/jars/spark/.resolved; then
  # Spark gets only the jars pyspark does not ship itself: two versions of one library on
  # the classpath (scala-library, hadoop, jackson, ...) break it in subtle ways.
  say "selecting the connector jars pyspark lacks into .cache/jars/spark"
  rm -rf .cache/jars/spark && mkdir -p .cache/jars/spark
  pyspark_jars=$(.venv/bin/python -c "import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), 'jars'))")
  # listed once, not `ls | grep -q` per jar: under pipefail, grep -q leaving early could fail ls
  # with SIGPIPE, and the jar pyspark already has was then copied too
  shipped=$(ls "$pyspark_jars")
  for jar in .cache/jars/spark-all/*.jar; do
    artifact=$(basename "$jar" .jar | sed -E 's/-[0-9][0-9.]*(-[0-9]+)?$//')
    grep -qE "^${artifact}-[0-9]" <<<"$shipped" || cp "$jar" .cache/jars/spark/
  done
  cp .cache/jars/spark-all/.resolved .cache/jars/spark/.resolved
fi

# joinshift's own JVM classes (build/jvm), compiled against pyspark's own Spark and Hadoop into one
# jar on the driver's class path: Hadoop's local file system without a process per file (a local
# driver's micro-batch 0.74x, bench/microbatch_cost.py) and the session extension that has an outer
# join built from its inner side (the batch join at 10 M left events 0.96x, BENCHMARKS.md). Without a
# JDK's javac, Spark keeps Hadoop's file system, which starts a chmod process after every file it
# writes, and plans joins as it does by itself.
own=.cache/jars/joinshift
pyspark_jars=$(.venv/bin/python -c "import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), 'jars'))")
own_sources=$(find build/jvm -name '*.java' -o -name compile.sh | sort)
own_hash=$( (cat $own_sources; ls "$pyspark_jars" | grep -E '^(hadoop-client|spark-catalyst)') | sha256sum | cut -c1-16)
if [ ! -f "$own/.built" ] || [ "$(cat "$own/.built")" != "$own_hash" ]; then
  if command -v javac >/dev/null 2>&1 && command -v jar >/dev/null 2>&1; then
    say "compiling joinshift's JVM classes (build/jvm) into $own"
    rm -rf "$own" && mkdir -p "$own"
    # the recipe the Airflow image's JDK stage runs too (include/docker/Dockerfile.airflow)
    quietly "$own/compile.log" "compiling build/jvm failed: fix it, or remove $own and run without it" \
      build/jvm/compile.sh "$pyspark_jars" "$own"
    echo "$own_hash" > "$own/.built"
  else
    say "no javac (a JDK) here: Spark keeps Hadoop's local file system, which starts a process per file written"
  fi
fi

# The driver JVM's class-data archive (AppCDS), one per JDK and jar set: a fresh Spark process
# reaches its first Delta write 1.5x sooner (bench/jvm_start.py). Spark runs without it too. Its
# JVM (~1.5 cores for ~40 s) runs in the background while the bytecode compiles and Airflow's
# database is made, which fill the other core.
cds=
if ! .venv/bin/python -c "import sys; from jobs.settings import settings; from jobs.storage.spark import class_archive; sys.exit(not class_archive(settings()).exists())" 2>/dev/null; then
  say "writing the Spark driver's class-data archive into .cache/cds (once, ~40 s)"
  (.venv/bin/python -m jobs.storage.class_archive >/dev/null || say "no class archive written: Spark processes start without it") &
  cds=$!
  background="$background $cds"
fi

# The dependencies' bytecode, as pip compiles it at install and uv does not: left to the first
# import, a Python told not to write it (PYTHONDONTWRITEBYTECODE, set in CI's containers) compiles
# pandas, PySpark and pydantic again in every process, and Spark starts many (its workers, a Python
# source's runner): 4.7-5.7 s -> 1.3-1.7 s to import them here (2026-11-27). The packages' test
# folders are left out: nothing imports them (a fifth of the source). The pattern matches below
# site-packages only, so a clone under a folder named test or tests is still compiled.
if [ "$compile_deps" = 1 ]; then
  say "compiling the dependencies' bytecode"
  quietly .venv/compile.log "compiling the dependencies' bytecode failed: rerun make setup" \
    .venv/bin/python -m compileall -q -j0 -x '/site-packages/([^/]+/)*tests?/' "$(site_packages)"
  echo "$req_hash" > .venv/.installed
fi
# the project's own modules too (the editable install leaves them in place): a no-op when current
quietly .venv/compile.log "compiling the project's modules failed: fix the file named above and rerun make setup" \
  .venv/bin/python -m compileall -q jobs dags plugins bench

# --- 3. A browser for the Airflow UI page's test (Debian's chromium) -----------------------------
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's chromium (headless browser for the UI test)"
    mkdir -p .cache
    quietly .cache/apt-chromium.log "installing chromium failed: install it (apt-get install chromium) and rerun make setup" \
      sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium'
  else
    say "chromium not found and cannot install it here: the browser test of the UI page will be skipped"
  fi
fi

# --- 4. Airflow ------------------------------------------------------------------------------
if [ ! -f .airflow/airflow.db ]; then
  say "initialising the local Airflow metadata database (.airflow/airflow.db)"
  mkdir -p .airflow
  .venv/bin/joinshift airflow db migrate >/dev/null
fi
wait "$kafka_jars" || exit 1
if [ -n "$cds" ]; then wait "$cds" || true; fi
trap - EXIT  # their pids are free again: nothing of them to kill
say "ready"

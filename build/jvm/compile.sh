#!/usr/bin/env bash
# joinshift's own JVM classes (build/jvm/joinshift) compiled against a pyspark's own Spark and
# Hadoop jars into <out dir>/joinshift.jar. One recipe for both places that build it: set-up
# (build/setup.sh, into .cache/jars/joinshift) and the Airflow image's JDK stage
# (include/docker/Dockerfile.airflow, into /opt/joinshift/jars/joinshift).
#   build/jvm/compile.sh <pyspark's jars dir> <out dir>
set -euo pipefail
if [ $# -ne 2 ] || [ ! -d "$1" ]; then
  echo "usage: build/jvm/compile.sh <pyspark's jars dir> <out dir> (the first must exist)" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
pyspark_jars=$1 out=$2
rm -rf "$out/classes" "$out/joinshift.jar" && mkdir -p "$out/classes"
# shellcheck disable=SC2046  # one argument per source file; the paths have no spaces
javac --release 17 -cp "$pyspark_jars/*" -d "$out/classes" $(find "$here/joinshift" -name '*.java' | sort)
jar cf "$out/joinshift.jar" -C "$out/classes" .
rm -rf "$out/classes"

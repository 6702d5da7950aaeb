"""Fail the image build when the Python/JVM stack is not the one the project pins.

Run at the end of include/docker/Dockerfile.airflow; also runs against a local checkout::

    python include/docker/check_image.py --pyproject pyproject.toml --jar-cache .cache/jars

Checks:

* every ``==``-pinned dependency of pyproject.toml is installed at that version (pip may not
  silently move pyspark, delta-spark, apache-airflow, ... to satisfy a preinstalled provider);
* nothing that replaces the full pyspark is installed (``pyspark-client``, which
  apache-airflow-providers-apache-spark 6.x pulls in) and pyspark still has its ``jars/``;
* a Python process started as Spark starts one (PySpark's own zips first on its path) imports the
  installed, compiled PySpark, not the zip copy (build/pyspark_path.py's ``.pth``; ~1.7 s a process);
* ``java`` is a Java 17 runtime (the Spark driver runs in this image);
* ``<jar_cache>/spark`` has the Kafka connector and Delta, and no second copy of a library
  pyspark already ships;
* ``<jar_cache>/joinshift/joinshift.jar`` (build/jvm, compiled by the image's JDK stage as set-up
  compiles it) holds every class a driver's configuration names: the session extension and the
  local file system.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

#: Distributions that install their own ``pyspark`` package over the full one.
FORBIDDEN = ("pyspark-client", "pyspark-connect", "apache-airflow-providers-apache-spark")
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*$")


def artifact(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients`` (the rule build/setup.sh uses)."""
    return re.sub(r"-[0-9][0-9.]*(-[0-9]+)?$", "", jar_name.removesuffix(".jar"))


def check(pyproject: Path, jar_cache: Path, java: str = "java", own_jar: bool = True) -> list[str]:
    """What is wrong with the installed stack; ``own_jar`` False skips joinshift's jar (a checkout
    set up without a JDK runs without it)."""
    problems: list[str] = []

    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    for dep in deps:
        m = _PIN.match(dep)
        if not m:
            continue
        name, want = m.groups()
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            problems.append(f"{name}=={want} is pinned but not installed")
            continue
        if have != want:
            problems.append(f"{name} is {have}, pyproject.toml pins {want}")

    for dist in FORBIDDEN:
        with contextlib.suppress(md.PackageNotFoundError):
            problems.append(f"{dist} {md.version(dist)} is installed: it overwrites the full pyspark")

    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - reported, not raised
        problems.append(f"pyspark does not import: {exc}")
        pyspark_jars: set[str] = set()
    else:
        jars_dir = Path(pyspark.__file__).parent / "jars"
        if not jars_dir.is_dir():
            problems.append(f"{jars_dir} is missing: this is not the full pyspark distribution")
            pyspark_jars = set()
        else:
            pyspark_jars = {artifact(p.name) for p in jars_dir.glob("*.jar")}
        problems += _zip_copy_problems(Path(pyspark.__file__))

    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, check=True).stderr
    except (OSError, subprocess.CalledProcessError) as exc:
        problems.append(f"`{java} -version` failed: {exc}")
    else:
        if not re.search(r'version "17[."]', out):
            problems.append(f"java is not Java 17: {out.splitlines()[0] if out else '?'}")

    spark_dir = jar_cache / "spark"
    names = sorted(p.name for p in spark_dir.glob("*.jar"))
    for needed in ("spark-sql-kafka-0-10_2.13", "delta-spark_4.2_2.13"):
        if not any(artifact(n) == needed for n in names):
            problems.append(f"{spark_dir} has no {needed} jar")
    dupes = [n for n in names if artifact(n) in pyspark_jars]
    if dupes:
        problems.append(f"{spark_dir} repeats libraries pyspark ships: {', '.join(dupes)}")
    if own_jar:
        problems += _own_jar_problems(jar_cache)
    return problems


def _own_jar_problems(jar_cache: Path) -> list[str]:
    from jobs.storage.spark import NAMED_CLASSES, OWN_JAR

    jar = jar_cache / OWN_JAR
    if not jar.is_file():
        return [f"{jar} is missing: compile build/jvm with build/jvm/compile.sh"]
    with zipfile.ZipFile(jar) as z:
        held = set(z.namelist())
    missing = [c for c in NAMED_CLASSES if c.replace(".", "/") + ".class" not in held]
    return [f"{jar} lacks {', '.join(missing)}: compile build/jvm again"] if missing else []


def _zip_copy_problems(installed: Path) -> list[str]:
    zips = sorted((installed.parent / "python" / "lib").glob("*.zip"))
    if not zips:
        return []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, zips))}
    code = "import pyspark; print(pyspark.__file__)"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip()
    if got == str(installed):
        return []
    return [f"a Python process Spark starts imports PySpark from {got or '?'}: run build/pyspark_path.py"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    ap.add_argument(
        "--jar-cache", type=Path, default=Path(os.environ.get("JOINSHIFT_JAR_CACHE", "/opt/joinshift/jars"))
    )
    ap.add_argument(
        "--java",
        default=os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java",
    )
    args = ap.parse_args(argv)
    problems = check(args.pyproject, args.jar_cache, args.java)
    for p in problems:
        print(f"check_image: {p}", file=sys.stderr)
    if not problems:
        print("check_image: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

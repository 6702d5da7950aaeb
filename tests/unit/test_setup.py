"""What set-up (build/setup.sh) leaves behind for every process the product starts."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

# what a Spark Python worker, a Python source's runner and the CLI import before their work
DEPENDENCIES = ("pyspark.sql", "pandas", "pyarrow", "pydantic", "yaml")
PROJECT = ("jobs.spec", "jobs.join.paced_operator", "jobs.storage.aligned_source", "jobs.cli")


def _bytecode(module: str) -> tuple[Path, Path]:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    return Path(spec.origin), Path(importlib.util.cache_from_source(spec.origin))


@pytest.mark.parametrize("module", DEPENDENCIES)
def test_the_dependencies_bytecode_is_compiled_and_current(module: str) -> None:
    """Installed, never compiled: under PYTHONDONTWRITEBYTECODE (CI's containers) each process
    would compile them from source again, seconds per Spark worker."""
    source, cached = _bytecode(module)
    assert cached.exists(), f"{cached} missing: run make setup"
    header = cached.read_bytes()[:16]
    assert header[:4] == importlib.util.MAGIC_NUMBER, cached
    assert int.from_bytes(header[8:12], "little") == int(source.stat().st_mtime) & 0xFFFFFFFF, f"{cached} is stale"


@pytest.mark.parametrize("module", PROJECT)
def test_the_projects_modules_are_compiled(module: str) -> None:
    """Only that a file exists: a module edited since set-up is compiled again in memory, and
    ``make test`` runs set-up first."""
    _, cached = _bytecode(module)
    assert cached.exists(), f"{cached} missing: run make setup"


def test_a_process_given_pysparks_zip_copy_first_imports_the_installed_one(tmp_path: Path) -> None:
    """As Spark starts its Python processes: PYTHONPATH leads with the zips inside the installed
    package. A Spark home elsewhere keeps its own zip."""
    import os
    import subprocess
    import sys
    import zipfile

    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    other = tmp_path / "spark" / "python" / "lib"
    other.mkdir(parents=True)
    with zipfile.ZipFile(other / "pyspark.zip", "w") as z:
        z.writestr("pyspark/__init__.py", "")

    def imported_from(*path: Path) -> str:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path))}
        code = "import pyspark; print(pyspark.__file__)"
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout

    assert imported_from(*sorted(lib.glob("*.zip"))).strip() == pyspark.__file__
    assert imported_from(other / "pyspark.zip").strip() == str(other / "pyspark.zip" / "pyspark" / "__init__.py")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROOT = Path(__file__).resolve().parents[2]


def test_the_pth_script_hands_a_site_its_installed_pyspark_over_the_zip(tmp_path: Path) -> None:
    """build/pyspark_path.py, which set-up and the Airflow image both run, on a site of its own:
    with its .pth the installed copy wins over the zip Spark puts first; without it, the zip."""
    import subprocess
    import sys
    import zipfile

    site = tmp_path / "site-packages"
    (site / "pyspark" / "python" / "lib").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    zipped = site / "pyspark" / "python" / "lib" / "pyspark.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("pyspark/__init__.py", "")

    def imported_from() -> str:
        code = f"import site; site.addsitedir({str(site)!r}); import pyspark; print(pyspark.__file__)"
        env = {"PYTHONPATH": str(zipped), "PATH": ""}
        done = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, check=True)
        return done.stdout

    assert imported_from().strip() == str(zipped / "pyspark" / "__init__.py")
    script = _load(ROOT / "build" / "pyspark_path.py")
    written = script.write(str(site))
    assert script.write(str(site)) == written  # a second run leaves it as it is
    assert imported_from().strip() == str(site / "pyspark" / "__init__.py")


def test_the_image_check_passes_on_what_set_up_installed() -> None:
    """include/docker/check_image.py, which ends the Airflow image's build, against .venv and the jar
    cache: the pins, the jars, Java 17 and the installed PySpark for Spark's Python processes."""
    from jobs.settings import settings

    check_image = _load(ROOT / "include" / "docker" / "check_image.py")
    # set-up compiles joinshift's jar wherever a JDK is (build/jvm/compile.sh), as the image's JDK stage does
    jdk = bool(shutil.which("javac") and shutil.which("jar"))
    assert check_image.check(ROOT / "pyproject.toml", Path(settings().jar_cache), own_jar=jdk) == []


def test_the_image_check_finds_joinshifts_jar_missing_or_short_of_a_class(tmp_path: Path) -> None:
    """The image's build fails, not a driver's start, when build/jvm was not compiled into the jar
    cache or a class the driver's configuration names is not in it."""
    from jobs.storage.spark import EXTENSIONS, LOCAL_FS, OWN_JAR

    check_image = _load(ROOT / "include" / "docker" / "check_image.py")
    assert check_image._own_jar_problems(tmp_path) == [
        f"{tmp_path / OWN_JAR} is missing: compile build/jvm with build/jvm/compile.sh"
    ]
    (tmp_path / OWN_JAR).parent.mkdir(parents=True)
    with zipfile.ZipFile(tmp_path / OWN_JAR, "w") as z:
        z.writestr(EXTENSIONS.replace(".", "/") + ".class", b"")
    [problem] = check_image._own_jar_problems(tmp_path)
    assert "joinshift.hadoop.NioLocalFileSystem" in problem and LOCAL_FS in problem and EXTENSIONS not in problem


def test_the_jvm_recipe_names_its_arguments_when_given_none() -> None:
    """build/jvm/compile.sh, run by set-up and by the image's JDK stage: a wrong call is one line and exit 2."""
    res = subprocess.run(["bash", str(ROOT / "build" / "jvm" / "compile.sh")], capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [
        "usage: build/jvm/compile.sh <pyspark's jars dir> <out dir> (the first must exist)"
    ]

"""Give every Python process Spark starts the installed, compiled PySpark, not its zip copy.

Spark puts its own copy of PySpark (``pyspark.zip`` and py4j's zip, inside the installed package)
first on the path of every Python process it starts, and from a zip each process compiles PySpark
again (~1.7 s here). The ``.pth`` written here drops those two zips from the path when they are this
environment's own, so the installed copy of the same files serves; with any other Spark home it does
nothing. Run by build/setup.sh for ``.venv`` and by include/docker/Dockerfile.airflow for the image::

    python build/pyspark_path.py [site-packages]     # default: where this interpreter finds pyspark

The default matters in the Airflow image, where pip installs into the user's site-packages.
"""

from __future__ import annotations

import importlib.util
import os
import sys

NAME = "joinshift-pyspark-path.pth"


def pth_text(site: str) -> str:
    zips = os.path.join(site, "pyspark", "python", "lib", "")
    return (
        "# joinshift set-up (build/pyspark_path.py): PySpark from the installed package, not its zip copy\n"
        f"import sys; sys.path[:] = [p for p in sys.path if not p.startswith({zips!r})]\n"
    )


def write(site: str) -> str:
    """Write the .pth into ``site`` unless it is there already; returns its path."""
    path = os.path.join(site, NAME)
    text = pth_text(site)
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)
    return path


def pyspark_site() -> str:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        sys.exit("pyspark_path: pyspark is not installed for this Python: install the dependencies first")
    return os.path.dirname(os.path.dirname(spec.origin))


if __name__ == "__main__":
    write(sys.argv[1] if len(sys.argv) > 1 else pyspark_site())

"""The one import rule (README, Architecture): wings import only wings below them, nothing below
``operate/`` imports ``operate/``, and only the CLI imports the embedded-default conveniences."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Lowest first; a module may import its own wing and any wing listed before it.
LAYERS = [
    {"jobs.settings"},
    {"jobs.spec"},
    {"jobs.join"},
    {"jobs.storage"},
    {"jobs.steps", "jobs.workload"},
    {"jobs.accuracy", "jobs.quality"},
    {"jobs.operate"},
    {"jobs.report"},
    {"jobs.airflow_tasks", "jobs.commands"},
    {"jobs.cli"},
]
LOCAL = "jobs.local"


def _wing(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def _rank(wing: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if wing in layer), None)


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every ``jobs...`` module a file imports, at any depth (function-level imports count)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jobs"):
            if node.module == "jobs":
                out += [(node.lineno, f"jobs.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("jobs.")]
    return out


#: Every module of the product: jobs/ less the embedded-default conveniences and the package marker.
PRODUCT = sorted(
    p
    for p in (ROOT / "jobs").rglob("*.py")
    if p.relative_to(ROOT / "jobs").parts[0] != "local" and p != ROOT / "jobs" / "__init__.py"
)


@pytest.mark.parametrize("path", PRODUCT, ids=[str(p.relative_to(ROOT)) for p in PRODUCT])
def test_imports_point_down_the_layers(path):
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    own = _rank(_wing(module))
    assert own is not None, f"{module} is in no layer of the README's Architecture section"
    for line, imported in _imports(path):
        wing = _wing(imported)
        if wing == LOCAL:
            assert own == _rank("jobs.commands") and _wing(module) == "jobs.commands", (
                f"{path.name}:{line} imports {imported}: only the CLI's command bodies (jobs.commands) may"
            )
            continue
        rank = _rank(wing)
        assert rank is not None and rank <= own, f"{path.name}:{line} imports {imported}, a layer above it"


@pytest.mark.parametrize("folder", ["dags", "plugins"])
def test_dags_and_plugins_do_not_use_the_embedded_default(folder):
    for path in (ROOT / folder).rglob("*.py"):
        assert not [m for _, m in _imports(path) if m.startswith(LOCAL)], path


def test_no_module_is_over_500_lines():
    big = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "jobs").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 520
    }
    assert not big, big

"""The benches' plots: matplotlib without a display, and one way to title, lay out and save a figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display: benches run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path, title: str, *, fontsize: float = 10, dpi: int = 110, **layout: Any) -> None:
    """Title ``fig``, lay it out and write it to ``path`` as a PNG (its folder made), then free it.
    ``layout``: ``y`` (the title's height) and ``bbox_inches`` (``"tight"``: the legend above the axes
    kept in the picture)."""
    title_y = {"y": layout["y"]} if "y" in layout else {}
    fig.suptitle(title, fontsize=fontsize, **title_y)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, **({"bbox_inches": layout["bbox_inches"]} if "bbox_inches" in layout else {}))
    pyplot().close(fig)

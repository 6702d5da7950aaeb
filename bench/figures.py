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


def save(
    fig: Any, path: Path, title: str, *, fontsize: float = 10, dpi: int = 110, title_y: float = 0.98, bbox_inches=None
) -> None:
    """Title ``fig``, lay it out and write it to ``path`` as a PNG (its folder made), then free it.
    ``bbox_inches="tight"`` keeps a legend drawn above the axes in the picture."""
    fig.suptitle(title, fontsize=fontsize, y=title_y)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches=bbox_inches)
    pyplot().close(fig)

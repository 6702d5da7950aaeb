"""Time helpers, fast text (fixed-width byte matrices) and payload vocabularies of the generator."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------------------------
# Time helpers
# --------------------------------------------------------------------------------------------


def _ms(td: timedelta) -> int:
    return int(round(td.total_seconds() * 1000))


def _local_midnight_ms(d: date, tz: str) -> int:
    return int(datetime.combine(d, dtime(0), ZoneInfo(tz)).timestamp() * 1000)


class _Clock:
    """Local time of epoch milliseconds in one zone, via a per-minute lookup table."""

    STEP = 60_000

    def __init__(self, tz: str, lo_ms: int, hi_ms: int):
        self.g0 = (lo_ms // self.STEP - 1) * self.STEP
        n = int((hi_ms - self.g0) // self.STEP + 2)
        grid = self.g0 + np.arange(n, dtype=np.int64) * self.STEP
        idx = pd.DatetimeIndex(grid.astype("datetime64[ms]")).tz_localize("UTC").tz_convert(tz)
        self.local_minute = (idx.hour * 60 + idx.minute).to_numpy().astype(np.int64)
        self.grid = grid

    def hour(self, ms: np.ndarray) -> np.ndarray:
        """Fractional local hour of day, in [0, 24)."""
        i = np.clip((ms - self.g0) // self.STEP, 0, len(self.local_minute) - 1)
        return (self.local_minute[i] + (ms - self.grid[i]) / self.STEP) / 60.0


def _is_night(hours: np.ndarray, night: tuple[int, int]) -> np.ndarray:
    a, b = night
    if a == b:
        return np.zeros(hours.shape, dtype=bool)
    if a < b:
        return (hours >= a) & (hours < b)
    return (hours >= a) | (hours < b)


def _ds_of(ms: np.ndarray, tz: str) -> np.ndarray:
    """Arrival date (ds) in the spec's zone, as 'YYYY-MM-DD' strings."""
    idx = pd.DatetimeIndex(np.asarray(ms, dtype=np.int64).astype("datetime64[ms]")).tz_localize("UTC")
    return idx.tz_convert(tz).strftime("%Y-%m-%d").to_numpy()


# Fast text: fixed-width byte matrices, decoded in one go and split into Python strings.

_DIGITS4 = np.array([list(f"{i:04d}".encode()) for i in range(10_000)], dtype=np.uint8)
_HMS = np.array(
    [list(f"{h:02d}:{m:02d}:{s:02d}".encode()) for h in range(24) for m in range(60) for s in range(60)], dtype=np.uint8
)
_MILLIS = np.array([list(f".{i:03d}Z".encode()) for i in range(1000)], dtype=np.uint8)


def _texts(mat: np.ndarray) -> np.ndarray:
    """Rows of an ASCII byte matrix -> object array of str."""
    n, w = mat.shape
    if n == 0:
        return np.array([], dtype=object)
    buf = np.empty((n, w + 1), dtype=np.uint8)
    buf[:, :w] = mat
    buf[:, w] = 10
    return np.array(buf.tobytes().decode("ascii").split("\n")[:-1], dtype=object)


def _digit_matrix(x: np.ndarray, width: int) -> np.ndarray:
    """Zero-padded decimal digits of non-negative ints, ``width`` columns (must be wide enough)."""
    x = np.asarray(x, dtype=np.int64)
    cols = -(-width // 4) * 4
    out = np.empty((len(x), cols), dtype=np.uint8)
    for j in range(cols // 4):
        out[:, cols - 4 * (j + 1) : cols - 4 * j] = _DIGITS4[(x // 10 ** (4 * j)) % 10_000]
    return out[:, cols - width :]


def fixed_ids(prefix: str, x: np.ndarray, width: int) -> np.ndarray:
    """``prefix`` + zero-padded ``x`` (e.g. "L000000123"), as an object array of str."""
    x = np.asarray(x, dtype=np.int64)
    width = max(width, len(str(int(x.max()))) if len(x) else 1)
    p = np.frombuffer(prefix.encode("ascii"), dtype=np.uint8)
    mat = np.empty((len(x), len(p) + width), dtype=np.uint8)
    mat[:, : len(p)] = p
    mat[:, len(p) :] = _digit_matrix(x, width)
    return _texts(mat)


def iso_ms(ms: np.ndarray) -> np.ndarray:
    """Epoch ms -> ISO-8601 UTC strings with milliseconds and 'Z' (object array of str)."""
    ms = np.asarray(ms, dtype=np.int64)
    if not len(ms):
        return np.array([], dtype=object)
    day = ms // 86_400_000
    rem = ms - day * 86_400_000
    d0 = int(day.min())
    days = np.arange(d0, int(day.max()) + 1).astype("datetime64[D]")
    dtab = np.frombuffer("".join(f"{d}T" for d in days).encode("ascii"), dtype=np.uint8)
    if len(dtab) != 11 * len(days):  # years outside 0000..9999
        return np.array([_iso1(int(v)) for v in ms], dtype=object)
    mat = np.empty((len(ms), 24), dtype=np.uint8)
    mat[:, :11] = dtab.reshape(-1, 11)[day - d0]
    mat[:, 11:19] = _HMS[rem // 1000]
    mat[:, 19:] = _MILLIS[rem % 1000]
    return _texts(mat)


def _iso1(ms: int) -> str:
    dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _formatter(parts: list[tuple[str, bool]]) -> Callable[..., list[str]]:
    """A fast row formatter for compact JSON objects: ``f(*columns) -> [json, ...]``.

    ``parts`` are (column name, quoted) in order; column names are plain identifiers (the spec
    checks) and quoted values are generated text that needs no JSON escaping.
    """
    for name, _ in parts:
        assert _IDENT.match(name), name
    fields = ",".join(
        f'"{name}":' + (f'"{{c{i}}}"' if quoted else f"{{c{i}}}") for i, (name, quoted) in enumerate(parts)
    )
    args = ", ".join(f"c{i}" for i in range(len(parts)))
    src = f"lambda *cols: [f'{{{{{fields}}}}}' for {args}{',' if len(parts) == 1 else ''} in zip(*cols)]"
    return eval(src)  # noqa: S307 - built from identifiers only


# --------------------------------------------------------------------------------------------
# Payload vocabularies (column-name aware, with a fallback by type)
# --------------------------------------------------------------------------------------------

_QUERY_WORDS = (
    "cheap flights",
    "weather",
    "pizza near me",
    "news",
    "football scores",
    "recipes",
    "jobs",
    "hotels",
    "movie times",
    "python tutorial",
    "translate",
    "maps",
    "bank login",
    "stock price",
    "running shoes",
    "laptop deals",
    "concert tickets",
    "pharmacy hours",
    "car rental",
    "yoga",
    "electric bikes",
    "holiday gifts",
    "black friday",
    "tax calculator",
    "coffee shop",
    "gym",
    "vegan cake",
    "winter jacket",
    "train schedule",
    "phone repair",
    "dentist",
    "museum",
    "book club",
    "garden tools",
    "dog food",
    "piano lessons",
    "ski resort",
    "sushi",
    "camping",
    "headphones",
    "thanksgiving recipes",
    "flu symptoms",
    "used cars",
    "apartment rent",
)
_QUERY_MODIFIERS = ("", "best ", "cheap ", "how to ", "open now ", "2026 ", "reviews ")
_ACTIONS = (("click", 0.70), ("dwell", 0.14), ("back", 0.08), ("save", 0.05), ("share", 0.03))


def _zipf_pick(rng: np.random.Generator, size: int, n: int, exponent: float = 1.0) -> np.ndarray:
    w = np.arange(1, size + 1, dtype=np.float64) ** -exponent
    cdf = np.cumsum(w)
    return np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), size - 1)


def _ids(side: str, seq: np.ndarray, string_id: bool) -> np.ndarray:
    """Event ids as text: "L000000123" / "R000000456" for string ids, 1-based numbers otherwise."""
    if string_id:
        return fixed_ids("L" if side == "left" else "R", seq, 9)
    return np.array([str(v + 1) for v in np.asarray(seq).tolist()], dtype=object)

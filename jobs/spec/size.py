"""The one byte-size grammar of joinshift: a spec's memory budget and health thresholds, the CLI's
budget flags, and the sizes reports show.

A size is a whole number of bytes or a number with a unit: ``512MiB``, ``2GiB``, ``1.5GB``,
``800KB``, ``1000000000``. A spec written back (``write_spec``, a checkpoint's recorded spec) spells
each size exactly, so it reads back to the same number of bytes.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_BYTE_UNITS = {
    "b": 1,
    **{f"{p}b": 1000**i for i, p in enumerate("kmgt", 1)},
    **{f"{p}ib": 1024**i for i, p in enumerate("kmgt", 1)},
}


def parse_bytes(value: Any) -> int:
    """``"512MiB"``, ``"2GiB"``, ``"1.5GB"``, ``"800KB"`` or a whole number of bytes -> bytes (int)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = _BYTES.match(value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"{value!r} is not a size; write a number with a unit (B, KB, MB, GB, KiB, MiB, GiB): 2GiB")
    return int(float(m.group(1)) * _BYTE_UNITS[(m.group(2) or "B").lower()])


def format_bytes(n: float) -> str:
    """Bytes for people, binary units, three digits: ``536870912 -> "512MiB"``, ``1.5 * 2**30 -> "1.5GiB"``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            text = f"{n / size:.3g}"
            return f"{text if 'e' not in text else f'{n / size:.0f}'}{unit}"  # 1023.9 KiB: "1024KiB", not "1.02e+03"
    return f"{n:.0f}B"


def exact_bytes(n: int) -> str:
    """A size as a spec writes it: the largest unit that divides it, binary first, else bytes
    (``1500000000 -> "1500MB"``, not ``format_bytes``' ``"1.4GiB"``, which reads back 0.2 % larger)."""
    for unit in ("TiB", "GiB", "MiB", "KiB", "TB", "GB", "MB", "KB"):
        size = _BYTE_UNITS[unit.lower()]
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


#: A pydantic field type: a size in bytes, written in the spec with a unit (``512MiB``).
ByteSize = Annotated[int, BeforeValidator(parse_bytes), PlainSerializer(exact_bytes, return_type=str)]

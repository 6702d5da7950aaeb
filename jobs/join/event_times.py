"""A record's event time read in plain Python, as the paced engine's source needs it to pace the
two streams (paper §5.2) before Spark parses anything.

The side's ``format`` decides where the event time sits and how it is written, as in
:func:`jobs.join.records.parse_records`: a JSON path into the value, then ``iso``, ``epoch_s`` /
``_ms`` / ``_us`` or a datetime pattern, a zone for times written without an offset. A record
whose time does not read is None here (parsing quarantines it). Only JSON values: an Avro side is
refused when the spec is loaded (:meth:`jobs.spec.model.JoinSpec` with ``streaming.engine: paced``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from jobs.spec import StreamSpec
from jobs.spec.source import SourceFormat, TimeFormat, strptime_format

_EPOCH_MS = {"epoch_s": 1000.0, "epoch_ms": 1.0, "epoch_us": 0.001}
#: Epoch values beyond these are not times (as :mod:`jobs.join.records`): None.
_EPOCH_LIMITS = {"epoch_s": 1e12, "epoch_ms": 1e15, "epoch_us": 1e18}


def _path(fmt: SourceFormat, column: str) -> list[str | int]:
    """``$.a.b[0].c`` -> ``["a", "b", 0, "c"]``."""
    steps: list[str | int] = []
    for part in fmt.path(column)[2:].split("."):
        name, *indices = re.split(r"\[", part)
        steps.append(name)
        steps += [int(i.rstrip("]")) for i in indices]
    return steps


def _lookup(obj, steps: list[str | int]):
    for s in steps:
        if isinstance(s, int):
            if not isinstance(obj, list) or s >= len(obj):
                return None
        elif not isinstance(obj, dict):
            return None
        obj = obj[s] if isinstance(s, int) else obj.get(s)
        if obj is None:
            return None
    return obj


def time_reader(fmt: SourceFormat) -> Callable[[object], int | None]:
    """The side's ``time_format`` as a function: a JSON value -> epoch ms, or None."""
    tf = fmt.time_format
    zone = ZoneInfo(fmt.time_zone) if fmt.time_zone else UTC

    def aware(dt: datetime) -> int:
        return int((dt if dt.tzinfo else dt.replace(tzinfo=zone)).timestamp() * 1000)

    if tf in _EPOCH_MS:
        scale, limit = _EPOCH_MS[tf], _EPOCH_LIMITS[tf]

        def epoch(raw) -> int | None:
            try:
                v = float(raw)
            except (TypeError, ValueError):
                return None
            return int(v * scale) if abs(v) < limit else None

        return epoch
    if tf == TimeFormat.iso.value:

        def iso(raw) -> int | None:
            if not isinstance(raw, str):
                return None
            try:
                return aware(datetime.fromisoformat(raw.strip()))
            except ValueError:
                return None

        return iso
    pattern, _ = strptime_format(tf)

    def patterned(raw) -> int | None:
        if not isinstance(raw, str):
            return None
        try:
            return aware(datetime.strptime(raw.strip(), pattern))
        except ValueError:
            return None

    return patterned


def event_time_reader(stream: StreamSpec) -> Callable[[bytes | None], int | None]:
    """A side's Kafka value (JSON) -> its event time in epoch ms, or None when it does not read."""
    steps = _path(stream.format, stream.event_time)
    parse = time_reader(stream.format)

    def read(value: bytes | None) -> int | None:
        if value is None:
            return None
        try:
            obj = json.loads(value)
        except ValueError:
            return None
        return parse(_lookup(obj, steps))

    return read

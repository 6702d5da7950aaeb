"""A side whose Kafka values are Avro: the writer schema(s) and how a value is framed.

A stream spec's ``format.avro`` section, read when ``format.encoding: avro``::

    format:
      encoding: avro
      avro:
        schema: schemas/ride_request_v2.avsc   # the writer schema (what `joinshift import` writes)
        framing: confluent                     # none (default): the bare Avro payload
        schemas:                               # confluent only: the writer schema of each registry id
          1: schemas/ride_request_v1.avsc
          2: schemas/ride_request_v2.avsc

``framing: confluent`` is Confluent's wire format: a magic byte 0, the writer schema's registry id
as a 4-byte big-endian integer, then the Avro payload. No schema registry is read: export the
schema of each id your topic holds to a file and list it under ``schemas``, so records written
before and after a schema change both decode. With confluent framing and no ``schemas``, every id
decodes with ``schema``. With ``schemas``, ``schema`` must be one of them: its id is the one
``joinshift import`` writes.

Paths are relative to the spec file's folder (absolute paths as they are); a spec validated from
a mapping, not a file, resolves them against the current directory. Each file is read and parsed
(fastavro) when the spec is validated, and the paths are kept absolute, so a spec written back
out (``write_spec``, a checkpoint's record) names the same files from anywhere. ``joinshift
plan`` compares the paths, not the files: a schema file edited in place is not a change it sees.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

import fastavro
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

#: Confluent's wire format: magic byte, then a 4-byte big-endian schema id, then the payload.
CONFLUENT_MAGIC = 0
CONFLUENT_HEADER = 5
_MAX_ID = 2**31 - 1
#: Validation context keys: the spec file's folder (relative schema paths), and whether to read
#: the schema files at all (a spec recorded earlier is compared, not run: its files may be gone).
SPEC_DIR = "spec_dir"
READ_FILES = "read_files"


class Encoding(str, Enum):
    json = "json"
    avro = "avro"


class Framing(str, Enum):
    none = "none"
    confluent = "confluent"


def read_avsc(path: str | Path) -> dict[str, Any]:
    """A writer schema file (``.avsc``) parsed by fastavro; a one-line ``ValueError`` naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p} does not exist (an Avro schema file, .avsc)")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{p} is not JSON: {exc}") from None
    try:
        parsed = fastavro.parse_schema(data)
    except Exception as exc:  # fastavro raises several types (SchemaParseException, UnknownType, ...)
        first = (str(exc).splitlines() or [""])[0]
        raise ValueError(f"{p} is not an Avro schema: {type(exc).__name__}: {first}") from None
    record = isinstance(data, dict) and data.get("type") == "record" and isinstance(data.get("fields"), list)
    if not (record and isinstance(parsed, dict)):
        got = data.get("type") if isinstance(data, dict) else data
        raise ValueError(f"{p}: the writer schema must be a record with fields (got {got!r})")
    return parsed


def _resolve(path: str, info: ValidationInfo) -> str:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path((info.context or {}).get(SPEC_DIR) or Path.cwd()) / p
    return str(p.resolve())


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


class AvroFormat(BaseModel):
    """How one side's Avro values decode (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: str = Field(alias="schema", description="the writer schema file (.avsc)")
    framing: Framing = Field(default=Framing.none, description="none | confluent (magic byte, 4-byte schema id)")
    schemas: dict[int, str] = Field(default_factory=dict, description="confluent: registry id -> schema file")
    _writer: dict[str, Any] = PrivateAttr(default_factory=dict)
    _by_id: dict[int, dict[str, Any]] = PrivateAttr(default_factory=dict)
    _write_id: int | None = PrivateAttr(default=None)

    @field_validator("schema_")
    @classmethod
    def _schema_path(cls, v: str, info: ValidationInfo) -> str:
        return _resolve(v, info)

    @field_validator("schemas")
    @classmethod
    def _schema_paths(cls, v: dict[int, str], info: ValidationInfo) -> dict[int, str]:
        for sid in v:
            if not 0 <= sid <= _MAX_ID:
                raise ValueError(f"schema id {sid}: a registry id is between 0 and {_MAX_ID}")
        return {sid: _resolve(path, info) for sid, path in sorted(v.items())}

    @model_validator(mode="after")
    def _load(self, info: ValidationInfo) -> AvroFormat:
        if self.schemas and self.framing != Framing.confluent:
            raise ValueError("schemas: only a Confluent-framed value names its schema id; set framing: confluent")
        if (info.context or {}).get(READ_FILES) is False:
            return self
        try:
            self._writer = read_avsc(self.schema_)
        except ValueError as exc:
            raise ValueError(f"schema: {exc}") from None
        for sid, path in self.schemas.items():
            try:
                self._by_id[sid] = read_avsc(path)
            except ValueError as exc:
                raise ValueError(f"schemas.{sid}: {exc}") from None
        if self.schemas:
            same = [sid for sid, parsed in self._by_id.items() if _same(parsed, self._writer)]
            if not same:
                raise ValueError(
                    f"schema: {self.schema_} is none of schemas' files ({', '.join(map(str, self.schemas))}); "
                    "list it under its registry id (its id is the one joinshift import writes)"
                )
            self._write_id = max(same)
        return self

    @property
    def writer_schema(self) -> dict[str, Any]:
        """``schema``, parsed."""
        return self._writer

    @property
    def write_id(self) -> int | None:
        """The registry id ``schema`` has in ``schemas`` (what ``joinshift import`` frames with)."""
        return self._write_id

    def schema_for(self, schema_id: int | None) -> dict[str, Any] | None:
        """The parsed writer schema of a value: ``schema`` when unframed or when no ``schemas`` are
        listed, else the one listed for its id (None: an id not listed)."""
        if self.framing == Framing.none or not self.schemas:
            return self._writer
        return self._by_id.get(schema_id) if schema_id is not None else None

"""How the paced operator stores a key's buffers: compressed with a zstandard dictionary trained on
the stream's own buffered rows at run time, and trained again as they change (paper §6.3: 3-10x,
"adapts during runtime so that it can effectively compress new data").

A key's buffers are pickled (the raw form), then compressed. Each worker process trains its own
dictionary from the first :data:`TRAIN_AFTER` buffers it stores, again at :data:`TRAIN_ON` and then every
:data:`RETRAIN_EVERY`;
a dictionary is named by its id (random, 32 bits, zstandard's) and kept in a :class:`Dictionaries` store (a folder
beside the checkpoint), since a blob written with one is read by whichever task holds its key
later. Until a dictionary exists, and where there is no store, a blob is zstandard without one.

Every blob starts with its form: ``P`` pickled, ``z`` zstandard, ``M`` zstandard with a dictionary
in zstandard's magicless frame (the frame still names the dictionary by its id; a key's buffers are
a few hundred bytes, so the 4-byte magic number was 3% of a blob), ``D`` the same with the magic
number (written before 2026-11-26, still read).

Settings measured on the buffers of ``python -m bench.paced``'s P6 run (151,266 blobs, 1.86
buffered rows each, 535 bytes pickled): pickled ÷ stored 3.84x at level 3 with the magic number,
3.95x magicless, 4.04x magicless at level 6 (5.4 us a blob against 1.8 us at level 3; level 19
gains 0.2x more at 60 us); a dictionary trained on 2,000 recent buffers 4.23x against 4.07x on the
first 200, so it is trained again on the first 2,000 and every :data:`RETRAIN_EVERY` buffers on the
last 2,000. Its size (8-110 KiB) changed nothing measurable. A training takes ~70 ms: every 5,000
buffers it was 7% of the operator's time over a backlog (bench/paced.py, cProfile); every 20,000,
P4 fell from 4.35x to 4.09x (76.0 bytes a buffered event against 71.5); 10,000 is kept.
"""

from __future__ import annotations

import os
import pickle
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import zstandard

from jobs.join.paced import KeyState

TRAIN_AFTER = 200
RETRAIN_EVERY = 10_000
TRAIN_ON = 2_000
DICTIONARY_BYTES = 8 * 1024
_LEVEL = 6
_MAGICLESS = zstandard.FORMAT_ZSTD1_MAGICLESS


class Dictionaries(Protocol):
    """Where trained dictionaries are kept, by id (picklable: the operator's workers get it)."""

    def get(self, name: str) -> bytes | None: ...

    def put(self, name: str, data: bytes) -> None: ...


class FolderDictionaries:
    """Dictionaries as files of one folder (a local storage root: every executor reads it)."""

    def __init__(self, folder: str):
        self.folder = folder

    def get(self, name: str) -> bytes | None:
        try:
            return (Path(self.folder) / f"{name}.zdict").read_bytes()
        except FileNotFoundError:
            return None

    def put(self, name: str, data: bytes) -> None:
        path = Path(self.folder) / f"{name}.zdict"
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


class StateCodec:
    """Pickle + zstandard (with this process's current dictionary) one key's buffers.

    One per worker process and store (:meth:`of`): Python workers outlive their tasks, so the
    samples and the dictionary carry over from one micro-batch's task to the next."""

    _loaded: dict[str, zstandard.ZstdCompressionDict] = {}  # any task's blobs, by dictionary
    _codecs: dict[str, StateCodec] = {}

    @classmethod
    def of(cls, store: Dictionaries | None) -> StateCodec:
        key = getattr(store, "folder", "") if store is not None else ""
        if key not in cls._codecs:
            cls._codecs[key] = cls(store)
        return cls._codecs[key]

    def __init__(self, store: Dictionaries | None):
        self.store = store
        self.samples: deque[bytes] = deque(maxlen=TRAIN_ON)
        self.stored = 0
        self.current: tuple[str, zstandard.ZstdCompressor] | None = None
        self.plain = zstandard.ZstdCompressor(level=_LEVEL)

    def dumps(self, state: KeyState) -> tuple[bytes, int]:
        """The blob, and the raw (pickled) size it stands for."""
        raw = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        self.stored += 1
        if self.store is not None:
            self.samples.append(raw)
            first = self.current is None and self.stored >= TRAIN_AFTER
            if first or self.stored == TRAIN_ON or self.stored % RETRAIN_EVERY == 0:
                self._train()
        if self.current is not None:
            return b"M" + self.current[1].compress(raw), len(raw)
        return b"z" + self.plain.compress(raw), len(raw)

    def loads(self, blob: bytes) -> KeyState:
        form = blob[:1]
        if form == b"P":
            return pickle.loads(blob[1:])
        if form == b"z":
            return pickle.loads(zstandard.ZstdDecompressor().decompress(blob[1:]))
        frame = _MAGICLESS if form == b"M" else zstandard.FORMAT_ZSTD1
        name = str(zstandard.get_frame_parameters(blob[1:], format=frame).dict_id)
        unzip = zstandard.ZstdDecompressor(dict_data=self._dictionary(name), format=frame)
        return pickle.loads(unzip.decompress(blob[1:]))

    def _train(self) -> None:
        try:
            trained = zstandard.train_dictionary(DICTIONARY_BYTES, list(self.samples))
        except zstandard.ZstdError:  # too few distinct samples yet: keep what there is
            return
        data = trained.as_bytes()
        name = str(trained.dict_id())
        assert self.store is not None
        self.store.put(name, data)
        self._loaded[name] = zstandard.ZstdCompressionDict(data)
        params = zstandard.ZstdCompressionParameters.from_level(
            _LEVEL, format=_MAGICLESS, write_dict_id=True, write_content_size=True
        )
        self.current = (name, zstandard.ZstdCompressor(compression_params=params, dict_data=self._loaded[name]))

    def _dictionary(self, name: str) -> zstandard.ZstdCompressionDict:
        if name not in self._loaded:
            data = self.store.get(name) if self.store is not None else None
            if data is None:
                raise RuntimeError(f"the paced operator's state dictionary {name} is missing: its folder was deleted")
            self._loaded[name] = zstandard.ZstdCompressionDict(data)
        return self._loaded[name]


def pack_block(blobs: dict[tuple, bytes]) -> bytes:
    """A block of join keys' buffers (their blobs, by key) as the one state value it is kept as."""
    return pickle.dumps(blobs, protocol=pickle.HIGHEST_PROTOCOL)


def unpack_block(value: bytes) -> dict[tuple, bytes]:
    """:func:`pack_block` read back: a key not stepped stays its blob, never decompressed."""
    return pickle.loads(value)


def buffer_sizes(blobs: Iterable[bytes], store: Dictionaries | None) -> dict[str, int]:
    """What stored buffers hold: ``keys`` (one blob a key), ``events`` (buffered left and right
    events, and non-matches still amendable), ``raw_bytes`` (pickled) and ``stored_bytes``."""
    codec = StateCodec.of(store)
    out = dict.fromkeys(("keys", "events", "raw_bytes", "stored_bytes"), 0)
    for blob in blobs:
        state = codec.loads(blob)
        out["keys"] += 1
        out["events"] += len(state.lefts) + len(state.rights) + len(state.amendable)
        out["raw_bytes"] += len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
        out["stored_bytes"] += len(blob)
    return out

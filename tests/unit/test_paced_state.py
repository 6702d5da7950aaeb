"""The paced operator's state format (jobs/join/paced_state.py): a key's buffers round-trip, and
once a dictionary is trained on them they take a fraction of their pickled bytes (paper §6.3);
a dictionary is found again by any process that reads its blobs."""

from __future__ import annotations

import json
import pickle
import random
from datetime import UTC, datetime, timedelta

import pytest
import zstandard

from jobs.join.paced import Event, KeyState
from jobs.join.paced_state import TRAIN_AFTER, FolderDictionaries, StateCodec, buffer_sizes


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="microseconds").replace("+00:00", "Z")


def key_state(k: int, rng: random.Random) -> KeyState:
    s = KeyState()
    for i in range(rng.randint(1, 4)):
        t = datetime(2026, 11, 20, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 86_400))
        ms = int(t.timestamp() * 1000)
        offset, at = rng.randint(0, 10**6), t + timedelta(seconds=5)
        values = [f"R{k}_{i}", f"s{k}", _iso(t), "click", rng.randint(1, 9), _iso(at), 0, offset]
        row = json.dumps(dict(zip(map(str, range(len(values))), values)), separators=(",", ":"))  # as Spark packs it
        s.rights.append(Event(ms, ms + 5000, 0, offset, values[0], row))
        s.seen[("r", values[0])] = ms
    return s


@pytest.fixture(autouse=True)
def fresh_process_caches():
    StateCodec._codecs.clear()
    StateCodec._loaded.clear()


def test_buffers_round_trip_and_a_trained_dictionary_compresses_them_4x(tmp_path):
    rng = random.Random(3)
    codec = StateCodec.of(FolderDictionaries(str(tmp_path)))
    states = [key_state(k, rng) for k in range(TRAIN_AFTER + 300)]
    blobs = [codec.dumps(s) for s in states]
    assert all(codec.loads(b) == s for (b, _), s in zip(blobs, states))
    before, after = blobs[: TRAIN_AFTER - 1], blobs[TRAIN_AFTER:]
    assert {b[:1] for b, _ in before} == {b"z"} and {b[:1] for b, _ in after} == {b"M"}
    assert len(list(tmp_path.glob("*.zdict"))) == 1
    raw, stored = sum(r for _, r in after), sum(len(b) for b, _ in after)
    assert raw == sum(len(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)) for s in states[TRAIN_AFTER:])
    assert raw / stored >= 4  # plain zstandard gets ~1.5x on such small blobs

    # a blob of the earlier form (the frame with zstandard's magic number) still reads
    (name, _), raw_blob = codec.current, pickle.dumps(states[-1], protocol=pickle.HIGHEST_PROTOCOL)
    earlier = b"D" + zstandard.ZstdCompressor(level=3, dict_data=StateCodec._loaded[name]).compress(raw_blob)
    assert codec.loads(earlier) == states[-1]

    StateCodec._codecs.clear()
    StateCodec._loaded.clear()  # another worker process: it finds the dictionary in the folder
    other = StateCodec.of(FolderDictionaries(str(tmp_path)))
    assert other.loads(after[0][0]) == states[TRAIN_AFTER]
    StateCodec._loaded.clear()
    with pytest.raises(RuntimeError, match="dictionary .* is missing"):
        StateCodec.of(FolderDictionaries(str(tmp_path / "elsewhere"))).loads(after[0][0])


def test_without_a_dictionary_store_buffers_are_plain_zstandard():
    codec = StateCodec.of(None)
    rng = random.Random(4)
    states = [key_state(k, rng) for k in range(TRAIN_AFTER + 10)]
    blobs = [codec.dumps(s)[0] for s in states]
    assert {b[:1] for b in blobs} == {b"z"} and codec.loads(blobs[-1]) == states[-1]


def test_buffer_sizes_count_what_stored_buffers_hold(tmp_path):
    """What `joinshift checkpoint inspect` and bench.paced read back from a paced state store."""
    rng = random.Random(5)
    store = FolderDictionaries(str(tmp_path))
    states = [key_state(k, rng) for k in range(TRAIN_AFTER + 20)]
    states[0].lefts.append(states[0].rights[0])
    blobs = [StateCodec.of(store).dumps(s)[0] for s in states]
    StateCodec._codecs.clear()
    StateCodec._loaded.clear()  # read by another process, which finds the dictionary in the folder
    assert buffer_sizes(blobs, store) == {
        "keys": len(states),
        "events": sum(len(s.rights) for s in states) + 1,
        "raw_bytes": sum(len(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)) for s in states),
        "stored_bytes": sum(len(b) for b in blobs),
    }
    assert buffer_sizes([], None) == {"keys": 0, "events": 0, "raw_bytes": 0, "stored_bytes": 0}

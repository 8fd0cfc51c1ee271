"""Unit and property tests of storage/cleaner.py: log compaction keeps the latest record of
every key at its original offset, drops old tombstones, merges segments, and a crash at
any point of the swap leaves a log with the same latest-value map. Real files under
tmp_path; no sockets."""

from __future__ import annotations

import os
import random
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.protocol.batches import parse_header, split_batches
from groupcoord.storage import (
    CompactionError,
    CompactionPlan,
    CompactionStats,
    LogConfig,
    LogFailed,
    OffsetOutOfRange,
    PartitionLog,
    cleanable_range,
    compact,
    install_compaction,
    prepare_compaction,
)
from groupcoord.storage.cleaner import SWAP_MARKER_FILE
from tests.support import client_batch

BIG = 1 << 30
DAY = 86_400_000
NOW = 1_700_000_000_000

Rec = tuple[bytes | None, bytes | None]  # (key, value); value None = tombstone


# -- helpers ---------------------------------------------------------------------------


def build_batch(
    records: Sequence[Rec],
    timestamp: int | Sequence[int],
    *,
    compression: int = 0,
    transactional: bool = False,
) -> bytes:
    """One v2 batch as the coordinator writes it: producer id -1, uncompressed unless
    asked, one timestamp for every record unless a list is given."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=int(transactional),
        producer_id=7 if transactional else -1,
        producer_epoch=0 if transactional else -1,
        base_sequence=0 if transactional else -1,
        batch_size=10**7,
    )
    stamps = [timestamp] * len(records) if isinstance(timestamp, int) else list(timestamp)
    for delta, ((key, value), ts) in enumerate(zip(records, stamps, strict=True)):
        builder.append(delta, timestamp=ts, key=key, value=value, headers=[])
    return bytes(builder.build())


def append(log: PartitionLog, records: Sequence[Rec], timestamp: int, **kwargs: object) -> int:
    buf = bytearray(build_batch(records, timestamp, **kwargs))  # type: ignore[arg-type]
    return log.append(buf, split_batches(buf))


@dataclass(frozen=True)
class Stored:
    offset: int
    key: bytes | None
    value: bytes | None
    batch_base: int
    batch_last: int
    batch_max_ts: int
    attributes: int


def read_all(log: PartitionLog, from_offset: int | None = None) -> list[Stored]:
    """Every record readable from the log start (or `from_offset`), checking each batch:
    CRC valid, records count right, offsets inside the batch and increasing."""
    start = log.log_start_offset if from_offset is None else from_offset
    data = log.read(start, BIG)
    out: list[Stored] = []
    pos = 0
    previous = -1
    while pos < len(data):
        header = parse_header(data, pos)
        raw = data[pos : pos + header.size_bytes]
        batch = DefaultRecordBatch(raw)
        assert batch.validate_crc()
        records = list(batch)
        assert len(records) == header.records_count
        for record in records:
            assert header.base_offset <= record.offset <= header.last_offset
            assert record.offset > previous
            previous = record.offset
            out.append(
                Stored(
                    record.offset,
                    record.key,
                    record.value,
                    header.base_offset,
                    header.last_offset,
                    header.max_timestamp,
                    header.attributes,
                )
            )
        pos += header.size_bytes
    assert pos == len(data)
    return out


def latest_values(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[bytes, bytes]:
    """Replay: the value of every key, tombstones deleting."""
    state: dict[bytes, bytes] = {}
    for key, value in records:
        assert key is not None
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def log_map(log: PartitionLog) -> dict[bytes, bytes]:
    return latest_values((r.key, r.value) for r in read_all(log))


def active_base(log: PartitionLog) -> int:
    return log._segments[-1].base_offset


def leftovers(directory: Path) -> list[str]:
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.name.endswith((".cleaned", ".swap")) or p.name.startswith(SWAP_MARKER_FILE)
    )


@dataclass
class Model:
    """Every record ever appended (offset -> key, value, its batch's max timestamp) and
    the offsets that must still be in the log."""

    records: dict[int, tuple[bytes, bytes | None, int]] = field(default_factory=dict)
    present: list[int] = field(default_factory=list)
    next_offset: int = 0

    def append(self, log: PartitionLog, records: Sequence[Rec], timestamp: int) -> int:
        base = append(log, records, timestamp)
        assert base == self.next_offset
        for delta, (key, value) in enumerate(records):
            assert key is not None
            self.records[base + delta] = (key, value, timestamp)
            self.present.append(base + delta)
        self.next_offset = base + len(records)
        return base

    def latest(self) -> dict[bytes, bytes]:
        return latest_values(self.records[o][:2] for o in sorted(self.records))

    def after_compaction(self, end_offset: int, durable: int, horizon_ms: int) -> list[int]:
        """The offsets a compaction must keep: below `end_offset` (the active segment's
        base) only the latest record of each key among the records below max(end,
        durable), and no tombstone older than the horizon."""
        cutoff = max(end_offset, durable)
        latest: dict[bytes, int] = {}
        for offset in self.present:
            if offset < cutoff:
                latest[self.records[offset][0]] = offset
        kept = []
        for offset in self.present:
            key, value, ts = self.records[offset]
            if offset >= end_offset:
                kept.append(offset)
            elif latest.get(key) == offset and not (value is None and ts < horizon_ms):
                kept.append(offset)
        return kept

    def check(self, log: PartitionLog) -> None:
        stored = read_all(log)
        assert [(r.offset, r.key, r.value) for r in stored] == [
            (o, *self.records[o][:2]) for o in self.present
        ]
        assert log_map(log) == self.latest()
        assert log.next_offset == self.next_offset


class SimulatedCrash(Exception):
    pass


class CrashAt:
    """Counts the directory and durability operations (rename, replace, unlink, fsync)
    made inside `armed()` and raises SimulatedCrash instead of performing step `at`."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.steps = 0

    def _wrap(self, real: Callable[..., object]) -> Callable[..., object]:
        def step(*args: object, **kwargs: object) -> object:
            if self.at is not None and self.steps == self.at:
                raise SimulatedCrash(f"crash at step {self.steps}")
            self.steps += 1
            return real(*args, **kwargs)

        return step

    @contextmanager
    def armed(self) -> Iterator[None]:
        with (
            mock.patch.object(os, "rename", self._wrap(os.rename)),
            mock.patch.object(os, "replace", self._wrap(os.replace)),
            mock.patch.object(os, "unlink", self._wrap(os.unlink)),
            mock.patch.object(os, "fsync", self._wrap(os.fsync)),
        ):
            yield


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[Callable[..., PartitionLog]]:
    """Opens logs (default directory tmp_path/p0) and closes them all at teardown."""
    opened: list[PartitionLog] = []

    def _open(config: LogConfig | None = None, directory: Path | None = None) -> PartitionLog:
        log = PartitionLog.open(directory or tmp_path / "p0", config or LogConfig())
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def fill(log: PartitionLog, model: Model, rng: random.Random, batches: int, keys: int = 20) -> None:
    """Coordinator-like traffic: small batches overwriting a few keys, some tombstones,
    timestamps spread over three days before NOW."""
    for i in range(batches):
        ts = NOW - 3 * DAY + i * (3 * DAY // batches)
        records: list[Rec] = []
        for _ in range(rng.randint(1, 4)):
            key = b"key-%03d" % rng.randrange(keys)
            value = None if rng.random() < 0.15 else b"value-%d-" % i + b"x" * rng.randint(0, 40)
            records.append((key, value))
        model.append(log, records, ts)


# -- compaction semantics --------------------------------------------------------------


def test_compaction_keeps_latest_per_key_at_original_offsets(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=600, index_interval_bytes=150))
    model = Model()
    for i in range(10):  # keys deleted long ago: their tombstones go too
        model.append(log, [(b"gone-%d" % i, b"x" * 30), (b"gone-%d" % i, None)], NOW - 4 * DAY)
    fill(log, model, random.Random(1), 300)
    log.flush()
    before = read_all(log)
    segments_before, size_before = log.segment_count, log.size_bytes
    end, durable = active_base(log), log.durable_offset
    assert segments_before > 20

    stats = compact(log, NOW, DAY)

    model.present = model.after_compaction(end, durable, NOW - DAY)
    model.check(log)
    assert log_map(log) == latest_values((r.key, r.value) for r in before)
    assert log.size_bytes < size_before // 4
    assert log.segment_count < segments_before
    assert log.log_start_offset == 0
    closed_before = [r for r in before if r.offset < end]
    assert stats.segments_before == segments_before - 1
    assert stats.segments_after == log.segment_count - 1
    assert stats.records_kept + stats.records_dropped == len(closed_before)
    assert stats.records_kept == len([o for o in model.present if o < end])
    assert stats.bytes_after == sum(s.size_bytes for s in log._segments[:-1])
    assert stats.bytes_before - stats.bytes_after == size_before - log.size_bytes
    assert 10 <= stats.tombstones_dropped < stats.records_dropped
    # Every record that stayed is byte-identical in key and value, at its offset.
    by_offset = {r.offset: r for r in before}
    for record in read_all(log):
        original = by_offset[record.offset]
        assert (record.key, record.value) == (original.key, original.value)
        # Batches keep their base offset, last offset and max timestamp.
        assert (record.batch_base, record.batch_last, record.batch_max_ts) == (
            original.batch_base,
            original.batch_last,
            original.batch_max_ts,
        )


def test_tombstones_older_than_retention_go_and_younger_stay(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=100))  # one batch per segment
    old, young = NOW - 2 * DAY, NOW - DAY // 2
    append(log, [(b"a", b"a1"), (b"b", b"b1"), (b"c", b"c1")], old)  # 0-2
    append(log, [(b"a", None)], old)  # 3: old tombstone, latest for a
    append(log, [(b"b", None)], young)  # 4: young tombstone, latest for b
    append(log, [(b"c", None)], old)  # 5: old tombstone, superseded below
    append(log, [(b"c", b"c2")], old)  # 6
    append(log, [(b"d", None), (b"e", b"e1")], [old, young])  # 7-8: batch max ts is young
    append(log, [(b"z", b"active")], NOW)  # the active segment
    assert log.segment_count == 7 and active_base(log) == 9
    log.flush()
    stats = compact(log, NOW, DAY)
    stored = [(r.offset, r.key, r.value) for r in read_all(log)]
    # a: gone entirely; b: only its tombstone; c: only its latest value; d's tombstone
    # is in a young batch (the batch's max timestamp counts) and stays.
    assert stored == [
        (4, b"b", None),
        (6, b"c", b"c2"),
        (7, b"d", None),
        (8, b"e", b"e1"),
        (9, b"z", b"active"),
    ]
    assert stats.tombstones_dropped == 1 and stats.records_dropped == 5
    # Later, b's and d's tombstones are old enough too.
    stats = compact(log, NOW + DAY, DAY)
    assert [(r.offset, r.key) for r in read_all(log)] == [(6, b"c"), (8, b"e"), (9, b"z")]
    assert stats.tombstones_dropped == 2
    assert log_map(log) == {b"c": b"c2", b"e": b"e1", b"z": b"active"}


def test_active_segment_supersedes_only_what_is_durable(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=150))
    append(log, [(b"k", b"old" * 20)], NOW)
    append(log, [(b"other", b"x" * 60)], NOW)
    append(log, [(b"k", b"new")], NOW)  # in the active segment, not fsynced
    assert log.segment_count == 3 and log.durable_offset == 0
    compact(log, NOW)
    # A crash could still lose offset 2: offset 0 must not go because of it.
    assert [r.offset for r in read_all(log)] == [0, 1, 2]
    log.flush()
    compact(log, NOW)
    assert [(r.offset, r.value) for r in read_all(log)] == [(1, b"x" * 60), (2, b"new")]


def test_keyless_records_are_dropped(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(LogConfig(segment_bytes_max=100))
    append(log, [(None, b"no key"), (b"k", b"v")], NOW)
    append(log, [(b"k2", b"v2")], NOW)
    log.flush()
    stats = compact(log, NOW)
    assert [(r.offset, r.key) for r in read_all(log)] == [(1, b"k"), (2, b"k2")]
    assert stats.records_dropped == 1 and stats.tombstones_dropped == 0


@pytest.mark.parametrize("compression", [1, 2, 3, 4])
def test_compressed_batches_are_rewritten_with_their_codec(
    open_log: Callable[..., PartitionLog], compression: int
) -> None:
    log = open_log(LogConfig(segment_bytes_max=100))  # one batch per segment
    for i in range(5):
        records: list[Rec] = [(b"k%d" % j, b"value %d %d " % (i, j) * 8) for j in range(6)]
        append(log, records, NOW, compression=compression)
    append(log, [(b"k0", b"latest " * 20)], NOW, compression=compression)
    log.flush()
    before = read_all(log)
    assert all(r.attributes & 7 == compression for r in before)
    compact(log, NOW)
    after = read_all(log)
    assert latest_values((r.key, r.value) for r in after) == log_map(log)
    assert log_map(log) == latest_values((r.key, r.value) for r in before)
    # The fifth batch lost k0 only and was recompressed.
    assert [r.offset for r in after] == [25, 26, 27, 28, 29, 30]
    assert all(r.attributes & 7 == compression for r in after)


def test_transactional_batches_are_kept_whole_and_pin_tombstones(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=120))
    old = NOW - 2 * DAY
    append(log, [(b"t", b"txn-value"), (b"u", b"txn-u")], old, transactional=True)  # 0-1
    append(log, [(b"t", None)], old)  # 2: would expire, but the txn value could return
    append(log, [(b"u", b"plain")], old)  # 3: a txn record never supersedes, so 1 stays
    append(log, [(b"pad", b"p" * 80)], NOW)
    log.flush()
    compact(log, NOW, DAY)
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4]
    assert log_map(log) == {b"u": b"plain", b"pad": b"p" * 80}


# -- offsets, reads and segments after compaction -------------------------------------


def test_reads_in_gaps_return_the_next_batch(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(LogConfig(segment_bytes_max=400, index_interval_bytes=60))
    model = Model()
    fill(log, model, random.Random(2), 150, keys=8)
    log.flush()
    compact(log, NOW, DAY)
    headers = list(log.batch_headers())
    assert len(headers) < 40
    for offset in range(log.log_start_offset, log.next_offset):
        first = next(h for h in headers if h.last_offset >= offset)
        got = parse_header(log.read(offset, 1))
        assert got == first
        assert next(iter(log.batch_headers(offset))) == first
    assert log.read(log.next_offset, 100) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(log.next_offset + 1, 100)


def test_log_start_stays_when_the_first_segments_empty(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    config = LogConfig(segment_bytes_max=150)
    log = open_log(config)
    for i in range(5):
        append(log, [(b"k", b"v%d" % i + b"." * 60)], NOW)
    log.flush()
    compact(log, NOW)
    # Only offset 4 (the active segment) holds a record; segment 0 stays, empty, so the
    # log start does not move, across a reopen too.
    assert [r.offset for r in read_all(log)] == [4]
    assert log._segments[0].base_offset == 0 and log._segments[0].size_bytes == 0
    assert parse_header(log.read(0, 1)).base_offset == 4
    log.close()
    reopened = open_log(config)
    assert reopened.log_start_offset == 0
    assert [r.offset for r in read_all(reopened, 0)] == [4]
    assert parse_header(reopened.read(2, 1)).base_offset == 4


def test_segments_merge_up_to_the_limit_and_a_clean_log_is_left_alone(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    config = LogConfig(segment_bytes_max=700, index_interval_bytes=100)
    log = open_log(config)
    model = Model()
    fill(log, model, random.Random(3), 400, keys=60)
    log.flush()
    count = log.segment_count
    compact(log, NOW, 10 * DAY)
    directory = tmp_path / "p0"
    sizes = [p.stat().st_size for p in sorted(directory.glob("*.log"))]
    assert len(sizes) == log.segment_count < count // 3
    assert all(size <= config.segment_bytes_max for size in sizes)
    # Nothing left to drop: the second pass rewrites nothing.
    files = {p.name: p.stat().st_ino for p in directory.iterdir()}
    stats = compact(log, NOW, 10 * DAY)
    assert stats.records_dropped == 0
    assert stats.segments_before == stats.segments_after
    assert stats.bytes_before == stats.bytes_after
    assert {p.name: p.stat().st_ino for p in directory.iterdir()} == files
    assert leftovers(directory) == []


def test_appends_continue_and_reopen_trusts_the_cleaned_segments(
    open_log: Callable[..., PartitionLog], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupcoord.storage.segment import Segment

    config = LogConfig(segment_bytes_max=500, index_interval_bytes=80)
    log = open_log(config)
    model = Model()
    rng = random.Random(4)
    fill(log, model, rng, 200)
    log.flush()
    end, durable = active_base(log), log.durable_offset
    next_offset = log.next_offset
    compact(log, NOW, DAY)
    model.present = model.after_compaction(end, durable, NOW - DAY)
    assert log.next_offset == next_offset
    fill(log, model, rng, 50)
    model.check(log)
    log.flush()
    content = log.read(0, BIG)
    log._close_all()  # a crash: the index files of the cleaned segments were fsynced
    scans: list[int] = []
    original = Segment.recover

    def counting(segment: Segment, salvage: bool = False) -> int:
        scans.append(segment.base_offset)
        return original(segment, salvage)

    monkeypatch.setattr(Segment, "recover", counting)
    reopened = open_log(config)
    assert scans == [active_base(reopened)]
    assert reopened.read(0, BIG) == content
    model.check(reopened)
    monkeypatch.undo()
    # The cleaned segments' index files equal what a rebuild from scratch produces.
    reopened.close()
    directory = tmp_path / "p0"
    written = {p.name: p.read_bytes() for p in directory.iterdir() if "index" in p.name}
    for name in written:
        (directory / name).unlink()
    rebuilt_log = open_log(config)
    model.check(rebuilt_log)
    rebuilt_log.close()
    assert {p.name: p.read_bytes() for p in directory.iterdir() if "index" in p.name} == written


def test_offset_lookups_by_timestamp_after_compaction(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=200))
    append(log, [(b"a", b"1")], 100)  # 0
    append(log, [(b"b", b"1"), (b"a", b"2")], [300, 200])  # 1-2: max 300 at offset 1
    append(log, [(b"b", b"2")], 400)  # 3
    append(log, [(b"c", b"1" * 90)], 500)  # 4
    log.flush()
    compact(log, 1000, DAY)
    assert [r.offset for r in read_all(log)] == [2, 3, 4]
    # The batch of offsets 1-2 keeps its max timestamp 300 though offset 1 is gone.
    assert log.offset_for_timestamp(0) == (2, 200)
    assert log.offset_for_timestamp(250) == (3, 400)
    assert log.max_timestamp() == (4, 500)


# -- the two-step API ------------------------------------------------------------------


def test_prepare_in_a_worker_thread_while_the_writer_appends(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=500))
    model = Model()
    rng = random.Random(5)
    fill(log, model, rng, 200)
    log.flush()
    durable = log.durable_offset
    plans = []
    worker = threading.Thread(target=lambda: plans.append(prepare_compaction(log, NOW, DAY)))
    worker.start()
    for _ in range(100):  # rolls included
        fill(log, model, rng, 1)
    worker.join()
    plan = plans[0]
    stats = install_compaction(log, plan)
    assert isinstance(stats, CompactionStats) and stats.records_dropped > 0
    # The worker saw the segments of some moment during the appends.
    model.present = model.after_compaction(plan.end_offset, durable, NOW - DAY)
    model.check(log)


def test_flushes_in_another_thread_during_compactions(
    open_log: Callable[..., PartitionLog],
) -> None:
    config = LogConfig(segment_bytes_max=400)
    log = open_log(config)
    model = Model()
    rng = random.Random(6)
    stop = threading.Event()

    def flusher() -> None:
        while not stop.is_set():
            log.flush()

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for _ in range(30):
            fill(log, model, rng, 10, keys=10)
            compact(log, NOW, DAY)
            assert log_map(log) == model.latest()
    finally:
        stop.set()
        thread.join()
    assert log.flush() == log.next_offset
    log.close()
    reopened = open_log(config)
    assert log_map(reopened) == model.latest()


def test_stale_plans_are_discarded(open_log: Callable[..., PartitionLog], tmp_path: Path) -> None:
    log = open_log(LogConfig(segment_bytes_max=300, retention_ms=DAY))
    model = Model()
    fill(log, model, random.Random(7), 80)
    log.flush()
    directory = tmp_path / "p0"
    plan = prepare_compaction(log, NOW)
    assert leftovers(directory)  # the .cleaned files
    with pytest.raises(CompactionError):
        prepare_compaction(log, NOW)  # one at a time per log
    log.advance_log_start_offset(log._segments[1].base_offset)  # deletes the first segment
    assert install_compaction(log, plan) is None
    assert leftovers(directory) == []
    with pytest.raises(ValueError):
        install_compaction(log, plan)
    # Truncation invalidates a plan too, even when the segments stay the same objects.
    plan = prepare_compaction(log, NOW)
    log.truncate_to(log.next_offset - 1)
    assert install_compaction(log, plan) is None
    # A discarded plan frees the log for the next one.
    plan = prepare_compaction(log, NOW)
    plan.discard()
    assert leftovers(directory) == []
    assert compact(log, NOW).records_dropped > 0


def test_nothing_to_compact(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    assert compact(log, NOW) == CompactionStats(0, 0, 0, 0, 0, 0, 0)
    append(log, [(b"k", b"v")], NOW)
    append(log, [(b"k", b"w")], NOW)
    assert compact(log, NOW).segments_before == 0  # one segment: the active one
    assert [r.offset for r in read_all(log)] == [0, 1]


def test_compaction_refuses_a_failed_log(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(LogConfig(segment_bytes_max=100))
    append(log, [(b"k", b"v" * 60)], NOW)
    append(log, [(b"k", b"w" * 60)], NOW)
    log.mark_failed(OSError("injected"))
    with pytest.raises(LogFailed):
        compact(log, NOW)


# -- crashes ---------------------------------------------------------------------------


def crash_and_reopen(log: PartitionLog, directory: Path, config: LogConfig) -> PartitionLog:
    log._close_all()
    return PartitionLog.open(directory, config)


def restarted(log: PartitionLog, crash: bool, directory: Path, config: LogConfig) -> PartitionLog:
    """`log` reopened after a clean close, or after a crash (nothing closed cleanly)."""
    if crash:
        return crash_and_reopen(log, directory, config)
    log.close()
    return PartitionLog.open(directory, config)


def install_or_crash(
    log: PartitionLog,
    plan: CompactionPlan,
    crash_step: int | None,
    directory: Path,
    config: LogConfig,
) -> tuple[PartitionLog, bool]:
    """Install `plan`, crashing at step `crash_step` of the swap (None: never); returns the
    log to go on with (reopened after a crash) and whether it crashed."""
    try:
        with CrashAt(crash_step).armed():
            install_compaction(log, plan)
    except SimulatedCrash:
        return crash_and_reopen(log, directory, config), True
    return log, False


def test_a_crash_at_every_step_of_the_swap_recovers_old_or_new(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes_max=600, index_interval_bytes=100)

    def build(directory: Path) -> tuple[PartitionLog, Model, list[int]]:
        log = PartitionLog.open(directory, config)
        model = Model()
        for i in range(3):  # deleted long ago: tombstones expire
            model.append(log, [(b"gone-%d" % i, b"x"), (b"gone-%d" % i, None)], NOW - 4 * DAY)
        fill(log, model, random.Random(8), 60, keys=30)
        log.flush()
        expected = model.after_compaction(active_base(log), log.durable_offset, NOW - DAY)
        return log, model, expected

    # Count the steps of a clean install.
    log, _, _ = build(tmp_path / "count")
    plan = prepare_compaction(log, NOW, DAY)
    counter = CrashAt(None)
    with counter.armed():
        install_compaction(log, plan)
    log.close()
    assert counter.steps > 10

    outcomes = set()
    for step in range(counter.steps + 1):
        directory = tmp_path / f"crash{step}"
        log, model, compacted = build(directory)
        original = list(model.present)
        plan = prepare_compaction(log, NOW, DAY)
        crash = CrashAt(step)
        if step < counter.steps:
            with crash.armed(), pytest.raises(SimulatedCrash):
                install_compaction(log, plan)
            with pytest.raises(LogFailed):
                append(log, [(b"k", b"v")], NOW)
        else:
            with crash.armed():
                install_compaction(log, plan)
        log = crash_and_reopen(log, directory, config)
        try:
            assert leftovers(directory) == []
            assert [r.offset for r in read_all(log)] in (original, compacted)
            outcomes.add([r.offset for r in read_all(log)] == compacted)
            model.present = [r.offset for r in read_all(log)]
            model.check(log)
            # The log works on: appends, and another compaction.
            model.append(log, [(b"after", b"crash")], NOW)
            log.flush()
            compact(log, NOW, DAY)
            assert log_map(log) == model.latest()
        finally:
            log.close()
    assert outcomes == {False, True}


def test_leftover_cleaned_files_are_deleted_at_open(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes_max=400)
    directory = tmp_path / "p0"
    log = PartitionLog.open(directory, config)
    model = Model()
    fill(log, model, random.Random(9), 100)
    log.flush()
    plan = prepare_compaction(log, NOW, DAY)  # then the process dies
    assert any(name.endswith(".log.cleaned") for name in leftovers(directory))
    # A half-written one, too.
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"\x00" * 30)
    log = crash_and_reopen(log, directory, config)
    try:
        assert leftovers(directory) == []
        model.check(log)
    finally:
        plan.discard()
        log.close()


@pytest.mark.parametrize("renamed", ["all", "first"])
def test_swap_files_without_marker_are_completed(tmp_path: Path, renamed: str) -> None:
    """A Kafka-style interrupted swap (``.swap`` files, old segments still there, no
    marker): each ``.swap`` replaces the segments inside its offset range; ``.cleaned``
    files are dropped. No tombstone expires here, so any mix keeps the latest values."""
    config = LogConfig(segment_bytes_max=500)
    directory = tmp_path / "p0"
    log = PartitionLog.open(directory, config)
    model = Model()
    fill(log, model, random.Random(10), 200, keys=150)
    log.flush()
    latest = model.latest()
    plan = prepare_compaction(log, NOW, 100 * DAY)
    assert len(plan.new) > 1
    for index, segment in enumerate(plan.new):
        if renamed == "first" and index > 0:
            break
        stem = f"{segment.base_offset:020d}"
        for suffix in (".index", ".timeindex", ".log"):
            os.rename(directory / f"{stem}{suffix}.cleaned", directory / f"{stem}{suffix}.swap")
    log = crash_and_reopen(log, directory, config)
    try:
        assert leftovers(directory) == []
        assert log_map(log) == latest
        assert log.next_offset == model.next_offset
        offsets = [r.offset for r in read_all(log)]
        assert set(offsets) <= set(model.present)
        if renamed == "all":
            # Segments after a swap's last batch (whose records all went) may stay: the
            # marker is what tells them apart; without it they are merely redundant.
            compacted = model.after_compaction(plan.end_offset, model.next_offset, 0)
            assert set(compacted) <= set(offsets)
    finally:
        for segment in plan.new:
            segment.close()
        log.close()


def test_unreadable_marker_stops_open(tmp_path: Path) -> None:
    directory = tmp_path / "p0"
    log = PartitionLog.open(directory, LogConfig())
    append(log, [(b"k", b"v")], NOW)
    log.close()
    (directory / SWAP_MARKER_FILE).write_text("garbage\n")
    with pytest.raises(CompactionError):
        PartitionLog.open(directory, LogConfig())


# -- property --------------------------------------------------------------------------

keys_st = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"])
record_st = st.tuples(keys_st, st.one_of(st.none(), st.binary(min_size=0, max_size=60)))
# A burst of batches (the records of each, and how far the clock moves before it, ms).
append_st = st.tuples(
    st.just("append"),
    st.lists(
        st.tuples(st.lists(record_st, min_size=1, max_size=4), st.integers(0, 3_000)),
        min_size=2,
        max_size=12,
    ),
)
crash_step_st = st.one_of(st.none(), st.integers(0, 40))
operations = st.lists(
    st.one_of(
        append_st,
        append_st,
        append_st,
        st.tuples(st.just("flush")),
        st.tuples(st.just("flush")),
        # tombstone retention, and a crash at that step of the install (None: none)
        st.tuples(st.just("compact"), st.integers(0, 20_000), crash_step_st),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("crash")),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    segment_bytes_max=st.integers(120, 1_000),
    index_interval_bytes=st.integers(0, 400),
    ops=operations,
    final_retention=st.integers(0, 20_000),
    final_crash_step=crash_step_st,
)
def test_compaction_at_random_points_keeps_the_latest_values(
    segment_bytes_max: int,
    index_interval_bytes: int,
    ops: list[tuple[object, ...]],
    final_retention: int,
    final_crash_step: int | None,
) -> None:
    config = LogConfig(
        segment_bytes_max=segment_bytes_max, index_interval_bytes=index_interval_bytes
    )
    model = Model()
    now = 10_000
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "partition"
        log = PartitionLog.open(directory, config)
        try:
            # Always end with a flushed log compacted (and maybe crashed) once more.
            for op in [*ops, ("flush",), ("compact", final_retention, final_crash_step)]:
                kind = op[0]
                if kind == "append":
                    burst = op[1]
                    assert isinstance(burst, list)
                    for records, advance in burst:
                        now += advance
                        model.append(log, records, now)
                elif kind == "flush":
                    log.flush()
                elif kind == "compact":
                    retention, crash_step = op[1], op[2]
                    assert isinstance(retention, int)
                    assert crash_step is None or isinstance(crash_step, int)
                    compacted = model.after_compaction(
                        active_base(log), log.durable_offset, now - retention
                    )
                    plan = prepare_compaction(log, now, retention)
                    log, crashed = install_or_crash(log, plan, crash_step, directory, config)
                    if crashed:
                        offsets = [r.offset for r in read_all(log)]
                        assert offsets in (model.present, compacted)
                        compacted = offsets
                    model.present = compacted
                    assert leftovers(directory) == []
                else:  # "reopen" or "crash"
                    log = restarted(log, kind == "crash", directory, config)
                assert log.log_start_offset == 0
                model.check(log)
            # Appends keep working, at the same end offset.
            model.append(log, [(b"a", b"last")], now)
            model.check(log)
        finally:
            log.close()


# -- data topics: KIP-534 delete horizon, producers' batches, min lag, when to clean ------


def producer_batch(
    records: Sequence[Rec], timestamp: int, pid: int, seq: int, *, compression: int = 0
) -> bytes:
    """One batch of an idempotent producer (epoch 0), as a client sends it."""
    return client_batch(
        [(key, value, timestamp + delta) for delta, (key, value) in enumerate(records)],
        producer_id=pid,
        epoch=0,
        seq=seq,
        compression=compression,
    )


def append_raw(log: PartitionLog, batch: bytes) -> int:
    buf = bytearray(batch)
    return log.append(buf, split_batches(buf))


def record_timestamps(log: PartitionLog) -> dict[int, int]:
    """offset -> the timestamp a client reads for it."""
    data = log.read(log.log_start_offset, BIG)
    out: dict[int, int] = {}
    pos = 0
    while pos < len(data):
        header = parse_header(data, pos)
        for record in DefaultRecordBatch(data[pos : pos + header.size_bytes]):
            out[record.offset] = record.timestamp
        pos += header.size_bytes
    return out


@pytest.mark.parametrize("compression", [0, 1, 3, 4])
def test_a_delete_horizon_is_stamped_on_the_first_pass_and_tombstones_go_after_it(
    open_log: Callable[..., PartitionLog], compression: int
) -> None:
    log = open_log(LogConfig(segment_bytes_max=100))  # one batch per segment
    old = NOW - 10 * DAY  # far older than the retention: only the horizon counts
    append(log, [(b"a", b"a1"), (b"b", b"b1")], old, compression=compression)  # 0-1
    append(log, [(b"a", None), (b"c", b"c1")], [old + 5, old + 7], compression=compression)
    append(log, [(b"d", b"d1")], old)  # 4: no tombstone, never stamped
    append(log, [(b"z", b"active")], NOW)  # 5: the active segment
    log.flush()
    timestamps = record_timestamps(log)

    stats = compact(log, NOW, DAY, delete_horizon=True)
    assert stats.tombstones_dropped == 0
    stored = read_all(log)
    assert [(r.offset, r.key, r.value) for r in stored] == [
        (1, b"b", b"b1"),
        (2, b"a", None),
        (3, b"c", b"c1"),
        (4, b"d", b"d1"),
        (5, b"z", b"active"),
    ]
    headers = {h.base_offset: h for h in log.batch_headers()}
    stamped = headers[2]
    assert stamped.attributes & 0x40 and stamped.base_timestamp == NOW + DAY
    assert stamped.compression == compression
    assert not headers[0].attributes & 0x40 and not headers[4].attributes & 0x40
    # Every record keeps the timestamp clients read, stamped batch or not.
    after = record_timestamps(log)
    assert after == {offset: timestamps[offset] for offset in after}

    # Before the horizon the tombstone stays (and is not stamped again); from it, it goes.
    compact(log, NOW + DAY - 1, 0, delete_horizon=True)
    assert [h.base_timestamp for h in log.batch_headers() if h.base_offset == 2] == [NOW + DAY]
    assert [r.offset for r in read_all(log)] == [1, 2, 3, 4, 5]
    stats = compact(log, NOW + DAY, DAY, delete_horizon=True)
    assert stats.tombstones_dropped == 1
    assert [(r.offset, r.key) for r in read_all(log)] == [
        (1, b"b"),
        (3, b"c"),
        (4, b"d"),
        (5, b"z"),
    ]
    # The batch of c keeps its horizon (Kafka keeps a batch's horizon once set).
    assert {h.base_offset: h.base_timestamp for h in log.batch_headers()}[2] == NOW + DAY
    assert record_timestamps(log) == {o: timestamps[o] for o in (1, 3, 4, 5)}


def test_the_coordinators_rule_ignores_delete_horizons(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=100))
    append(log, [(b"a", None)], NOW - 2 * DAY)
    append(log, [(b"z", b"active")], NOW)
    log.flush()
    # Without delete_horizon a tombstone's batch timestamp decides, as before.
    assert compact(log, NOW, DAY).tombstones_dropped == 1
    assert not any(h.attributes & 0x40 for h in log.batch_headers())


def test_the_latest_batch_of_each_producer_stays_emptied(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    config = LogConfig(segment_bytes_max=100)  # one batch per segment
    log = open_log(config)
    append_raw(log, producer_batch([(b"k1", b"a0")], NOW, pid=1, seq=0))  # 0
    append_raw(log, producer_batch([(b"k2", b"a1")], NOW, pid=1, seq=1))  # 1: 1's latest
    append_raw(log, producer_batch([(b"k1", b"b0"), (b"k2", b"b1")], NOW, pid=2, seq=0))
    append(log, [(b"pad", b"p")], NOW)  # 4: the active segment
    log.flush()
    stats = compact(log, NOW, DAY, delete_horizon=True)
    assert stats.records_dropped == 2
    assert [(r.offset, r.key) for r in read_all(log)] == [(2, b"k1"), (3, b"k2"), (4, b"pad")]
    headers = list(log.batch_headers())
    empty = headers[0]
    assert (empty.base_offset, empty.last_offset, empty.records_count) == (1, 1, 0)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (1, 0, 1)
    assert empty.size_bytes == 61 and empty.max_timestamp == NOW
    # It survives a reopen (recovery accepts it) and a pass that changes nothing else.
    log.close()
    log = open_log(config)
    assert [h.base_offset for h in log.batch_headers()][:2] == [1, 2]
    compact(log, NOW, DAY, delete_horizon=True)
    assert [h.base_offset for h in log.batch_headers()][:2] == [1, 2]
    # Once producer 1 writes again (durably), its emptied batch goes.
    append_raw(log, producer_batch([(b"k3", b"a2")], NOW, pid=1, seq=2))
    append(log, [(b"pad2", b"p")], NOW)
    log.flush()
    compact(log, NOW, DAY, delete_horizon=True)
    assert [(h.base_offset, h.records_count) for h in log.batch_headers()] == [
        (2, 2),
        (4, 1),
        (5, 1),
        (6, 1),
    ]


def test_end_offset_leaves_later_segments_uncleaned(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=100))  # one batch per segment
    for i in range(3):
        append(log, [(b"k", b"v%d" % i)], NOW)  # 0-2
    append(log, [(b"j", b"j0"), (b"x", b"x0")], NOW)  # 3-4
    append(log, [(b"j", b"j1")], NOW)  # 5
    append(log, [(b"z", b"active")], NOW)  # 6
    log.flush()
    plan = prepare_compaction(log, NOW, DAY, end_offset=3, delete_horizon=True)
    assert plan.end_offset == 3 and len(plan.old) == 3
    install_compaction(log, plan)
    # Offsets 0 and 1 went (2 is newer); 3 stays though 5 supersedes it: not cleaned.
    assert [r.offset for r in read_all(log)] == [2, 3, 4, 5, 6]
    # An end offset inside a segment cleans only the segments wholly below it.
    plan = prepare_compaction(log, NOW, DAY, end_offset=4)
    assert plan.end_offset == 3 and plan.new == []
    install_compaction(log, plan)
    assert compact(log, NOW, DAY, end_offset=0) == CompactionStats(0, 0, 0, 0, 0, 0, 0)
    compact(log, NOW, DAY, end_offset=5)
    assert [r.offset for r in read_all(log)] == [2, 4, 5, 6]


def test_records_after_the_cleaned_range_supersede_only_what_is_durable(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=100))
    append(log, [(b"k", b"old")], NOW)  # 0
    log.flush()
    append(log, [(b"k", b"new")], NOW)  # 1: closed once 2 is appended, not durable
    append(log, [(b"z", b"active")], NOW)  # 2
    compact(log, NOW, DAY, end_offset=1)
    # A crash could still take offset 1 away: offset 0 stays.
    assert [r.offset for r in read_all(log)] == [0, 1, 2]
    log.flush()
    compact(log, NOW, DAY, end_offset=1)
    assert [r.offset for r in read_all(log)] == [1, 2]


def test_cleanable_range_follows_kafkas_dirty_ratio_and_lags(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=100))
    for i in range(4):
        append(log, [(b"k%d" % i, b"x" * 20)], NOW - (10 - i) * 1000)  # 0-3, one per segment
    append(log, [(b"z", b"active")], NOW)
    log.flush()
    size = log._segments[0].size_bytes
    span = cleanable_range(log, -1, NOW)  # nothing cleaned yet: all dirty
    assert (span.first_dirty_offset, span.end_offset) == (0, 4)
    assert (span.clean_bytes, span.dirty_bytes, span.overdue) == (0, 4 * size, False)
    assert span.dirty_ratio == 1.0 and span.due(0.5) and not span.due(1.0)
    span = cleanable_range(log, 3, NOW)  # cleaned up to offset 3
    assert (span.clean_bytes, span.dirty_bytes) == (3 * size, size)
    assert span.dirty_ratio == 0.25 and not span.due(0.5) and span.due(0.2)
    assert not cleanable_range(log, 4, NOW).due(0.0)  # nothing dirty
    # min.compaction.lag.ms: the first dirty segment with a record newer than the lag ends
    # the range (segment 3's record is at NOW - 7000).
    span = cleanable_range(log, -1, NOW, min_lag_ms=7_500)
    assert (span.end_offset, span.dirty_bytes) == (3, 3 * size)
    assert cleanable_range(log, -1, NOW, min_lag_ms=6_500).end_offset == 4
    # max.compaction.lag.ms: a dirty segment's first batch older than it makes it due.
    span = cleanable_range(log, 3, NOW, max_lag_ms=6_500)
    assert span.overdue and span.due(0.99)
    assert not cleanable_range(log, 3, NOW, max_lag_ms=7_500).overdue
    # An offset outside the log counts as the log start.
    assert cleanable_range(log, 99, NOW).first_dirty_offset == 0


@dataclass
class DataModel:
    """Every record appended to a data topic's log (offset -> key, value, timestamp) and
    each producer's latest batch (producer id -> last offset, last sequence)."""

    records: dict[int, tuple[bytes, bytes | None, int]] = field(default_factory=dict)
    producers: dict[int, tuple[int, int]] = field(default_factory=dict)
    sequences: dict[int, int] = field(default_factory=dict)
    next_offset: int = 0

    def append(
        self, log: PartitionLog, pid: int, records: Sequence[Rec], now: int, compression: int
    ) -> None:
        if pid < 0:
            base = append(
                log, records, [now + i for i in range(len(records))], compression=compression
            )
        else:
            seq = self.sequences.get(pid, 0)
            base = append_raw(log, producer_batch(records, now, pid, seq, compression=compression))
            self.sequences[pid] = seq + len(records)
            self.producers[pid] = (base + len(records) - 1, seq + len(records) - 1)
        assert base == self.next_offset
        for delta, (key, value) in enumerate(records):
            assert key is not None
            self.records[base + delta] = (key, value, now + delta)
        self.next_offset = base + len(records)

    def check(self, log: PartitionLog) -> None:
        stored = read_all(log)
        replayed = [(o, *self.records[o][:2]) for o in sorted(self.records)]
        assert log_map(log) == latest_values((k, v) for _, k, v in replayed)
        latest: dict[bytes, int] = {}
        for offset, key, _ in replayed:
            latest[key] = offset
        by_offset = {r.offset: r for r in stored}
        for key, offset in latest.items():
            if self.records[offset][1] is not None:
                assert by_offset[offset].value == self.records[offset][1], key
        timestamps = record_timestamps(log)
        for record in stored:
            assert (record.key, record.value) == self.records[record.offset][:2]
            assert timestamps[record.offset] == self.records[record.offset][2]
        last: dict[int, tuple[int, int]] = {}
        for header in log.batch_headers():
            if header.producer_id >= 0:
                last[header.producer_id] = (header.last_offset, header.last_sequence)
        assert last == self.producers
        assert log.next_offset == self.next_offset


data_append_st = st.tuples(
    st.just("append"),
    st.lists(
        st.tuples(
            st.sampled_from([-1, 1, 2]),  # producer id (-1: none)
            st.lists(record_st, min_size=1, max_size=4),
            st.integers(0, 3_000),  # how far the clock moves first, ms
            st.sampled_from([0, 0, 1, 3]),  # compression
        ),
        min_size=1,
        max_size=10,
    ),
)
data_operations = st.lists(
    st.one_of(
        data_append_st,
        data_append_st,
        st.tuples(st.just("flush")),
        # clock advance, tombstone retention, which segment the pass ends at (past the
        # last: the active one), a crash at that step of the install
        st.tuples(
            st.just("compact"),
            st.sampled_from([0, 1_000, 10_000, 30_000]),
            st.sampled_from([0, 500, 5_000, 20_000]),
            st.integers(0, 12),
            crash_step_st,
        ),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("crash")),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(segment_bytes_max=st.integers(120, 800), ops=data_operations)
def test_data_topic_compaction_keeps_latest_values_timestamps_and_producer_state(
    segment_bytes_max: int, ops: list[tuple[object, ...]]
) -> None:
    """A data topic's passes (delete horizons, producers' batches, an end offset) at random
    points, with crashes during the swap: replaying the log gives the same values, every
    live key's latest record stays, every record keeps its timestamp, and each producer's
    latest batch header (last offset and sequence) survives."""
    config = LogConfig(segment_bytes_max=segment_bytes_max, index_interval_bytes=100)
    model = DataModel()
    now = 10_000
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "partition"
        log = PartitionLog.open(directory, config)
        try:
            for op in [*ops, ("flush",), ("compact", 0, 0, 99, None)]:
                kind = op[0]
                if kind == "append":
                    burst = op[1]
                    assert isinstance(burst, list)
                    for pid, records, advance, compression in burst:
                        now += advance
                        model.append(log, pid, records, now, compression)
                elif kind == "flush":
                    log.flush()
                elif kind == "compact":
                    advance, retention, end_index, crash_step = op[1:]
                    assert isinstance(advance, int) and isinstance(retention, int)
                    assert isinstance(end_index, int)
                    assert crash_step is None or isinstance(crash_step, int)
                    now += advance
                    bases = [segment.base_offset for segment in log._segments]
                    end_offset = bases[end_index] if end_index < len(bases) else None
                    plan = prepare_compaction(
                        log, now, retention, end_offset=end_offset, delete_horizon=True
                    )
                    log, _ = install_or_crash(log, plan, crash_step, directory, config)
                    assert leftovers(directory) == []
                else:  # "reopen" or "crash"
                    log = restarted(log, kind == "crash", directory, config)
                assert log.log_start_offset == 0
                model.check(log)
        finally:
            log.close()

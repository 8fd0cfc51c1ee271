"""Unit tests of storage/: segmented partition log, recovery, lookups, retention and the
group committer. No sockets; real files under pytest's tmp_path."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import threading
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

import groupcoord.storage.log as log_module
from groupcoord.protocol.batches import BatchHeader, parse_header, split_batches
from groupcoord.storage import (
    CommitterClosed,
    GroupCommitter,
    LogClosed,
    LogConfig,
    LogFailed,
    OffsetOutOfRange,
    PartitionLog,
    TooManyWaiters,
    apply_retention,
)
from tests.unit.waits import thread_event, turns

BIG = 1 << 30


# -- helpers ---------------------------------------------------------------------------


def make_batch(timestamps: Sequence[int], value_size: int = 40, key: bytes | None = None) -> bytes:
    """One uncompressed v2 batch, one record per timestamp (offset deltas 0..n-1)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=10**7,
    )
    for delta, ts in enumerate(timestamps):
        value = bytes([delta % 251]) * value_size
        builder.append(delta, timestamp=ts, key=key, value=value, headers=[])
    return bytes(builder.build())


def append(log: PartitionLog, *batches: bytes) -> int:
    buf = bytearray(b"".join(batches))
    return log.append(buf, split_batches(buf))


def parse_all(data: bytes) -> list[BatchHeader]:
    headers = []
    pos = 0
    while pos < len(data):
        header = parse_header(data, pos)
        headers.append(header)
        pos += header.size_bytes
    assert pos == len(data), "read returned a partial batch"
    return headers


def split_raw(data: bytes) -> list[bytes]:
    out = []
    pos = 0
    while pos < len(data):
        size = parse_header(data, pos).size_bytes
        out.append(data[pos : pos + size])
        pos += size
    return out


def same_batch(stored: bytes, original: bytes) -> bool:
    """Equal apart from the base offset (bytes 0..8) and the leader epoch 0 (bytes 12..16)
    the log stamped in, as Kafka's leader does."""
    return (
        stored[8:12] == original[8:12]
        and stored[12:16] == b"\x00\x00\x00\x00"
        and stored[16:] == original[16:]
    )


class ManualClock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[Callable[..., PartitionLog]]:
    """Opens logs (default directory tmp_path/p0) and closes them all at teardown."""
    opened: list[PartitionLog] = []

    def _open(
        config: LogConfig | None = None,
        directory: Path | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> PartitionLog:
        directory = directory or tmp_path / "p0"
        config = config or LogConfig()
        if clock_ms is None:
            log = PartitionLog.open(directory, config)
        else:
            log = PartitionLog.open(directory, config, clock_ms=clock_ms)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def log_files(directory: Path, suffix: str = ".log") -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(suffix))


# -- append and read -------------------------------------------------------------------


def test_append_stamps_consecutive_offsets_in_place(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    assert (log.log_start_offset, log.next_offset, log.segment_count) == (0, 0, 1)
    first = make_batch([10, 11, 12])
    second = make_batch([13])
    buf = bytearray(first + second)
    assert log.append(buf, split_batches(buf)) == 0
    # The caller's buffer carries the assigned offsets; nothing else changed.
    assert [h.base_offset for h in split_batches(buf)] == [0, 3]
    assert append(log, make_batch([14, 15])) == 4
    assert log.next_offset == 6
    headers = parse_all(log.read(0, BIG))
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 2), (3, 3), (4, 5)]
    assert same_batch(split_raw(log.read(0, BIG))[0], first)
    assert log.size_bytes == len(log.read(0, BIG))


def test_append_rejects_headers_not_matching_the_buffer(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log()
    a, b = make_batch([1, 2]), make_batch([3])
    buf = bytearray(a + b)
    with pytest.raises(ValueError):
        log.append(buf, split_batches(bytearray(a)))
    with pytest.raises(ValueError):
        log.append(buf, [])
    assert (log.next_offset, log.size_bytes) == (0, 0)
    assert log.read(0, BIG) == b""


def test_segments_roll_by_size_and_reads_cross_them(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    log = open_log(LogConfig(segment_bytes_max=1000, index_interval_bytes=100))
    originals = [make_batch([i * 10 + j for j in range(i % 4 + 1)]) for i in range(40)]
    for batch in originals:
        append(log, batch)
    assert log.segment_count > 5
    names = [p.name for p in log_files(tmp_path / "p0")]
    assert names[0] == "00000000000000000000.log"
    assert all(len(name) == len("00000000000000000000.log") for name in names)
    for path in log_files(tmp_path / "p0"):
        assert path.stat().st_size <= 1000
    stored = split_raw(log.read(0, BIG))
    assert len(stored) == len(originals)
    assert all(same_batch(s, o) for s, o in zip(stored, originals, strict=True))
    # Reads from every offset, bounded at various sizes, stay whole and consecutive.
    headers = parse_all(log.read(0, BIG))
    for offset in range(log.next_offset):
        for max_bytes in (1, 150, 700, 2500):
            got = parse_all(log.read(offset, max_bytes))
            assert got[0].base_offset <= offset <= got[0].last_offset
            start = next(i for i, h in enumerate(headers) if h.last_offset >= offset)
            assert got == headers[start : start + len(got)]
            assert len(got) == 1 or sum(h.size_bytes for h in got) <= max_bytes
            # Greedy: the next batch would not have fitted.
            if start + len(got) < len(headers) and len(got) > 0:
                used = sum(h.size_bytes for h in got)
                assert used + headers[start + len(got)].size_bytes > max_bytes or max_bytes < used


def test_read_mid_batch_offsets_use_the_sparse_index(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(index_interval_bytes=256))
    for i in range(60):
        append(log, make_batch([i] * 5, value_size=30))
    segment = log._segments[-1]
    assert segment.index_entry_count > 10
    for offset in range(0, log.next_offset):
        header = parse_all(log.read(offset, 1))[0]
        assert header.base_offset == offset - offset % 5
        assert header.last_offset == header.base_offset + 4
        # The index starts the scan at or before the batch, and close to it.
        position = segment.lookup_position(offset)
        found = segment.find_batch(offset)
        assert found is not None and position <= found[0] < position + 256 + 400


def test_read_max_bytes_returns_whole_batches_and_at_least_one(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log()
    batches = [make_batch([1, 2, 3], value_size=100) for _ in range(4)]
    for batch in batches:
        append(log, batch)
    size = len(batches[0])
    assert len(parse_all(log.read(0, size))) == 1
    assert len(parse_all(log.read(0, size * 2 + size // 2))) == 2
    assert len(parse_all(log.read(0, size * 4))) == 4
    # KIP-74: the first batch comes whole even when larger than max_bytes.
    for max_bytes in (0, 1, 11, 12, 61, size - 1):
        data = log.read(3, max_bytes)
        assert len(data) == size and parse_all(data)[0].base_offset == 3


def test_read_max_bytes_exact_boundaries_across_segments(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=900, index_interval_bytes=200))
    rng = random.Random(3)
    for i in range(30):
        append(log, make_batch([i] * rng.randint(1, 3), value_size=rng.randint(20, 120)))
    assert log.segment_count > 3
    sizes = [h.size_bytes for h in parse_all(log.read(0, BIG))]
    ends = [sum(sizes[: k + 1]) for k in range(len(sizes))]
    for k, end in enumerate(ends):
        # Exactly k+1 batches fit; one byte less drops the last; one more adds nothing.
        assert len(parse_all(log.read(0, end))) == k + 1
        assert len(parse_all(log.read(0, end - 1))) == max(k, 1)
        if k + 1 < len(sizes):
            assert len(parse_all(log.read(0, end + sizes[k + 1] - 1))) == k + 1


def test_rolls_before_relative_offsets_overflow_u32(
    open_log: Callable[..., PartitionLog],
) -> None:
    from aiokafka.record.util import calc_crc32c

    # A batch claiming 2**31 offsets (as after compaction: fewer records than offsets).
    raw = bytearray(make_batch([1]))
    raw[23:27] = (2**31 - 1).to_bytes(4, "big")
    raw[17:21] = calc_crc32c(bytes(raw[21:])).to_bytes(4, "big")
    log = open_log()
    for expected_base in (0, 2**31, 2**32):
        buf = bytearray(raw)
        assert log.append(buf, [parse_header(buf)]) == expected_base
    assert log.segment_count == 2  # the third batch would overflow: a new segment
    assert log.next_offset == 3 * 2**31
    log.close()
    reopened = open_log()
    assert reopened.next_offset == 3 * 2**31 and reopened.recovered_truncated_bytes == 0


def test_read_bounds(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    assert log.read(0, 100) == b""
    append(log, make_batch([1, 2]))
    assert log.read(2, 100) == b""
    with pytest.raises(OffsetOutOfRange) as info:
        log.read(3, 100)
    assert (info.value.log_start_offset, info.value.next_offset) == (0, 2)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    append(log, make_batch([3, 4]))
    log.advance_log_start_offset(3)
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 100)
    # The batch containing the log start is returned whole, as Kafka does.
    assert parse_all(log.read(3, 100))[0].base_offset == 2


def test_batch_headers(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(LogConfig(segment_bytes_max=600, index_interval_bytes=100))
    for i in range(20):
        append(log, make_batch([i, i + 1], value_size=60))
    expected = parse_all(log.read(0, BIG))
    assert log.segment_count > 3
    assert list(log.batch_headers()) == expected
    assert list(log.batch_headers(15)) == expected[7:]
    assert list(log.batch_headers(log.next_offset)) == []
    with pytest.raises(OffsetOutOfRange):
        log.batch_headers(log.next_offset + 1)


# -- recovery --------------------------------------------------------------------------


def test_reopen_intact_log(open_log: Callable[..., PartitionLog], tmp_path: Path) -> None:
    config = LogConfig(segment_bytes_max=700, index_interval_bytes=128)
    log = open_log(config)
    for i in range(30):
        append(log, make_batch([i, i], value_size=50))
    content = log.read(0, BIG)
    log.flush()
    log.close()
    reopened = open_log(config)
    assert reopened.recovered_truncated_bytes == 0
    assert reopened.next_offset == 60 == reopened.durable_offset
    assert reopened.read(0, BIG) == content
    assert reopened.segment_count == log.segment_count
    assert append(reopened, make_batch([99])) == 60
    assert parse_all(reopened.read(60, 1))[0].base_offset == 60


def test_older_segments_with_intact_indexes_are_not_scanned(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupcoord.storage.segment import Segment

    config = LogConfig(segment_bytes_max=700, index_interval_bytes=128)
    log = open_log(config)
    for i in range(30):
        append(log, make_batch([i], value_size=80))
    log.flush()  # seals the rolled segments and moves the recovery point
    content = log.read(0, BIG)
    log._close_all()  # a crash: no close(), the active segment's index is never written
    scans: list[int] = []
    original = Segment.recover

    def counting(segment: Segment, salvage: bool = False) -> int:
        scans.append(segment.base_offset)
        return original(segment, salvage)

    monkeypatch.setattr(Segment, "recover", counting)
    reopened = open_log(config)
    assert reopened.segment_count > 3
    assert scans == [reopened._segments[-1].base_offset]
    assert reopened.read(0, BIG) == content


def test_unflushed_rolled_segments_are_scanned_after_a_crash(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupcoord.storage.segment import Segment

    config = LogConfig(segment_bytes_max=700, index_interval_bytes=128)
    log = open_log(config)
    for i in range(10):
        append(log, make_batch([i], value_size=80))
    log.flush()
    sealed_segments = log.segment_count
    for i in range(10):
        append(log, make_batch([i], value_size=80))
    log._close_all()  # crash before the segments rolled since the flush were fsynced
    scans: list[int] = []
    original = Segment.recover

    def counting(segment: Segment, salvage: bool = False) -> int:
        scans.append(segment.base_offset)
        return original(segment, salvage)

    monkeypatch.setattr(Segment, "recover", counting)
    reopened = open_log(config)
    assert len(scans) == reopened.segment_count - sealed_segments + 1
    assert reopened.next_offset == 20


def test_torn_tail_is_truncated_to_last_whole_batch(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    log = open_log()
    batches = [make_batch([i, i + 1, i + 2], value_size=70) for i in range(5)]
    append(log, batches[0], batches[1], batches[2])
    log.flush()
    for batch in batches[3:]:
        append(log, batch)
    # A torn write lies past the last completed fsync: bytes a flush covered (below the
    # durable offset) found cut short are damage, reported as such.
    log.close()
    path = log_files(tmp_path / "p0")[-1]
    full = path.read_bytes()
    keep = sum(len(b) for b in batches[:3])
    cut = keep + len(batches[3]) // 2  # mid-way through the fourth batch
    path.write_bytes(full[:cut] + b"\xde\xad\xbe\xef" * 9)
    reopened = open_log()
    assert reopened.recovered_truncated_bytes == cut + 36 - keep
    assert reopened.next_offset == 9  # last whole batch ends at offset 8
    assert path.stat().st_size == keep
    assert [h.last_offset for h in parse_all(reopened.read(0, BIG))] == [2, 5, 8]
    assert append(reopened, make_batch([7])) == 9
    assert [h.base_offset for h in reopened.batch_headers()] == [0, 3, 6, 9]
    reopened.close()
    assert open_log().next_offset == 10


def test_torn_batch_header_only(open_log: Callable[..., PartitionLog], tmp_path: Path) -> None:
    log = open_log()
    append(log, make_batch([1]))
    log.close()
    path = log_files(tmp_path / "p0")[-1]
    with path.open("ab") as f:
        f.write(make_batch([2])[:30])  # not even a whole header
    reopened = open_log()
    assert reopened.next_offset == 1 and reopened.recovered_truncated_bytes == 30


def test_corrupt_crc_in_the_middle_of_the_last_segment(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    # Opened as after a crash (no salvage): the batches after an invalid one were never
    # acknowledged, so the log is cut there.
    batches, size = _log_of_8_batches_with_damage(tmp_path, 4)
    reopened = open_log(LogConfig(index_interval_bytes=100))
    assert reopened.next_offset == 8
    assert reopened.recovered_truncated_bytes == size - sum(len(b) for b in batches[:4])
    assert reopened.recovered_salvaged_bytes == 0
    assert len(parse_all(reopened.read(0, BIG))) == 4
    assert append(reopened, make_batch([5])) == 8


def _log_of_8_batches_with_damage(tmp_path: Path, *damaged: int) -> tuple[list[bytes], int]:
    """A closed log of 8 two-record batches whose `damaged` batches each have a byte of
    their records flipped (covered by the CRC); the batches and the file size."""
    log = PartitionLog.open(tmp_path / "p0", LogConfig(index_interval_bytes=100))
    batches = [make_batch([i, i], value_size=50) for i in range(8)]
    for batch in batches:
        append(log, batch)
    log.close()
    path = log_files(tmp_path / "p0")[-1]
    data = bytearray(path.read_bytes())
    for index in damaged:
        data[sum(len(b) for b in batches[:index]) + 70] ^= 0xFF
    path.write_bytes(bytes(data))
    return batches, len(data)


def test_salvage_removes_only_the_damaged_batches_and_keeps_the_later_ones(
    tmp_path: Path,
) -> None:
    batches, size = _log_of_8_batches_with_damage(tmp_path, 2, 5)
    log = PartitionLog.open(tmp_path / "p0", LogConfig(index_interval_bytes=100), salvage=True)
    try:
        kept = parse_all(log.read(0, BIG))
        assert [h.base_offset for h in kept] == [0, 2, 6, 8, 12, 14]  # 4-5 and 10-11 gone
        assert log.recovered_salvaged_bytes == len(batches[2]) + len(batches[5])
        assert log.recovered_truncated_bytes == 0
        assert log.next_offset == 16
        assert log.read(4, BIG)[:61] == log.read(6, BIG)[:61]  # a gap reads as the next
        assert append(log, make_batch([9])) == 16
    finally:
        log.close()
    # The file was rewritten without them: reopening (no salvage) finds nothing to cut.
    again = PartitionLog.open(tmp_path / "p0", LogConfig(index_interval_bytes=100))
    try:
        assert again.recovered_truncated_bytes == 0 and again.next_offset == 17
        assert not [p for p in (tmp_path / "p0").iterdir() if p.name.endswith(".tmp")]
    finally:
        again.close()


def test_salvage_cuts_where_no_whole_batch_follows(tmp_path: Path) -> None:
    batches, size = _log_of_8_batches_with_damage(tmp_path, 7)  # the last batch
    log = PartitionLog.open(tmp_path / "p0", LogConfig(index_interval_bytes=100), salvage=True)
    try:
        assert log.next_offset == 14 and log.recovered_salvaged_bytes == 0
        assert log.recovered_truncated_bytes == len(batches[7])
    finally:
        log.close()


def test_damage_in_a_segment_below_the_recovery_point_keeps_the_later_segments(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    """A segment below the recovery point was fsynced whole: a bad batch in it (found
    because its index is gone, so it is scanned) is damage on disk, not a crash's tail. Only
    that batch is lost (an offset gap); the later segments, acknowledged data, are kept,
    and the loss is counted as damage (the server logs "log damaged"). They used to be
    deleted."""
    config = LogConfig(segment_bytes_max=600, index_interval_bytes=100)
    log = open_log(config)
    for i in range(20):
        append(log, make_batch([i], value_size=100))
    log.flush()
    log.close()
    directory = tmp_path / "p0"
    second = log_files(directory)[1]
    second.with_suffix(".index").unlink()
    data = bytearray(second.read_bytes())
    data[-5] ^= 0xFF  # its last batch is corrupt
    second.write_bytes(bytes(data))
    segment_count = log.segment_count
    reopened = open_log(config)
    assert reopened.segment_count == segment_count
    offsets = [b.base_offset for b in parse_all(reopened.read(0, BIG))]
    assert reopened.next_offset == 20
    assert len(offsets) == 19 and offsets[-1] == 19  # one batch lost, the rest kept
    assert reopened.recovered_salvaged_bytes > 0 and reopened.recovered_truncated_bytes == 0


def test_missing_index_files_are_rebuilt_identically(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    config = LogConfig(segment_bytes_max=2000, index_interval_bytes=150)
    log = open_log(config)
    for i in range(40):
        append(log, make_batch([1000 + (i * 37) % 100, 1000 + i], value_size=40))
    log.flush()
    log.close()
    directory = tmp_path / "p0"
    originals = {p.name: p.read_bytes() for p in directory.iterdir() if "index" in p.name}
    assert any(len(v) > 0 for v in originals.values())
    for name in originals:
        (directory / name).unlink()
    reopened = open_log(config)
    for offset in range(0, reopened.next_offset, 3):
        assert parse_all(reopened.read(offset, 1))[0].last_offset >= offset
    reopened.close()
    rebuilt = {p.name: p.read_bytes() for p in directory.iterdir() if "index" in p.name}
    assert rebuilt == originals


def test_garbage_index_file_is_rejected(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    config = LogConfig(segment_bytes_max=2000, index_interval_bytes=150)
    log = open_log(config)
    for i in range(40):
        append(log, make_batch([i], value_size=40))
    content = log.read(0, BIG)
    log.flush()
    log.close()
    first_index = log_files(tmp_path / "p0", ".index")[0]
    first_index.write_bytes(bytes(range(16)) * 3)
    reopened = open_log(config)
    assert reopened.read(0, BIG) == content
    for offset in range(reopened.next_offset):
        assert parse_all(reopened.read(offset, 1))[0].base_offset == offset


# -- timestamps ------------------------------------------------------------------------


def test_offset_for_timestamp_with_out_of_order_records(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log()
    assert log.offset_for_timestamp(0) is None
    append(log, make_batch([100, 300, 200]))  # offsets 0-2
    append(log, make_batch([150, 250]))  # offsets 3-4
    append(log, make_batch([500, 400]))  # offsets 5-6
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(100) == (0, 100)
    assert log.offset_for_timestamp(101) == (1, 300)
    assert log.offset_for_timestamp(250) == (1, 300)
    assert log.offset_for_timestamp(301) == (5, 500)
    assert log.offset_for_timestamp(450) == (5, 500)
    assert log.offset_for_timestamp(500) == (5, 500)
    assert log.offset_for_timestamp(501) is None


def test_offset_for_timestamp_matches_brute_force(
    open_log: Callable[..., PartitionLog],
) -> None:
    rng = random.Random(7)
    log = open_log(LogConfig(segment_bytes_max=1500, index_interval_bytes=200))
    records: list[int] = []  # timestamp by offset
    base_ts = 10_000
    for _ in range(120):
        # Mostly increasing with jitter, sometimes far back in time.
        count = rng.randint(1, 4)
        timestamps = [base_ts + rng.randint(-300, 300) for _ in range(count)]
        if rng.random() < 0.1:
            timestamps[0] -= 5_000
        base_ts += rng.randint(0, 100)
        append(log, make_batch(timestamps, value_size=rng.randint(0, 60)))
        records.extend(timestamps)
    assert log.segment_count > 5
    for target in list(range(4_000, base_ts + 600, 37)) + [max(records), max(records) + 1]:
        expected = next(((o, t) for o, t in enumerate(records) if t >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    best = max(records)
    assert log.max_timestamp() == (records.index(best), best)


def test_offset_for_timestamp_respects_log_start(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    append(log, make_batch([100, 200, 300]))
    append(log, make_batch([150]))
    log.advance_log_start_offset(2)
    assert log.offset_for_timestamp(0) == (2, 300)
    assert log.offset_for_timestamp(301) is None


def test_max_timestamp(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(LogConfig(segment_bytes_max=150))  # one batch per segment
    assert log.max_timestamp() is None
    append(log, make_batch([1, 5, 3]))  # 0-2
    append(log, make_batch([5, 2]))  # 3-4: ties, later batch
    append(log, make_batch([4]))  # 5
    assert log.segment_count == 3
    assert log.max_timestamp() == (1, 5)
    append(log, make_batch([2, 9, 9]))  # 6-8
    assert log.max_timestamp() == (7, 9)


# -- retention and log start -----------------------------------------------------------


def test_retention_by_time_moves_log_start_and_survives_reopen(
    open_log: Callable[..., PartitionLog],
) -> None:
    day = 24 * 3600 * 1000
    now = 1_700_000_000_000
    config = LogConfig(segment_bytes_max=500, retention_ms=day)
    log = open_log(config)
    for i in range(12):
        # Six old batches (ten days ago), then six recent ones.
        ts = now - 10 * day if i < 6 else now - 1000
        append(log, make_batch([ts], value_size=200))
    log.flush()  # retention deletes only below the high watermark (the durable offset)
    segments = log.segment_count
    assert segments == 12
    assert log.apply_retention(now) == 6
    assert log.log_start_offset == 6
    assert log.segment_count == segments - 6
    with pytest.raises(OffsetOutOfRange):
        log.read(5, 100)
    assert parse_all(log.read(6, 1))[0].base_offset == 6
    assert log.apply_retention(now) == 0
    log.close()
    reopened = open_log(config)
    assert (reopened.log_start_offset, reopened.next_offset) == (6, 12)
    # Everything expired, the active segment too: a new empty one is rolled first.
    assert reopened.apply_retention(now + 100 * day) == 6
    assert reopened.segment_count == 1 and reopened.log_start_offset == 12


def test_retention_by_bytes_keeps_at_least_retention_bytes(
    open_log: Callable[..., PartitionLog],
) -> None:
    batch = make_batch([1], value_size=200)
    config = LogConfig(
        segment_bytes_max=len(batch), retention_ms=-1, retention_bytes=3 * len(batch)
    )
    log = open_log(config)
    for _ in range(10):
        append(log, batch)
    log.flush()
    assert log.segment_count == 10
    assert log.apply_retention(0) == 7
    assert log.size_bytes == 3 * len(batch)
    assert log.log_start_offset == 7
    assert log.apply_retention(0) == 0


def test_retention_helper_over_many_logs(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    config = LogConfig(segment_bytes_max=300, retention_ms=1000)
    logs = [open_log(config, tmp_path / f"p{i}") for i in range(3)]
    for log in logs:
        for _ in range(4):
            append(log, make_batch([5], value_size=200))
        log.flush()
    logs[0].close()  # closed logs are skipped
    assert apply_retention(logs, now_ms=10_000) == 8  # four segments each, the active too
    assert all(log.log_start_offset == 4 == log.next_offset for log in logs[1:])


def test_time_retention_deletes_an_expired_active_segment(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    clock = ManualClock()
    day = 24 * 3600 * 1000
    config = LogConfig(retention_ms=day)
    log = open_log(config, clock_ms=clock)
    for i in range(3):
        append(log, make_batch([clock.now_ms - 10 * day + i]))
    log.flush()
    assert log.segment_count == 1  # an idle topic: its only segment never rolled
    assert log.apply_retention(clock.now_ms) == 1
    assert (log.log_start_offset, log.next_offset, log.durable_offset) == (3, 3, 3)
    assert (log.segment_count, log.size_bytes) == (1, 0)
    assert [p.name for p in log_files(tmp_path / "p0")] == [f"{3:020d}.log"]
    assert log.read(3, BIG) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(2, BIG)
    assert log.offset_for_timestamp(0) is None and log.max_timestamp() is None
    # The new active segment is empty: never deleted, however old.
    assert log.apply_retention(clock.now_ms + 100 * day) == 0
    log.close()
    reopened = open_log(config, clock_ms=clock)
    assert (reopened.log_start_offset, reopened.next_offset) == (3, 3)
    assert append(reopened, make_batch([clock.now_ms])) == 3
    reopened.flush()
    reopened.close()
    again = open_log(config, clock_ms=clock)
    assert (again.log_start_offset, again.next_offset) == (3, 4)
    assert [h.base_offset for h in parse_all(again.read(3, BIG))] == [3]


def test_appends_continue_after_the_active_segment_expired(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    clock = ManualClock()
    config = LogConfig(retention_ms=1000)
    log = open_log(config, clock_ms=clock)
    append(log, make_batch([clock.now_ms - 5000, clock.now_ms - 5000]))
    log.flush()
    assert log.apply_retention(clock.now_ms) == 1
    assert append(log, make_batch([clock.now_ms])) == 2
    assert log.flush() == 3
    assert (log.log_start_offset, log.next_offset, log.segment_count) == (2, 3, 1)
    assert [h.base_offset for h in parse_all(log.read(2, BIG))] == [2]
    log._close_all()  # a crash: no close()
    reopened = open_log(config, clock_ms=clock)
    assert reopened.recovered_truncated_bytes == 0
    assert (reopened.log_start_offset, reopened.next_offset) == (2, 3)
    assert [h.base_offset for h in parse_all(reopened.read(2, BIG))] == [2]


def test_expired_active_segment_deletion_survives_a_crash(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    """Crash right after retention, with nothing flushed since: the new start holds."""
    clock = ManualClock()
    config = LogConfig(retention_ms=1000)
    log = open_log(config, clock_ms=clock)
    append(log, make_batch([1, 2, 3]))
    log.flush()
    assert log.apply_retention(clock.now_ms) == 1
    log._close_all()
    reopened = open_log(config, clock_ms=clock)
    assert (reopened.log_start_offset, reopened.next_offset, reopened.segment_count) == (3, 3, 1)
    assert append(reopened, make_batch([clock.now_ms])) == 3


def test_crash_between_the_new_log_start_and_the_deletions(
    open_log: Callable[..., PartitionLog], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from groupcoord.storage.segment import Segment

    clock = ManualClock()
    config = LogConfig(retention_ms=1000)
    log = open_log(config, clock_ms=clock)
    append(log, make_batch([1, 2]))
    log.flush()

    def crash(segment: Segment) -> None:
        raise OSError(errno.EIO, "crash before the files go")

    monkeypatch.setattr(Segment, "delete_files", crash)
    with pytest.raises(OSError):
        log.apply_retention(clock.now_ms)
    monkeypatch.undo()
    log._close_all()
    # The expired segment is still on disk, next to the rolled one.
    assert len(log_files(tmp_path / "p0")) == 2
    reopened = open_log(config, clock_ms=clock)
    assert (reopened.log_start_offset, reopened.next_offset, reopened.segment_count) == (2, 2, 1)
    assert [p.name for p in log_files(tmp_path / "p0")] == [f"{2:020d}.log"]
    assert append(reopened, make_batch([clock.now_ms])) == 2


def test_crash_before_the_new_log_start_is_persisted_keeps_the_data(
    open_log: Callable[..., PartitionLog], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock()
    config = LogConfig(retention_ms=1000)
    log = open_log(config, clock_ms=clock)
    append(log, make_batch([1, 2]))
    log.flush()
    content = log.read(0, BIG)

    def crash(path: Path, value: int) -> None:
        raise OSError(errno.EIO, "crash before the log start is written")

    monkeypatch.setattr(log_module, "write_offset_file", crash)
    with pytest.raises(OSError):
        log.apply_retention(clock.now_ms)
    monkeypatch.undo()
    log._close_all()
    reopened = open_log(config, clock_ms=clock)
    assert (reopened.log_start_offset, reopened.next_offset) == (0, 2)
    assert reopened.read(0, BIG) == content
    assert reopened.apply_retention(clock.now_ms) == 1  # the empty rolled one stays
    assert (reopened.log_start_offset, reopened.segment_count) == (2, 1)


def test_size_retention_deletes_the_active_segment(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    batch = make_batch([1], value_size=200)
    config = LogConfig(segment_bytes_max=2 * len(batch), retention_ms=-1, retention_bytes=0)
    log = open_log(config)
    for _ in range(5):
        append(log, batch)
    log.flush()
    assert log.segment_count == 3  # [0, 2), [2, 4), [4, 5): the last one active
    assert log.apply_retention(0) == 3
    assert (log.log_start_offset, log.next_offset, log.size_bytes, log.segment_count) == (
        5,
        5,
        0,
        1,
    )
    assert log.apply_retention(0) == 0  # an empty active segment stays
    assert append(log, batch) == 5
    log.close()
    reopened = open_log(config)
    assert (reopened.log_start_offset, reopened.next_offset) == (5, 6)


def test_size_retention_keeps_an_active_segment_needed_for_retention_bytes(
    open_log: Callable[..., PartitionLog],
) -> None:
    batch = make_batch([1], value_size=200)
    config = LogConfig(retention_ms=-1, retention_bytes=1)
    log = open_log(config)
    for _ in range(3):
        append(log, batch)
    log.flush()
    # Deleting the only segment would leave less than retention_bytes.
    assert log.apply_retention(0) == 0
    assert log.log_start_offset == 0


def test_retention_never_deletes_an_empty_active_segment(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    clock = ManualClock()
    config = LogConfig(segment_bytes_max=300, retention_ms=0, retention_bytes=0)
    log = open_log(config, clock_ms=clock)
    # No batch carries a timestamp, so its age is the file's modification time.
    assert log.apply_retention(clock.now_ms + 10**9) == 0
    assert (log.segment_count, log.log_start_offset) == (1, 0)
    # After a truncation to the active segment's base: the older segment goes, it stays.
    append(log, make_batch([1], value_size=200))
    append(log, make_batch([1], value_size=200))
    assert log.segment_count == 2
    log.truncate_to(1)
    log.flush()
    assert log.apply_retention(clock.now_ms + 10**9) == 1
    assert (log.segment_count, log.log_start_offset, log.next_offset) == (1, 1, 1)
    assert [p.name for p in log_files(tmp_path / "p0")] == [f"{1:020d}.log"]


def test_retention_never_deletes_data_above_the_high_watermark(
    open_log: Callable[..., PartitionLog],
) -> None:
    batch = make_batch([1], value_size=200)
    config = LogConfig(segment_bytes_max=len(batch), retention_ms=0, retention_bytes=0)
    log = open_log(config)
    for _ in range(3):
        append(log, batch)
    assert log.durable_offset == 0
    assert log.apply_retention(10**6) == 0  # nothing is durable, nothing goes
    assert log.flush() == 3
    for _ in range(2):
        append(log, batch)
    assert (log.segment_count, log.durable_offset) == (5, 3)
    # [0,1) [1,2) [2,3) are below the high watermark; [3,4) and [4,5) are not yet.
    assert log.apply_retention(10**6) == 3
    assert (log.log_start_offset, log.segment_count) == (3, 2)
    assert len(parse_all(log.read(3, BIG))) == 2
    log.flush()
    assert log.apply_retention(10**6) == 2
    assert (log.log_start_offset, log.next_offset, log.segment_count) == (5, 5, 1)


def test_retention_of_the_active_segment_while_a_flush_runs(
    open_log: Callable[..., PartitionLog],
) -> None:
    """A flush may be fsyncing the active segment when retention deletes it: the flush
    closes its descriptor when it ends, never retention under it."""
    clock = ManualClock()
    log = open_log(LogConfig(retention_ms=1000), clock_ms=clock)
    append(log, make_batch([1]))
    append(log, make_batch([2]))
    plan = log.begin_flush()
    assert plan is not None
    # Not durable until the flush ends: the high watermark is still 0.
    assert log.apply_retention(clock.now_ms) == 0
    log.end_flush(plan, data_synced=False)
    log._dir_dirty = True  # a directory change waits (as after compaction): a flush runs
    plan = log.begin_flush()
    assert plan is not None
    old_active = plan.active
    try:
        deleted = log.apply_retention(clock.now_ms)
        still_open = old_active.file.fd >= 0
    finally:
        assert log.end_flush(plan, data_synced=False) == 2
    assert deleted == 1
    assert old_active.deleted and still_open  # left open for the running flush
    assert old_active.file.fd == -1  # closed by the flush when it ended
    assert (log.log_start_offset, log.next_offset, log.segment_count) == (2, 2, 1)
    assert log.flush() == 2  # makes the rolled segment's name durable
    assert append(log, make_batch([clock.now_ms])) == 2


def test_advance_log_start_offset(open_log: Callable[..., PartitionLog]) -> None:
    config = LogConfig(segment_bytes_max=300)
    log = open_log(config)
    for i in range(6):
        append(log, make_batch([i, i], value_size=100))
    assert log.segment_count == 6
    assert log.advance_log_start_offset(5) == 2  # segments [0,2) and [2,4) go
    assert log.log_start_offset == 5
    assert log.advance_log_start_offset(3) == 0  # never backwards
    with pytest.raises(OffsetOutOfRange):
        log.advance_log_start_offset(13)
    log.close()
    reopened = open_log(config)
    assert reopened.log_start_offset == 5
    assert parse_all(reopened.read(5, 1))[0].base_offset == 4
    assert reopened.offset_for_timestamp(0) == (5, 2)
    assert reopened.max_timestamp() == (10, 5)


def test_retention_deletes_segments_below_a_log_start_a_crash_left(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    """A DeleteRecords persists the new log start before deleting the segments below it: a
    crash between the two leaves them, and the next retention pass deletes them (Kafka's
    deleteLogStartOffsetBreachedSegments), with no retention limit set."""
    config = LogConfig(segment_bytes_max=300, retention_ms=-1, retention_bytes=-1)
    log = open_log(config)
    for i in range(6):
        append(log, make_batch([i, i], value_size=100))
    log.flush()
    log.close()
    # The start persisted inside the last segment [10, 12); the five before it still there.
    (tmp_path / "p0" / "log-start-offset").write_text("11\n")
    reopened = open_log(config)
    assert (reopened.log_start_offset, reopened.segment_count) == (11, 6)
    assert reopened.apply_retention(0) == 5
    assert (reopened.log_start_offset, reopened.segment_count) == (11, 1)
    assert sorted(p.name for p in (tmp_path / "p0").glob("*.log")) == [f"{10:020d}.log"]
    assert reopened.apply_retention(0) == 0


def test_segment_ms_rolls_old_active_segment(open_log: Callable[..., PartitionLog]) -> None:
    clock = ManualClock()
    log = open_log(LogConfig(segment_ms=1000), clock_ms=clock)
    append(log, make_batch([clock.now_ms]))
    clock.now_ms += 500
    append(log, make_batch([clock.now_ms]))
    assert log.segment_count == 1
    clock.now_ms += 501
    append(log, make_batch([clock.now_ms]))
    assert log.segment_count == 2 and log._segments[-1].base_offset == 2


# -- truncation ------------------------------------------------------------------------


def test_truncate_to_drops_the_batch_containing_the_offset(
    open_log: Callable[..., PartitionLog],
) -> None:
    config = LogConfig(segment_bytes_max=400, index_interval_bytes=50)
    log = open_log(config)
    for i in range(10):
        append(log, make_batch([i * 10, i * 10 + 1, i * 10 + 2], value_size=50))
    segments = log.segment_count
    log.truncate_to(14)  # offsets 12-14 are one batch: it goes whole
    assert log.next_offset == 12
    assert log.segment_count < segments
    assert [h.base_offset for h in log.batch_headers()] == [0, 3, 6, 9]
    assert log.durable_offset <= 12
    assert log.max_timestamp() == (11, 32)
    assert append(log, make_batch([7])) == 12
    log.truncate_to(100)  # beyond the end: nothing
    assert log.next_offset == 13
    log.close()
    reopened = open_log(config)
    assert [h.base_offset for h in reopened.batch_headers()] == [0, 3, 6, 9, 12]
    reopened.truncate_to(0)
    assert (reopened.next_offset, reopened.size_bytes, reopened.segment_count) == (0, 0, 1)


@pytest.mark.parametrize("seed", range(8))
def test_truncate_index_state_matches_a_rebuild(
    open_log: Callable[..., PartitionLog], tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    config = LogConfig(index_interval_bytes=rng.choice([0, 60, 120, 250]))
    log = open_log(config)
    ts = 1000
    for _ in range(40):
        # Rising timestamps with occasional jumps, so time index entries often point
        # at batches before the index point that added them.
        ts += rng.choice([0, 1, 5, 300])
        count = rng.randint(1, 3)
        append(log, make_batch([ts - rng.randint(0, 50) for _ in range(count)], value_size=30))
    log.truncate_to(rng.randrange(log.next_offset))
    for i in range(rng.randint(0, 5)):
        append(log, make_batch([i], value_size=30))
    log.close()
    directory = tmp_path / "p0"
    written = {p.name: p.read_bytes() for p in directory.iterdir() if "index" in p.name}
    for name in written:
        (directory / name).unlink()
    reopened = open_log(config)
    reopened.close()
    rebuilt = {p.name: p.read_bytes() for p in directory.iterdir() if "index" in p.name}
    assert rebuilt == written


# -- durability ------------------------------------------------------------------------


def test_flush_advances_durable_offset(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log(LogConfig(segment_bytes_max=300))
    assert log.flush() == 0
    for i in range(5):
        append(log, make_batch([i], value_size=150))
    assert log.durable_offset == 0
    assert log.flush() == 5 == log.durable_offset
    assert log.flush() == 5


def test_flush_fsyncs_segments_rolled_since_the_last_flush(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(LogConfig(segment_bytes_max=300))
    append(log, make_batch([0], value_size=150))
    log.flush()
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    for i in range(4):
        append(log, make_batch([i], value_size=150))
    assert log.segment_count == 5
    log.flush()
    assert {segment.file.fd for segment in log._segments} <= set(synced)


def test_flush_from_another_thread_while_appending(
    open_log: Callable[..., PartitionLog],
) -> None:
    log = open_log(LogConfig(segment_bytes_max=2000))
    stop = threading.Event()
    seen: list[int] = []

    def flusher() -> None:
        while not stop.is_set():
            seen.append(log.flush())

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(300):
            append(log, make_batch([i], value_size=100))
    finally:
        stop.set()
        thread.join()
    assert seen == sorted(seen)
    assert log.flush() == 300 == log.durable_offset
    assert len(parse_all(log.read(0, BIG))) == 300


def test_fsync_failure_is_sticky_until_reopen(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log()
    append(log, make_batch([1]))

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        log.flush()
    monkeypatch.undo()
    # A retried fsync could succeed without the lost pages: the log stays failed.
    with pytest.raises(LogFailed):
        log.flush()
    with pytest.raises(LogFailed):
        append(log, make_batch([2]))
    assert log.durable_offset == 0
    log.close()
    assert open_log().next_offset == 1


def test_closed_log_rejects_use(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    append(log, make_batch([1]))
    log.close()
    log.close()
    with pytest.raises(LogClosed):
        log.read(0, 10)
    with pytest.raises(LogClosed):
        append(log, make_batch([2]))


def test_empty_log_is_small_in_memory(tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        logs = [PartitionLog.open(tmp_path / f"p{i}", LogConfig()) for i in range(20)]
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    per_log = sum(s.size_diff for s in after.compare_to(before, "filename")) / len(logs)
    for log in logs:
        log.close()
    assert per_log < 4096, per_log


# -- group commit ----------------------------------------------------------------------


async def test_group_commit_resolves_many_waiters_with_few_flush_rounds(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    logs = [open_log(directory=tmp_path / f"g{i}") for i in range(3)]
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    committer = GroupCommitter()
    waits = []
    for i in range(600):
        log = logs[i % 3]
        append(log, make_batch([i]))
        waits.append(committer.wait_durable(log, log.next_offset - 1))
    await asyncio.gather(*waits)
    assert all(log.durable_offset == 200 for log in logs)
    assert committer.rounds == 1
    assert len(fsyncs) <= 6  # one per log (+ directory), not one per waiter
    assert committer.parked == 0
    await committer.close()


async def test_group_commit_batches_appends_made_during_a_slow_fsync(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each fsync is held until the loop has run a while: the producers' appends made
    meanwhile go to the next round."""
    log = open_log()
    real_fsync = os.fsync
    in_fsync, go = threading.Event(), threading.Semaphore(0)

    def slow_fsync(fd: int) -> None:
        in_fsync.set()
        go.acquire(timeout=5)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    committer = GroupCommitter()

    async def producer(n: int) -> None:
        for i in range(5):
            offset = append(log, make_batch([n * 10 + i]))
            await committer.wait_durable(log, offset)
            assert log.durable_offset > offset
            await asyncio.sleep(0)

    producers = asyncio.gather(*(producer(n) for n in range(40)))
    while not producers.done():  # let each fsync go once the loop had its turns
        fsync_entered = asyncio.ensure_future(thread_event(in_fsync))
        await asyncio.wait({producers, fsync_entered}, return_when=asyncio.FIRST_COMPLETED)
        if not fsync_entered.done():
            in_fsync.set()  # no fsync is coming: end the wait
            await fsync_entered
            break
        in_fsync.clear()
        await turns()
        go.release()
    await producers
    assert log.durable_offset == 200
    # 200 acknowledged writes, yet each round covered everything queued meanwhile.
    assert committer.rounds <= 20
    await committer.close()


async def test_group_commit_fails_waiters_when_flush_fails(
    open_log: Callable[..., PartitionLog], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    good, bad = open_log(), open_log(directory=tmp_path / "bad")
    append(good, make_batch([1]))
    append(bad, make_batch([1]))
    bad_fds = {segment.file.fd for segment in bad._segments}
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if fd in bad_fds:
            raise OSError(errno.EIO, "injected")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    committer = GroupCommitter()
    results = await asyncio.gather(
        committer.wait_durable(good, 0),
        committer.wait_durable(bad, 0),
        committer.wait_durable(bad, 0),
        return_exceptions=True,
    )
    assert results[0] is None
    assert all(isinstance(r, OSError) for r in results[1:])
    assert committer.parked == 0
    # The log stays failed: later waiters fail too, without hanging.
    with pytest.raises(LogFailed):
        await committer.wait_durable(bad, 0)
    with pytest.raises(LogFailed):
        await committer.close()


async def test_group_commit_bounds_parked_waiters(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    for i in range(3):
        append(log, make_batch([i]))
    committer = GroupCommitter(waiters_max=2)
    parked = [asyncio.create_task(committer.wait_durable(log, i)) for i in range(2)]
    await asyncio.sleep(0)
    assert committer.parked == 2
    with pytest.raises(TooManyWaiters):
        await committer.wait_durable(log, 2)
    await asyncio.gather(*parked)
    await committer.wait_durable(log, 2)
    await committer.close()


async def test_group_commit_edges_and_close(open_log: Callable[..., PartitionLog]) -> None:
    log = open_log()
    committer = GroupCommitter()
    with pytest.raises(ValueError):
        await committer.wait_durable(log, 0)  # nothing appended yet
    append(log, make_batch([1]))
    committer.track(log)
    await committer.flush_all_now()
    assert log.durable_offset == 1
    await committer.wait_durable(log, 0)  # already durable: no round needed
    assert committer.rounds == 0
    append(log, make_batch([2]))
    waiter = asyncio.create_task(committer.wait_durable(log, 1))
    await asyncio.sleep(0)
    await committer.close()
    await waiter
    assert log.durable_offset == 2
    append(log, make_batch([3]))
    with pytest.raises(CommitterClosed):
        await committer.wait_durable(log, 2)


async def test_group_commit_never_strands_waiters(
    open_log: Callable[..., PartitionLog], tmp_path: Path
) -> None:
    truncated, closed = open_log(), open_log(directory=tmp_path / "closed")
    for log in (truncated, closed):
        for i in range(3):
            append(log, make_batch([i]))
    committer = GroupCommitter()
    await committer.wait_durable(truncated, 0)
    append(truncated, make_batch([9]))
    stranded = asyncio.create_task(committer.wait_durable(truncated, 3))
    on_closed = asyncio.create_task(committer.wait_durable(closed, 2))
    await asyncio.sleep(0)  # both park (and the flusher may start a round)
    assert committer.parked == 2
    closed.close()
    truncated.truncate_to(1)
    with pytest.raises(LogClosed):
        await on_closed
    # Offset 3 is gone; the owner fails what waited on it, or close() does: a round that
    # makes the truncated log durable does not answer it.
    await committer.flush_all_now([truncated])
    assert not stranded.done()
    await asyncio.wait_for(committer.close(), timeout=5)
    with pytest.raises(CommitterClosed):
        await stranded


def test_a_new_log_directory_is_made_durable_in_its_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log's flushes fsync its files and its own directory, never its name in its
    parent: opening a new log fsyncs each parent that gained an entry (here topics/ and the
    data directory), and opening an existing one fsyncs none."""
    synced: list[Path] = []
    real = log_module.fsync_directory

    def record(directory: Path) -> None:
        synced.append(directory)
        real(directory)

    monkeypatch.setattr(log_module, "fsync_directory", record)
    (tmp_path / "data").mkdir()
    log = PartitionLog.open(tmp_path / "data" / "topics" / "t-0", LogConfig())
    assert synced[:2] == [tmp_path / "data" / "topics", tmp_path / "data"]
    log.close()
    synced.clear()
    PartitionLog.open(tmp_path / "data" / "topics" / "t-0", LogConfig()).close()
    assert tmp_path / "data" not in synced and tmp_path / "data" / "topics" not in synced

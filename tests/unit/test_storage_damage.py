"""storage/: damage to stored batches (issue 16, items 1 and 2). Reads check each batch
once and never return a damaged one; recovery tells damage (below the durable offset, or
in a file no write can have torn) from a torn tail, and removes damage alone."""

from __future__ import annotations

from pathlib import Path

import pytest

import groupcoord.storage.segment as segment_module
from groupcoord.coordinator.server.recovery_report import take_same_boot_marker
from groupcoord.storage import CorruptBatch, LogConfig, PartitionLog
from groupcoord.storage.log_recovery import DURABLE_OFFSET_FILE
from tests.unit.test_storage_log import BIG, append, make_batch, parse_all

# Closed segments of ~10 batches, an index entry every ~3: most batches are read from
# segments trusted at open without a scan.
CONFIG = LogConfig(segment_bytes_max=1400, index_interval_bytes=300)


def batch_positions(path: Path) -> list[int]:
    data = path.read_bytes()
    positions = []
    pos = 0
    while pos < len(data):
        positions.append(pos)
        pos += int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
    return positions


def flip(path: Path, *positions: int) -> None:
    data = bytearray(path.read_bytes())
    for position in positions:
        data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def closed_log(directory: Path, batches: int = 40) -> list[bytes]:
    """A cleanly closed, flushed log of one-record batches; returns the batches."""
    log = PartitionLog.open(directory, CONFIG)
    written = [make_batch([i], value_size=80) for i in range(batches)]
    for batch in written:
        append(log, batch)
    log.flush()
    log.close()
    return written


def offsets(data: bytes) -> list[int]:
    return [header.base_offset for header in parse_all(data)]


def test_a_flipped_record_byte_in_a_trusted_segment_is_never_served(tmp_path: Path) -> None:
    directory = tmp_path / "p0"
    closed_log(directory)
    first = sorted(directory.glob("*.log"))[0]
    flip(first, batch_positions(first)[1] + 90)  # inside the second batch's record
    log = PartitionLog.open(directory, CONFIG)
    try:
        assert log.recovered_salvaged_bytes == 0  # trusted: not scanned at open
        assert offsets(log.read(0, BIG)) == [0]  # the batch before it, no further
        with pytest.raises(CorruptBatch) as raised:
            log.read(1, BIG)
        assert raised.value.first_report and raised.value.position == batch_positions(first)[1]
        with pytest.raises(CorruptBatch) as again:
            log.read(1, BIG)
        assert not again.value.first_report  # logged and counted once
        assert offsets(log.read(2, 200))[0] == 2  # the batches after it are served
    finally:
        log.close()


def test_a_flipped_length_byte_raises_instead_of_a_16_mib_batch(tmp_path: Path) -> None:
    directory = tmp_path / "p0"
    closed_log(directory)
    first = sorted(directory.glob("*.log"))[0]
    flip(first, batch_positions(first)[1] + 9)  # batchLength + 16 MiB
    log = PartitionLog.open(directory, CONFIG)
    try:
        assert offsets(log.read(0, BIG)) == [0]
        for max_bytes in (BIG, 10):  # the whole rest, or only the first batch
            with pytest.raises(CorruptBatch):
                log.read(1, max_bytes)
    finally:
        log.close()


def test_each_byte_is_checked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first read of a trusted segment checks CRCs; the steady path then checks none."""
    directory = tmp_path / "p0"
    closed_log(directory)
    checks: list[int] = []
    original = segment_module.calc_crc32c

    def counting(data: memoryview) -> int:
        checks.append(len(data))
        return int(original(data))

    monkeypatch.setattr(segment_module, "calc_crc32c", counting)
    log = PartitionLog.open(directory, CONFIG)
    try:
        first_read = log.read(0, BIG)
        active_base = log._segments[-1].base_offset  # scanned at open: checked then
        closed = [h for h in parse_all(first_read) if h.base_offset < active_base]
        assert len(checks) == len(closed) > 20
        checks.clear()
        for offset in range(0, 40, 3):
            log.read(offset, 500)
        assert log.read(0, BIG) == first_read and not checks
        append(log, make_batch([99]))  # appended batches were validated before
        log.read(40, BIG)
        assert not checks
    finally:
        log.close()


def test_damage_below_the_durable_offset_after_a_crash_is_salvaged(tmp_path: Path) -> None:
    """Offsets below `durable-offset` were covered by a completed fsync: a bad batch there
    is damage, removed alone; the acknowledged batches after it are kept, even with the
    length itself damaged (the next batch is found by a search)."""
    for where in (60, 9):  # inside the record; the length
        directory = tmp_path / f"p{where}"
        log = PartitionLog.open(directory, LogConfig())
        for i in range(20):
            append(log, make_batch([i], value_size=80))
        log.flush()  # the first flush writes the durable offset
        assert int((directory / DURABLE_OFFSET_FILE).read_text()) == 20
        log._close_all()  # a crash
        (path,) = directory.glob("*.log")
        flip(path, batch_positions(path)[8] + where)
        reopened = PartitionLog.open(directory, LogConfig())
        try:
            assert offsets(reopened.read(0, BIG)) == [i for i in range(20) if i != 8]
            assert reopened.recovered_damaged_offsets == [(8, 8)]
            assert reopened.recovered_truncated_bytes == 0
        finally:
            reopened.close()


def test_past_the_durable_offset_a_bad_batch_is_a_torn_tail(tmp_path: Path) -> None:
    """A torn multi-batch write whose later pages persisted but an earlier one did not:
    those bytes were never acknowledged (no fsync completed after them), so the log is
    cut at the first bad batch, valid batches after it or not."""
    directory = tmp_path / "p0"
    log = PartitionLog.open(directory, LogConfig())
    for i in range(10):
        append(log, make_batch([i], value_size=80))
    log.flush()
    append(log, *[make_batch([i], value_size=80) for i in range(10, 20)])  # one write
    log._close_all()  # a crash before its fsync
    (path,) = directory.glob("*.log")
    flip(path, batch_positions(path)[12] + 60)  # a lost page inside the write
    reopened = PartitionLog.open(directory, LogConfig())
    try:
        assert reopened.next_offset == 12 and reopened.recovered_salvaged_bytes == 0
        assert int((directory / DURABLE_OFFSET_FILE).read_text()) == 12
    finally:
        reopened.close()


def test_truncation_lowers_the_durable_offset_before_offsets_are_reused(tmp_path: Path) -> None:
    directory = tmp_path / "p0"
    log = PartitionLog.open(directory, LogConfig())
    try:
        for i in range(10):
            append(log, make_batch([i]))
        log.flush()
        log.truncate_to(4)
        assert int((directory / DURABLE_OFFSET_FILE).read_text()) == 4
    finally:
        log.close()


def test_salvage_damaged_removes_damage_in_a_trusted_segment(tmp_path: Path) -> None:
    """A coordinator log's replay cannot stop at damage: the segment is salvaged as
    recovery does and the read goes on with the batches after it."""
    directory = tmp_path / "p0"
    closed_log(directory)
    first = sorted(directory.glob("*.log"))[0]
    flip(first, batch_positions(first)[2] + 9)
    log = PartitionLog.open(directory, CONFIG)
    try:
        with pytest.raises(CorruptBatch) as raised:
            log.read(2, BIG)
        removed, dropped = log.salvage_damaged(raised.value.path)
        assert removed > 0 and dropped == [(2, 2)]
        assert offsets(log.read(0, BIG)) == [i for i in range(40) if i != 2]
    finally:
        log.close()
    reopened = PartitionLog.open(directory, CONFIG)  # the file was rewritten for good
    try:
        assert offsets(reopened.read(0, BIG)) == [i for i in range(40) if i != 2]
    finally:
        reopened.close()


def test_the_same_boot_marker(tmp_path: Path) -> None:
    kernel = tmp_path / "boot_id"
    kernel.write_text("one\n")
    assert not take_same_boot_marker(tmp_path, kernel)  # a first start
    assert take_same_boot_marker(tmp_path, kernel)  # a restart of the process alone
    kernel.write_text("two\n")
    assert not take_same_boot_marker(tmp_path, kernel)  # the machine restarted
    assert not take_same_boot_marker(tmp_path, tmp_path / "absent")

"""Files of a log directory that disagree with the log's data (storage/segment_files.py):
opening refuses them with an error naming the file, and deletes or cuts nothing. Real
files under tmp_path, no sockets."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from groupcoord.protocol.batches import set_base_offset, split_batches
from groupcoord.storage import DataDirError, LogConfig, PartitionLog
from groupcoord.storage.checkpoint import overwrite_offset_file
from groupcoord.storage.log_recovery import DURABLE_OFFSET_FILE, LOG_START_OFFSET_FILE
from groupcoord.storage.segment import segment_file_name
from tests.unit.test_storage_log import append, make_batch

# Ten records a batch, four batches a segment: segments at 0, 40, 80, ... 200 (active).
CONFIG = LogConfig(segment_bytes_max=4 * len(make_batch(list(range(10)))), index_interval_bytes=0)
RECORDS = 230


def write_log(directory: Path, *, flush: bool = True) -> list[bytes]:
    """A log of RECORDS records in six segments; returns what reading it all gives."""
    log = PartitionLog.open(directory, CONFIG)
    for i in range(RECORDS // 10):
        append(log, make_batch([1000 + i * 10 + k for k in range(10)]))
    if flush:
        log.flush()
    log.close()
    return read_everything(directory)


def read_everything(directory: Path) -> list[bytes]:
    log = PartitionLog.open(directory, CONFIG)
    try:
        assert log.next_offset == RECORDS
        out, offset = [], log.log_start_offset
        while offset < log.next_offset:
            data = log.read(offset, 1 << 20)
            out.append(data)
            offset = split_batches(bytearray(data))[-1].last_offset + 1
        return out
    finally:
        log.close()


def segment(directory: Path, base: int) -> Path:
    return directory / segment_file_name(base, ".log")


def listing(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def refused(directory: Path, names: str) -> str:
    """Open `directory`, expecting a refusal naming `names`; checks nothing changed."""
    before = listing(directory)
    with pytest.raises(DataDirError) as info:
        PartitionLog.open(directory, CONFIG)
    assert names in str(info.value)
    assert listing(directory) == before, "a refused open changed files"
    return str(info.value)


def test_the_log_has_six_segments(tmp_path: Path) -> None:
    write_log(tmp_path / "log")
    bases = sorted(int(p.stem) for p in (tmp_path / "log").glob("*.log"))
    assert bases == [0, 40, 80, 120, 160, 200]


@pytest.mark.parametrize("kind", ["copy", "empty", "garbage"])
def test_a_stray_segment_inside_the_log_is_refused_and_nothing_is_deleted(
    tmp_path: Path, kind: str
) -> None:
    directory = tmp_path / "log"
    before = write_log(directory)
    stray = segment(directory, 1)
    if kind == "copy":
        shutil.copy(segment(directory, 0), stray)
    elif kind == "empty":
        stray.write_bytes(b"")
    else:
        stray.write_bytes(b"\x5a" * 3000)
    message = refused(directory, stray.name)
    assert "move it out" in message
    stray.unlink()  # the operator's part: then everything is there
    assert read_everything(directory) == before


@pytest.mark.parametrize("kind", ["copy", "empty", "garbage"])
def test_a_stray_last_segment_does_not_move_the_log_end(tmp_path: Path, kind: str) -> None:
    directory = tmp_path / "log"
    before = write_log(directory)
    stray = segment(directory, 99_999)
    if kind == "copy":
        shutil.copy(segment(directory, 40), stray)
    elif kind == "empty":
        stray.write_bytes(b"")
    else:
        stray.write_bytes(b"\x5a" * 3000)
    refused(directory, stray.name)
    stray.unlink()
    assert read_everything(directory) == before


def test_a_segment_whose_first_batch_is_below_its_name_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    before = write_log(directory)
    # A closed segment renamed one offset up: its data starts below its name.
    segment(directory, 40).rename(segment(directory, 41))
    refused(directory, segment_file_name(41, ".log"))
    segment(directory, 41).rename(segment(directory, 40))
    assert read_everything(directory) == before


def test_overlapping_segments_are_refused_not_cut(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    before = write_log(directory)
    # A whole, self-consistent segment (its first batch at its name's offset) whose
    # offsets 50-109 overlap the segment at 40 (offsets 40-79).
    batch = bytearray(make_batch(list(range(60))))
    set_base_offset(batch, 0, 50)
    segment(directory, 50).write_bytes(bytes(batch))
    message = refused(directory, segment_file_name(50, ".log"))
    assert "overlaps" in message
    segment(directory, 50).unlink()
    assert read_everything(directory) == before


def test_a_log_start_beyond_the_data_is_refused_and_no_segment_deleted(tmp_path: Path) -> None:
    directory = tmp_path / "log"
    before = write_log(directory)
    start_file = directory / LOG_START_OFFSET_FILE
    start_file.write_text("99999999\n")
    message = refused(directory, LOG_START_OFFSET_FILE)
    assert "99999999" in message and str(RECORDS) in message
    start_file.unlink()
    assert read_everything(directory) == before


def test_a_log_start_inside_the_log_still_deletes_what_retention_left(tmp_path: Path) -> None:
    """An interrupted retention pass is still completed at open (not refused)."""
    directory = tmp_path / "log"
    write_log(directory)
    (directory / LOG_START_OFFSET_FILE).write_text("80\n")
    log = PartitionLog.open(directory, CONFIG)
    try:
        assert (log.log_start_offset, log.next_offset) == (80, RECORDS)
        assert not segment(directory, 0).exists() and not segment(directory, 40).exists()
    finally:
        log.close()


def test_an_empty_last_segment_where_the_log_ends_is_accepted(tmp_path: Path) -> None:
    """A roll whose first write was lost (power cut) leaves an empty last segment at the
    log end: that is a crash's state, not a stray file."""
    directory = tmp_path / "log"
    before = write_log(directory)
    segment(directory, RECORDS).write_bytes(b"")
    assert read_everything(directory) == before


def test_a_torn_last_segment_after_a_torn_predecessor_is_a_crash_tail(tmp_path: Path) -> None:
    """Garbage at the start of the last segment after a predecessor whose own tail is torn:
    a crash's unflushed tail, cut as before (the gap check cannot judge it)."""
    directory = tmp_path / "log"
    write_log(directory)
    path = segment(directory, 200)
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # the predecessor of the new last segment is torn
    segment(directory, RECORDS).write_bytes(b"\x5a" * 100)
    # A torn write lies past the last completed fsync: the durable offset the crash left.
    overwrite_offset_file(directory / DURABLE_OFFSET_FILE, 200, False)
    log = PartitionLog.open(directory, CONFIG)
    try:
        assert log.next_offset == 220  # the torn batch and the segment after it are cut
    finally:
        log.close()

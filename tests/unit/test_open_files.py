"""The LRU of open segment files (storage/open_files.py): more logs than descriptors."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import groupcoord.storage.open_files as open_files_module
from groupcoord.protocol.batches import split_batches
from groupcoord.storage import LogConfig, PartitionLog, install_compaction, prepare_compaction
from groupcoord.storage.open_files import OPEN_FILES, OpenFiles
from tests.support import make_batch


@pytest.fixture
def open_files_max() -> Iterator[None]:
    """The process-wide cache bounded to 8 descriptors for the test."""
    before = OPEN_FILES.max_open
    OPEN_FILES.resize(8)
    try:
        yield
    finally:
        OPEN_FILES.resize(before)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _append(log: PartitionLog, batch: bytes) -> int:
    buf = bytearray(batch)
    return log.append(buf, split_batches(buf))


def test_more_logs_than_open_files(tmp_path: Path, open_files_max: None) -> None:
    """60 logs of 3 segments each through 8 descriptors: every append, flush, read and
    reopen works, and the process never holds more than the bound."""
    fds_before = _open_fds()
    reopens_before = OPEN_FILES.reopens
    config = LogConfig(segment_bytes_max=len(make_batch(5)) * 2)
    logs = [PartitionLog.open(tmp_path / f"p{i}", config) for i in range(60)]
    for round_ in range(6):
        for i, log in enumerate(logs):
            assert _append(log, make_batch(5, start_ts_ms=1000 * i + 10 * round_)) == 5 * round_
        assert _open_fds() <= fds_before + 8
    for log in logs:
        assert log.flush() == 30
        assert log.segment_count == 3
    assert OPEN_FILES.open_count <= 8 and _open_fds() <= fds_before + 8
    for i, log in enumerate(logs):
        data = log.read(0, 1 << 20)
        assert len(split_batches(data)) == 6
        assert data.count(b"v4") == 6
        assert log.offset_for_timestamp(1000 * i + 50) == (25, 1000 * i + 50)
    assert OPEN_FILES.reopens > reopens_before
    for log in logs:
        log.close()
    reopened = [PartitionLog.open(tmp_path / f"p{i}", config) for i in range(60)]
    assert [log.next_offset for log in reopened] == [30] * 60
    assert all(len(split_batches(log.read(0, 1 << 20))) == 6 for log in reopened)
    assert _open_fds() <= fds_before + 8
    for log in reopened:
        log.close()
    assert _open_fds() <= fds_before


def test_compaction_with_one_open_file(tmp_path: Path) -> None:
    """The cleaner's output files are renamed while open: they stay held until then, so
    the swap works even when every other use evicts them."""
    before = OPEN_FILES.max_open
    OPEN_FILES.resize(1)
    try:
        config = LogConfig(segment_bytes_max=len(make_batch(3)) + 1)
        log = PartitionLog.open(tmp_path / "p", config)
        for _ in range(6):
            _append(log, make_batch(3))  # the same keys k0..k2 every time
        log.flush()
        plan = prepare_compaction(log, now_ms=10_000, tombstone_retention_ms=0)
        assert plan.new  # a segment file to rename into place
        assert install_compaction(log, plan) is not None
        assert len(split_batches(log.read(0, 1 << 20))) < 6
        assert log.read(15, 1 << 20).count(b"v2") == 1
        log.close()
        reopened = PartitionLog.open(tmp_path / "p", config)
        assert reopened.next_offset == 18
        assert reopened.read(15, 1 << 20).count(b"v2") == 1
        reopened.close()
    finally:
        OPEN_FILES.resize(before)


def test_a_pinned_descriptor_is_never_closed(tmp_path: Path) -> None:
    """Threads read two files through one descriptor slot: each read is pinned, so no
    read ever lands on the other file's descriptor (a reused number)."""
    cache = OpenFiles(1)
    handles = []
    for name in ("a", "b"):
        path = tmp_path / name
        path.write_bytes(name.encode() * 4096)
        handles.append(cache.open(path, os.O_RDWR))
    wrong: list[bytes] = []

    def reader(index: int) -> None:
        expected = "ab"[index].encode() * 4096
        for _ in range(3000):
            data = handles[index].pread(4096, 0)
            if data != expected:
                wrong.append(data[:8])

    threads = [threading.Thread(target=reader, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    assert cache.open_count <= 2 and cache.reopens > 0
    held = handles[0]
    held.hold()
    handles[1].pread(1, 0)  # needs a descriptor: everything is pinned, so over the bound
    assert held.fd >= 0 and cache.open_count == 2
    for handle in handles:
        handle.close()
    assert cache.open_count == 0


def test_a_closed_handle_never_reopens(tmp_path: Path) -> None:
    cache = OpenFiles(4)
    path = tmp_path / "f"
    path.write_bytes(b"x")
    handle = cache.open(path, os.O_RDWR)
    handle.close()
    with pytest.raises(OSError) as raised:
        handle.pread(1, 0)
    assert raised.value.errno == errno.EBADF


def test_out_of_descriptors_gives_up_an_idle_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EMFILE while (re)opening a segment (descriptors taken by connections): an idle
    descriptor of the cache is closed and the open tried again."""
    cache = OpenFiles(8)
    handles = []
    for i in range(3):
        path = tmp_path / f"f{i}"
        path.write_bytes(b"%d" % i)
        handles.append(cache.open(path, os.O_RDWR))
    real_open = os.open
    failures = [errno.EMFILE]

    def open_(path: object, flags: int, mode: int = 0o777) -> int:
        if failures:
            raise OSError(failures.pop(), "Too many open files")
        return real_open(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(open_files_module.os, "open", open_)
    path = tmp_path / "new"
    handle = cache.open(path, os.O_RDWR | os.O_CREAT)
    assert handles[0].fd == -1 and cache.evictions == 1  # the least recently used went
    assert handles[0].pread(1, 0) == b"0"  # and comes back on use
    handle.close()
    for other in handles:
        other.close()

"""A group-commit round over many logs made durable by one syncfs() (storage/syncfs.py):
used from `syncfs_min_logs` logs on, not below; a failing syncfs falls back to per-log
fsyncs, which report a failing file against its own log only; rolled segments still get
their index files and recovery point; every begun flush is ended. Real files under
pytest's tmp_path; os.fsync and the syncfs function are wrapped to count calls."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import groupcoord.storage.syncfs as syncfs
from groupcoord.coordinator.config import Config, ConfigError, validate
from groupcoord.protocol.batches import split_batches
from groupcoord.storage import GroupCommitter, LogConfig, PartitionLog
from groupcoord.storage.errors import LogFailed
from tests.support import make_batch

pytestmark = pytest.mark.skipif(
    not syncfs.FilesystemSync.supported(), reason="syncfs needs Linux 5.8+"
)


def _append(log: PartitionLog, records: int = 1) -> int:
    buf = bytearray(make_batch(records))
    return log.append(buf, split_batches(buf))


@pytest.fixture
def logs(
    tmp_path: Path, calls: dict[str, int]
) -> Iterator[Callable[[int, LogConfig], list[PartitionLog]]]:
    """Opens logs, flushed once (their new directories) so calls count rounds only."""
    opened: list[PartitionLog] = []

    def _open(n: int, config: LogConfig | None = None) -> list[PartitionLog]:
        made = [PartitionLog.open(tmp_path / f"p{i}", config or LogConfig()) for i in range(n)]
        for log in made:
            log.flush()
        calls["fsync"] = 0
        opened.extend(made)
        return made

    yield _open
    for log in opened:
        try:
            log.close()
        except LogFailed:
            pass


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts os.fsync and syncfs calls; `fail_syncfs` makes syncfs return -1."""
    counts = {"fsync": 0, "syncfs": 0, "fail_syncfs": 0}
    real_fsync, real_syncfs = os.fsync, syncfs._SYNCFS
    assert real_syncfs is not None

    def fsync(fd: int) -> None:
        counts["fsync"] += 1
        real_fsync(fd)

    def fake_syncfs(fd: int) -> int:
        counts["syncfs"] += 1
        return -1 if counts["fail_syncfs"] else real_syncfs(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(syncfs, "_SYNCFS", fake_syncfs)
    return counts


async def _wait_all(committer: GroupCommitter, logs: list[PartitionLog]) -> list[object]:
    waits = [committer.wait_durable(log, _append(log)) for log in logs]
    return list(await asyncio.gather(*waits, return_exceptions=True))


async def test_a_round_of_many_logs_is_one_syncfs_and_no_fsync(logs, calls) -> None:
    many = logs(8)
    committer = GroupCommitter(syncfs_min_logs=4)
    assert await _wait_all(committer, many) == [None] * 8
    assert calls == {"fsync": 0, "syncfs": 1, "fail_syncfs": 0}
    assert [log.durable_offset for log in many] == [1] * 8
    await committer.close()


async def test_a_round_below_the_threshold_uses_fsyncs(logs, calls) -> None:
    few = logs(3)
    committer = GroupCommitter(syncfs_min_logs=4)
    assert await _wait_all(committer, few) == [None] * 3
    assert calls["syncfs"] == 0 and calls["fsync"] == 3
    await committer.close()


async def test_zero_turns_syncfs_off(logs, calls) -> None:
    committer = GroupCommitter(syncfs_min_logs=0)
    assert await _wait_all(committer, logs(8)) == [None] * 8
    assert calls["syncfs"] == 0 and calls["fsync"] == 8
    await committer.close()
    with pytest.raises(ConfigError, match="syncfs_min_logs"):
        validate(Config(syncfs_min_logs=-1))


async def test_a_failed_syncfs_falls_back_to_each_logs_fsync(logs, calls) -> None:
    many = logs(5)
    calls["fail_syncfs"] = 1
    committer = GroupCommitter(syncfs_min_logs=4)
    assert await _wait_all(committer, many) == [None] * 5
    assert calls["syncfs"] == 1 and calls["fsync"] == 5
    assert [log.durable_offset for log in many] == [1] * 5
    await committer.close()


async def test_a_failing_file_fails_only_its_own_log(logs, calls, monkeypatch) -> None:
    """syncfs reports an error (as Linux does for a writeback error anywhere on the
    filesystem); the per-log fsyncs then find which log it was."""
    many = logs(5)
    bad_fd = many[2]._segments[-1].file.fd  # noqa: SLF001 - the file that fails
    counting_fsync = os.fsync

    def fsync(fd: int) -> None:
        if fd == bad_fd:
            raise OSError(5, "Input/output error")
        counting_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    calls["fail_syncfs"] = 1
    committer = GroupCommitter(syncfs_min_logs=4)
    results = await _wait_all(committer, many)
    assert [r is None for r in results] == [True, True, False, True, True]
    assert isinstance(results[2], OSError)
    with pytest.raises(LogFailed):
        many[2].flush()
    # The other logs' flush locks were released: they go on flushing.
    assert await _wait_all(committer, many[:2] + many[3:]) == [None] * 4
    with pytest.raises(LogFailed):  # close() flushes every log, and reports the failed one
        await committer.close()


async def test_rolled_segments_keep_their_index_files_and_recovery_point(logs, calls) -> None:
    many = logs(4, LogConfig(segment_bytes_max=len(make_batch(3)) + 10))
    for log in many:
        _append(log, 3)
    committer = GroupCommitter(syncfs_min_logs=4)
    assert await _wait_all(committer, many) == [None] * 4  # the second append rolls
    assert calls["syncfs"] == 1
    for log in many:
        assert len(log._segments) == 2  # noqa: SLF001
        assert log.durable_offset == 4
        directory = log.directory
        assert (directory / "recovery-point-offset").read_text().strip() == "3"
        assert (directory / "00000000000000000000.index").exists()
    await committer.close()


async def test_after_a_failed_syncfs_the_filesystem_is_synced_file_by_file(
    logs, calls, monkeypatch
) -> None:
    """syncfs reports a writeback error once. The file that failed may belong to a log
    outside the failing round (syncfs writes back everything dirty); had a later round used
    syncfs again, it would have returned 0 and vouched for that log's lost data. So after a
    failure every later round fsyncs each log, and the failed one reports its error."""
    many = logs(5)
    bad_fd = many[4]._segments[-1].file.fd  # noqa: SLF001 - the file whose writeback failed
    counting_fsync = os.fsync

    def fsync(fd: int) -> None:
        if fd == bad_fd:
            raise OSError(5, "Input/output error")
        counting_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    committer = GroupCommitter(syncfs_min_logs=4)
    _append(many[4])  # dirty, but nobody waits on it in the first round
    calls["fail_syncfs"] = 1  # the first round's syncfs meets log 4's failed writeback
    assert await _wait_all(committer, many[:4]) == [None] * 4
    assert calls["syncfs"] == 1
    calls["fail_syncfs"] = 0  # as Linux: the error was reported once
    results = await _wait_all(committer, many[1:])
    assert [r is None for r in results] == [True, True, True, False]
    assert isinstance(results[3], OSError)
    assert calls["syncfs"] == 1  # not asked again
    with pytest.raises(LogFailed):
        await committer.close()


def test_concurrent_flushes_of_the_same_logs_in_opposite_orders_finish(
    logs, calls, monkeypatch
) -> None:
    """A round holds every log's flush lock across its syncfs; close() may flush the same
    logs at once from another thread, listed in another order. The locks are taken in one
    order, so neither waits for a lock the other holds: two flushes of the same logs,
    listed in opposite orders, take their locks in the same order; run at once, both
    finish."""
    many = logs(4)
    for log in many:
        _append(log)
    real_begin = syncfs.FilesystemSync._begin
    locked: dict[threading.Thread, list[PartitionLog]] = {}

    def recording_begin(self: Any, index: int, log: PartitionLog, plans: Any) -> Any:
        locked.setdefault(threading.current_thread(), []).append(log)
        return real_begin(self, index, log, plans)

    monkeypatch.setattr(syncfs.FilesystemSync, "_begin", recording_begin)
    flusher = syncfs.FilesystemSync(min_logs=4)
    threads = [
        threading.Thread(target=flusher.flush, args=(order,), daemon=True)
        for order in (many, many[::-1])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert not any(thread.is_alive() for thread in threads), "the two flushes deadlocked"
    first, second = locked.values()
    assert first == second and sorted(map(id, first)) == sorted(map(id, many))  # one order
    assert [log.durable_offset for log in many] == [1] * 4

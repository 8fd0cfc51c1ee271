"""Unit tests of the group committer's flusher thread (storage/group_commit.py).

The batching, failure, bound and close contracts are tested with the rest of storage in
test_storage_log.py; these cover what the dedicated flusher thread adds: where the fsyncs
run, one loop callback per round, the thread's lifetime, and logs closed mid-round.
No sockets; real files under pytest's tmp_path.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

import storage.group_commit as group_commit
from protocol.batches import split_batches
from storage import CommitterClosed, GroupCommitter, LogClosed, LogConfig, PartitionLog


def _batch(n: int) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=10**7,
    )
    builder.append(0, timestamp=n, key=None, value=b"v" * 40, headers=[])
    return bytearray(builder.build())


def _append(log: PartitionLog, n: int = 0) -> int:
    """Appends one one-record batch; returns its offset."""
    buf = _batch(n)
    return log.append(buf, split_batches(buf))


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[Callable[[str], PartitionLog]]:
    opened: list[PartitionLog] = []

    def _open(name: str = "p0") -> PartitionLog:
        log = PartitionLog.open(tmp_path / name, LogConfig())
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def _flusher_thread(committer: GroupCommitter) -> threading.Thread:
    flusher = committer._flusher
    assert flusher is not None
    return flusher._thread


async def test_fsyncs_run_on_the_flusher_thread_and_close_joins_it(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = [open_log(f"p{i}") for i in range(3)]
    fsync_threads: set[str] = set()
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        fsync_threads.add(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    committer = GroupCommitter()
    # One log: flushed on the flusher thread itself.
    await committer.wait_durable(logs[0], _append(logs[0]))
    thread = _flusher_thread(committer)
    assert thread.is_alive() and fsync_threads == {thread.name}
    # Several logs in one iteration: one round, their fsyncs in parallel on the pool.
    offsets = [_append(log) for log in logs]
    waits = (committer.wait_durable(log, o) for log, o in zip(logs, offsets, strict=True))
    await asyncio.gather(*waits)
    assert committer.rounds == 2
    assert [log.durable_offset for log in logs] == [2, 1, 1]
    assert threading.current_thread().name not in fsync_threads
    await committer.close()
    assert not thread.is_alive()
    with pytest.raises(CommitterClosed):
        await committer.wait_durable(logs[0], _append(logs[0]))


async def test_one_loop_callback_wakes_every_waiter_of_a_round(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log("p0")
    loop = asyncio.get_running_loop()
    posted: list[object] = []
    real_post = loop.call_soon_threadsafe

    def counting_post(callback, *args, **kwargs):  # type: ignore[no-untyped-def]
        posted.append(callback)
        return real_post(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting_post)
    committer = GroupCommitter()
    offsets = [_append(log, i) for i in range(200)]
    await asyncio.gather(*(committer.wait_durable(log, o) for o in offsets))
    assert committer.rounds == 1
    assert len(posted) == 1  # not one per waiter, nor an executor future plus a task wake
    assert committer.parked == 0
    await committer.close()


async def test_appends_during_a_round_wait_for_the_next_fsync(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write is acknowledged only after an fsync that started after its append."""
    log = open_log("p0")
    in_fsync, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def gated_fsync(fd: int) -> None:
        in_fsync.set()
        release.wait(5)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", gated_fsync)
    committer = GroupCommitter()
    first = asyncio.create_task(committer.wait_durable(log, _append(log, 1)))
    while not in_fsync.is_set():
        await asyncio.sleep(0.001)
    # The first round is inside its fsync: this append is not covered by it.
    late = asyncio.create_task(committer.wait_durable(log, _append(log, 2)))
    await asyncio.sleep(0.02)
    assert not first.done() and not late.done()
    release.set()
    await first
    await late
    assert log.durable_offset == 2
    assert committer.rounds == 2
    await committer.close()


async def test_log_closed_during_its_flush_fails_its_waiters(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log("p0")
    real_flush = PartitionLog.flush

    def close_then_flush(self: PartitionLog) -> int:
        self.close()  # closed after _flush_one's check: flush() returns the old offset
        return real_flush(self)

    monkeypatch.setattr(PartitionLog, "flush", close_then_flush)
    committer = GroupCommitter()
    with pytest.raises(LogClosed):
        await asyncio.wait_for(committer.wait_durable(log, _append(log)), timeout=5)
    assert committer.parked == 0
    await committer.close()


async def test_a_broken_flusher_fails_waiters_instead_of_stranding_them(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log("p0")

    def broken(logs: list[PartitionLog]) -> list[int | BaseException]:
        raise RuntimeError("pool shut down")

    monkeypatch.setattr(group_commit, "_flush_logs", broken)
    committer = GroupCommitter()
    with pytest.raises(RuntimeError, match="pool shut down"):
        await asyncio.wait_for(committer.wait_durable(log, _append(log)), timeout=5)
    assert committer.parked == 0
    monkeypatch.undo()
    await committer.close()  # the flusher survived and still stops cleanly
    assert log.durable_offset == 1


async def test_close_waits_for_the_round_in_flight(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log("p0")
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        threading.Event().wait(0.05)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    committer = GroupCommitter()
    waiters = [asyncio.create_task(committer.wait_durable(log, _append(log, i))) for i in range(5)]
    await asyncio.sleep(0.01)  # the round is in its fsync
    thread = _flusher_thread(committer)
    await asyncio.wait_for(committer.close(), timeout=5)
    assert not thread.is_alive()
    assert all(w.done() and w.exception() is None for w in waiters)
    assert committer.parked == 0 and log.durable_offset == 5


async def test_a_dropped_committer_stops_its_thread(
    open_log: Callable[[str], PartitionLog],
) -> None:
    log = open_log("p0")
    committer = GroupCommitter()
    await committer.wait_durable(log, _append(log))
    thread = _flusher_thread(committer)
    del committer
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_committer_serves_one_event_loop(open_log: Callable[[str], PartitionLog]) -> None:
    log = open_log("p0")
    committer = GroupCommitter()
    asyncio.run(committer.wait_durable(log, _append(log)))
    with pytest.raises(RuntimeError, match="one event loop"):
        asyncio.run(committer.wait_durable(log, _append(log)))

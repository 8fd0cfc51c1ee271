"""Unit tests of the group committer (storage/group_commit.py) beyond those in
test_storage_log.py: acknowledgement only after an fsync that started after the append,
close() during a round in flight, and a broken flush worker. No sockets; real files under
pytest's tmp_path."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from groupcoord.protocol.batches import split_batches
from groupcoord.storage import GroupCommitter, LogConfig, PartitionLog
from groupcoord.storage.errors import LogFailed
from tests.support import gate_fsync, make_batch
from tests.unit.waits import Replies, thread_event, turns, turns_until


def _append(log: PartitionLog, n: int = 0) -> int:
    """Appends one one-record batch (timestamp n); returns its offset."""
    buf = bytearray(make_batch(1, start_ts_ms=n))
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


async def test_appends_during_a_round_wait_for_the_next_fsync(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write is acknowledged only after an fsync that started after its append."""
    log = open_log("p0")
    in_fsync, release = gate_fsync(monkeypatch)
    committer = GroupCommitter()
    first = asyncio.create_task(committer.wait_durable(log, _append(log, 1)))
    await thread_event(in_fsync)
    # The first round is inside its fsync: this append is not covered by it.
    late = asyncio.create_task(committer.wait_durable(log, _append(log, 2)))
    await turns()
    assert not first.done() and not late.done()
    release.set()
    await first
    await late
    assert log.durable_offset == 2
    assert committer.rounds == 2
    await committer.close()


async def test_a_broken_flush_worker_fails_waiters_instead_of_stranding_them(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log("p0")

    def broken(self: GroupCommitter, logs: list[PartitionLog]) -> list[int | BaseException]:
        raise RuntimeError("pool shut down")  # e.g. a flusher that cannot run

    monkeypatch.setattr(GroupCommitter, "_flush_logs", broken)
    committer = GroupCommitter()
    with pytest.raises(RuntimeError, match="pool shut down"):
        await asyncio.wait_for(committer.wait_durable(log, _append(log)), timeout=5)
    assert committer.parked == 0
    monkeypatch.undo()
    await committer.close()  # still closes cleanly, and flushes what was appended
    assert log.durable_offset == 1


async def test_close_waits_for_the_round_in_flight(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log("p0")
    in_fsync, release = gate_fsync(monkeypatch)
    committer = GroupCommitter()
    waiters = [asyncio.create_task(committer.wait_durable(log, _append(log, i))) for i in range(5)]
    await thread_event(in_fsync)  # the round is in its fsync
    closing = asyncio.create_task(committer.close())
    await turns()
    assert not closing.done()  # waits for the round in flight
    release.set()
    await asyncio.wait_for(closing, timeout=5)
    assert all(w.done() and w.exception() is None for w in waiters)
    assert committer.parked == 0 and log.durable_offset == 5


async def test_call_when_durable_calls_back_once_durable_or_with_the_failure(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log("p0")
    committer = GroupCommitter()
    got: list[BaseException | None] = []
    done = asyncio.Event()

    def callback(error: BaseException | None) -> None:
        got.append(error)
        done.set()

    committer.call_when_durable(log, _append(log, 1), callback)
    assert got == []  # parked until its round
    await asyncio.wait_for(done.wait(), timeout=5)
    assert got == [None] and log.durable_offset == 1
    committer.call_when_durable(log, 0, callback)  # already durable: at once
    assert got == [None, None]
    with pytest.raises(ValueError):
        committer.call_when_durable(log, 5, callback)  # not appended: raised, not parked

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    done.clear()
    committer.call_when_durable(log, _append(log, 2), callback)
    await asyncio.wait_for(done.wait(), timeout=5)
    assert isinstance(got[-1], OSError) and committer.parked == 0
    monkeypatch.undo()
    with pytest.raises(LogFailed):  # close() flushes every log, and reports the failed one
        await committer.close()


async def test_before_next_round_runs_before_the_round_takes_its_logs(
    open_log: Callable[[str], PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that appends while a round is in flight defers its append to just before
    the next round: its data is covered by that round, in one append."""
    log = open_log("p0")
    in_fsync, release = gate_fsync(monkeypatch)
    committer = GroupCommitter()
    first = asyncio.create_task(committer.wait_durable(log, _append(log, 1)))
    await thread_event(in_fsync)
    assert committer.round_in_flight
    deferred: list[asyncio.Task[None]] = []

    def append_now() -> None:
        assert not committer.round_in_flight  # the first round is over
        deferred.append(asyncio.ensure_future(committer.wait_durable(log, _append(log, 2))))

    committer.before_next_round(append_now)
    await turns()
    assert deferred == []  # not while the first round runs
    release.set()
    await first
    await turns_until(lambda: deferred, "the deferred append")
    await deferred[0]
    assert log.durable_offset == 2 and committer.rounds == 2
    await committer.close()
    called: list[int] = []
    committer.before_next_round(lambda: called.append(1))  # closed: at once
    assert called == [1]


async def test_a_raising_waiter_callback_fails_the_others_and_rounds_go_on(
    open_log: Callable[[str], PartitionLog],
) -> None:
    """A durable callback that raises must not strand the other waiters of its round, nor
    stop later rounds from starting (the round's end runs as a loop callback)."""
    log = open_log("p0")
    committer = GroupCommitter()
    seen = Replies()

    def raising(error: BaseException | None) -> None:
        raise ValueError("a broken waiter")

    committer.call_when_durable(log, _append(log, 1), raising)
    committer.call_when_durable(log, _append(log, 2), seen.append)
    await seen.wait()
    assert len(seen) == 1 and isinstance(seen[0], ValueError)  # failed, not left parked
    assert committer.parked == 0
    # The next append still gets its own round.
    await asyncio.wait_for(committer.wait_durable(log, _append(log, 3)), timeout=5)
    assert log.durable_offset == 3
    await committer.close()

"""Transactional offsets through the shard runtime over a real log: TxnOffsetCommit written
as the producer's transactional batch, the marker (GroupCoordinatorGateway's
complete_transaction) as a control batch, both answered once durable, and the state a
reload of the log (or of the compacted log) rebuilds equal to the live one: pending
offsets stay pending, committed ones committed, aborted ones gone."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.groups import offset_messages as om
from groupcoord.coordinator.groups import offsets as offsets_module
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.txn_commit import TxnOffsetCommitRequest
from groupcoord.coordinator.runtime.clock import ManualClock
from groupcoord.coordinator.runtime.gateway import GroupCoordinatorGateway
from groupcoord.coordinator.runtime.runner import ShardRunner
from groupcoord.coordinator.security.acl_model import ALLOW_ALL
from groupcoord.protocol.batches import DefaultRecordBatch, parse_header
from groupcoord.protocol.control_batches import marker_commits
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import GroupCommitter, LogConfig, compact
from tests.unit.waits import Replies

PID = 4000
EPOCH = 3


async def _runner(
    path: Path, committer: GroupCommitter, segment_bytes: int = 1 << 20
) -> ShardRunner:
    runner = ShardRunner(
        0,
        path,
        GroupConfig(),
        LogConfig(segment_bytes_max=segment_bytes),
        committer,
        clock=ManualClock(wall_ms=1_000_000),
    )
    await runner.load()
    return runner


def _txn_commit(
    runner: ShardRunner,
    replies: list[Any],
    group: str,
    partition: int,
    offset: int,
    pid: int = PID,
    epoch: int = EPOCH,
) -> None:
    request = TxnOffsetCommitRequest(
        transactional_id=f"tx-{pid}",
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        version=3,
        topics=[om.OffsetCommitTopic("t", [om.OffsetCommitPartition(partition, offset)])],
    )
    runner.call_transactional(
        lambda shard, req, now_ms: shard.txn_commit_offsets(req, replies.append, now_ms),
        request,
        None,
        pid,
        epoch,
    )


def _commit(
    runner: ShardRunner, replies: list[Any], group: str, partition: int, offset: int
) -> None:
    request = om.OffsetCommitRequest(
        group_id=group,
        version=9,
        topics=[om.OffsetCommitTopic("t", [om.OffsetCommitPartition(partition, offset)])],
    )
    runner.run(lambda now_ms: runner.shard.offsets.commit_offsets(request, replies.append, now_ms))


def _marker(
    runner: ShardRunner, replies: list[Any], commit: bool, pid: int = PID, epoch: int = EPOCH
) -> None:
    runner.complete_transaction(pid, epoch, commit, replies.append)


def _state(runner: ShardRunner) -> tuple[dict[Any, int], list[tuple[Any, ...]]]:
    """(committed offsets, pending entries as (pid, group, topic, partition, offset))."""
    offsets = runner.shard.offsets
    committed = {k: v.offset for k, v in offsets.snapshot().items()}
    pending = sorted(
        (pid, g, t, p, offsets_module._unpack(entry[1]).offset)  # type: ignore[arg-type]
        for pid, groups in offsets.pending.by_producer.items()
        for g, topics in groups.items()
        for t, parts in topics.items()
        for p, entry in parts.items()
    )
    return committed, pending


def _batches(runner: ShardRunner) -> list[Any]:
    assert runner.log is not None
    data = runner.log.read(0, 1 << 20)
    headers = []
    pos = 0
    while pos < len(data):
        header = parse_header(data, pos)
        headers.append((header, bytes(data[pos : pos + header.size_bytes])))
        pos += header.size_bytes
    return headers


async def test_marker_commits_pending_offsets_once_durable_and_replays(tmp_path: Path) -> None:
    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    replies = Replies()
    _commit(runner, replies, "g", 0, 5)
    _txn_commit(runner, replies, "g", 0, 10)
    _txn_commit(runner, replies, "h", 1, 11)
    await replies.wait(3)
    assert all(p.error == ErrorCode.NONE for r in replies for t in r.topics for p in t.partitions)
    # Pending: invisible as committed offsets.
    assert _state(runner) == (
        {("g", "t", 0): 5},
        [(PID, "g", "t", 0, 10), (PID, "h", "t", 1, 11)],
    )
    done = Replies()
    _marker(runner, done, commit=True)
    assert done == []  # not durable yet
    await done.wait()
    assert done == [ErrorCode.NONE]
    assert _state(runner) == ({("g", "t", 0): 10, ("h", "t", 1): 11}, [])
    # The log: a plain batch, two transactional batches of the producer, a COMMIT marker.
    kinds = [
        (h.is_transactional, h.is_control, h.producer_id, h.producer_epoch)
        for h, _ in _batches(runner)
    ]
    assert kinds == [
        (False, False, -1, -1),
        (True, False, PID, EPOCH),
        (True, False, PID, EPOCH),
        (True, True, PID, EPOCH),
    ]
    marker = list(DefaultRecordBatch(_batches(runner)[-1][1]))
    assert [marker_commits(r.key) for r in marker] == [True]
    live = _state(runner)
    await runner.close()
    again = await _runner(tmp_path / "shard", committer)
    assert _state(again) == live
    await again.close()
    await committer.close()


async def test_abort_drops_and_pending_offsets_survive_a_reload(tmp_path: Path) -> None:
    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    replies = Replies()
    _txn_commit(runner, replies, "g", 0, 10)
    _txn_commit(runner, replies, "g", 1, 20, pid=PID + 1)
    await replies.wait(2)
    done = Replies()
    _marker(runner, done, commit=False)
    await done.wait()
    assert _state(runner) == ({}, [(PID + 1, "g", "t", 1, 20)])
    await runner.close()
    # Reloaded with the second transaction still open: its offset is pending again.
    again = await _runner(tmp_path / "shard", committer)
    assert _state(again) == ({}, [(PID + 1, "g", "t", 1, 20)])
    assert set(again.shard.groups) == {"g"}
    done = Replies()
    _marker(again, done, commit=True, pid=PID + 1)
    await done.wait()
    assert _state(again) == ({("g", "t", 1): 20}, [])
    await again.close()
    await committer.close()


async def test_a_plain_commit_after_the_transactional_one_wins_at_the_commit(
    tmp_path: Path,
) -> None:
    """Kafka keeps the most recent record: a plain commit written after the pending offset
    stays the committed one when the transaction commits (live and replayed)."""
    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    replies = Replies()
    _txn_commit(runner, replies, "g", 0, 10)
    _commit(runner, replies, "g", 0, 7)
    await replies.wait(2)
    done = Replies()
    _marker(runner, done, commit=True)
    await done.wait()
    assert _state(runner) == ({("g", "t", 0): 7}, [])
    await runner.close()
    again = await _runner(tmp_path / "shard", committer)
    assert _state(again) == ({("g", "t", 0): 7}, [])
    await again.close()
    await committer.close()


async def test_a_fenced_producers_marker_writes_nothing(tmp_path: Path) -> None:
    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    replies = Replies()
    _txn_commit(runner, replies, "g", 0, 10, epoch=EPOCH + 1)
    await replies.wait()
    assert runner.log is not None
    end = runner.log.next_offset
    done = Replies()
    _marker(runner, done, commit=True, epoch=EPOCH)
    assert done == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert runner.log.next_offset == end
    stale = Replies()
    _txn_commit(runner, stale, "g", 1, 10, epoch=EPOCH)
    assert [p.error for t in stale[0].topics for p in t.partitions] == [
        ErrorCode.INVALID_PRODUCER_EPOCH
    ]
    assert runner.log.next_offset == end
    await runner.close()
    await committer.close()


@pytest.mark.parametrize("seed", range(12))
async def test_compaction_never_commits_a_pending_or_aborted_offset(
    tmp_path: Path, seed: int
) -> None:
    """Random plain commits, transactional commits of three producers, markers, offset
    deletions and compactions (small segments, tombstones dropped at once): after each
    compaction the reloaded state equals the live one, pending offsets included."""
    rng = random.Random(seed)
    committer = GroupCommitter()
    path = tmp_path / "shard"
    runner = await _runner(path, committer, segment_bytes=400)
    for _ in range(60):
        op = rng.random()
        replies = Replies()
        if op < 0.3:
            _commit(runner, replies, rng.choice("gh"), rng.randrange(3), rng.randrange(1000))
        elif op < 0.6:
            pid = PID + rng.randrange(3)
            _txn_commit(
                runner, replies, rng.choice("gh"), rng.randrange(3), rng.randrange(1000), pid
            )
        elif op < 0.75:
            _marker(runner, replies, rng.random() < 0.5, pid=PID + rng.randrange(3))
        elif op < 0.85:
            shard, group, partition = runner.shard, rng.choice("gh"), rng.randrange(3)
            runner.run(
                lambda now_ms, s=shard, g=group, p=partition, r=replies: s.offsets.delete_offsets(
                    g, {"t": [p]}, r.append, now_ms
                )
            )
        else:
            live = _state(runner)
            await runner._drained.wait()
            assert runner.log is not None
            runner._seal()
            await runner._drained.wait()
            compact(runner.log, runner.clock_ms() + 10**9, 0)
            await runner.close()
            runner = await _runner(path, committer, segment_bytes=400)
            assert _state(runner) == live
            continue
        await replies.wait()
    live = _state(runner)
    await runner.close()
    runner = await _runner(path, committer, segment_bytes=400)
    assert _state(runner) == live
    await runner.close()
    await committer.close()


async def test_gateway_complete_transaction(tmp_path: Path) -> None:
    """The gateway's door: a shard index it does not have is NOT_COORDINATOR."""

    class _Service:
        def __init__(self, runners: list[ShardRunner]) -> None:
            self.runners = runners

        def runner_for(self, group_id: str) -> ShardRunner:
            return self.runners[0]

    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    gateway = GroupCoordinatorGateway(_Service([runner]), None)  # type: ignore[arg-type]
    replies = Replies()
    _txn_commit(runner, replies, "g", 0, 10)
    await replies.wait()
    assert await gateway.complete_transaction(0, PID, EPOCH, True) == ErrorCode.NONE
    assert _state(runner) == ({("g", "t", 0): 10}, [])
    assert await gateway.complete_transaction(5, PID, EPOCH, True) == ErrorCode.NOT_COORDINATOR
    await runner.close()
    assert await gateway.complete_transaction(0, PID, EPOCH, True) == ErrorCode.NOT_COORDINATOR
    await committer.close()


async def test_version_2_marker_epoch_checked_as_kafka(tmp_path: Path) -> None:
    """Issue 18 (KIP-890): a group-side marker carries its transaction version. A version 2
    marker has the bumped epoch, so one at the epoch of the producer's open transaction
    here is stale (INVALID_PRODUCER_EPOCH, nothing written, the offsets stay pending) where
    a version 1 marker at that epoch ends the transaction; equal with nothing open is a
    retry (KAFKA-19999), and the bumped epoch commits."""

    class _Service:
        def __init__(self, runners: list[ShardRunner]) -> None:
            self.runners = runners

        def runner_for(self, group_id: str) -> ShardRunner:
            return self.runners[0]

    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    gateway = GroupCoordinatorGateway(_Service([runner]), None)  # type: ignore[arg-type]
    replies = Replies()
    _txn_commit(runner, replies, "g", 0, 10)
    await replies.wait()
    stale = await gateway.complete_transaction(0, PID, EPOCH, True, transaction_version=2)
    assert stale == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _state(runner) == ({}, [(PID, "g", "t", 0, 10)])
    bumped = await gateway.complete_transaction(0, PID, EPOCH + 1, True, transaction_version=2)
    assert bumped == ErrorCode.NONE
    assert _state(runner) == ({("g", "t", 0): 10}, [])
    retry = await gateway.complete_transaction(0, PID, EPOCH + 1, True, transaction_version=2)
    assert retry == ErrorCode.NONE
    # Version 1: a marker at the transaction's own epoch ends it.
    _txn_commit(runner, replies, "g", 1, 20, epoch=EPOCH + 1)
    await replies.wait(2)
    assert await gateway.complete_transaction(0, PID, EPOCH + 1, True) == ErrorCode.NONE
    assert _state(runner) == ({("g", "t", 0): 10, ("g", "t", 1): 20}, [])
    await runner.close()
    await committer.close()


class _CountingTxns:
    """A transaction coordinator that puts every partition it is asked about in the
    transaction, and counts the questions."""

    def __init__(self) -> None:
        self.asked = 0

    async def verify_partitions(
        self, txn: str, pid: int, epoch: int, partitions: Any, _: float
    ) -> Any:
        self.asked += 1
        return dict.fromkeys(partitions, ErrorCode.NONE)

    async def add_partitions(self, txn: str, pid: int, epoch: int, partitions: Any, *_: Any) -> Any:
        self.asked += 1
        return ErrorCode.NONE


@pytest.mark.parametrize("version", [3, 5])
async def test_txn_offset_commit_asks_the_coordinator_once_per_transaction(
    tmp_path: Path, version: int
) -> None:
    """Issue 18 item 3 (KIP-890, Kafka's sentinel verification guard): TxnOffsetCommit asks
    the transaction coordinator about the group's offsets partition only when the producer
    has no transaction open there at its epoch: the first commit of a transaction asks, a
    second one of the same transaction does not, the first of the next transaction (after
    the marker) or at another epoch asks again."""
    from types import SimpleNamespace

    from groupcoord.coordinator.server.txn_offset_api import handle_txn_offset_commit
    from tests.rawclient import request_class

    class _Service:
        def __init__(self, runners: list[ShardRunner]) -> None:
            self.runners = runners

        def runner_for(self, group_id: str) -> ShardRunner:
            return self.runners[0]

    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    gateway = GroupCoordinatorGateway(_Service([runner]), None)  # type: ignore[arg-type]
    txns = _CountingTxns()
    ctx = SimpleNamespace(
        topics={"t": SimpleNamespace(partitions=[0, 1], topic_id=None)},
        settings=SimpleNamespace(
            transaction_partition_verification_enable=True, offsets_partitions=1
        ),
        groups=gateway,
        txns=txns,
        read_at=0.0,
        authorizer=ALLOW_ALL,
    )

    async def commit(offset: int, epoch: int = EPOCH) -> list[int]:
        m = sys.modules[request_class(28, version).__module__]
        body = m.TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id="g",
            producer_id=PID,
            producer_epoch=epoch,
            topics=(
                m.TxnOffsetCommitRequestTopic(
                    name="t",
                    partitions=(
                        m.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=offset, committed_metadata=None
                        ),
                    ),
                ),
            ),
        )
        answer = handle_txn_offset_commit(
            ctx, SimpleNamespace(body=body, api_version=version, api_key=28)
        )
        if hasattr(answer, "__await__"):
            answer = await answer
        return [p.error_code for t in answer.topics for p in t.partitions]

    assert await commit(10) == [0]
    assert txns.asked == 1
    assert await commit(11) == [0]
    assert txns.asked == 1  # the same transaction: not asked again
    assert await gateway.complete_transaction(0, PID, EPOCH, True) == ErrorCode.NONE
    assert await commit(12) == [0]
    assert txns.asked == 2  # the next transaction asks
    assert await commit(13, EPOCH + 1) == [0]
    assert txns.asked == 3  # another epoch asks
    await runner.close()
    await committer.close()

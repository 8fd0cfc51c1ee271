"""Consumer groups (KIP-848) on the shard runtime over a real log: heartbeats answered
after the fsync, the group rebuilt by a reload, and a failed write answered as a storage
failure (the server sends NOT_COORDINATOR, S9) with the shard back at its durable state."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from coordinator.groups.config import GroupConfig
from coordinator.groups.consumer.messages import HeartbeatRequest
from coordinator.groups.topics import StaticTopicImage
from coordinator.runtime.runner import ShardRunner, ShardState, StorageFailure
from storage import GroupCommitter, LogConfig


async def _runner(path: Path, committer: GroupCommitter, topics: StaticTopicImage) -> ShardRunner:
    runner = ShardRunner(
        0,
        path,
        GroupConfig(consumer_assignment_interval_ms=0),
        LogConfig(segment_bytes_max=1 << 20),
        committer,
        clock_ms=lambda: 1_000_000,
        topics=topics,
    )
    await runner.load()
    return runner


def _join(runner: ShardRunner, member_id: str, replies: list[Any]) -> None:
    request = HeartbeatRequest(
        "g",
        member_id,
        0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=["foo"],
        topic_partitions=[],
    )
    runner.run(lambda now_ms: runner.shard.consumer.heartbeat(request, replies.append, now_ms))


async def _answered(replies: list[Any]) -> None:
    for _ in range(200):
        if replies:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no reply")


async def test_heartbeat_answered_after_fsync_and_group_survives_reload(tmp_path: Path) -> None:
    committer = GroupCommitter()
    topics = StaticTopicImage()
    topics.add("foo", 4)
    runner = await _runner(tmp_path / "shard", committer, topics)
    replies: list[Any] = []
    _join(runner, "m1", replies)
    assert replies == []  # the records are not durable yet
    await _answered(replies)
    assert replies[0].error_code == 0 and replies[0].member_epoch == 2
    assert runner.log is not None and runner.log.durable_offset == runner.log.next_offset
    group = runner.shard.consumer_group("g")
    assert group is not None
    before = (group.group_epoch, group.assignment_epoch, dict(group.target), dict(group.members))
    await runner.close()

    again = await _runner(tmp_path / "shard", committer, topics)
    reloaded = again.shard.consumer_group("g")
    assert reloaded is not None
    after = (
        reloaded.group_epoch,
        reloaded.assignment_epoch,
        dict(reloaded.target),
        dict(reloaded.members),
    )
    assert after == before
    # The member continues at its epoch after the restart (its session was re-armed).
    assert again.timer.is_scheduled("session-timeout-g-m1")
    await again.close()
    await committer.close()


async def test_failed_write_answers_storage_failure_and_reloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committer = GroupCommitter()
    topics = StaticTopicImage()
    topics.add("foo", 4)
    runner = await _runner(tmp_path / "shard", committer, topics)
    replies: list[Any] = []
    _join(runner, "m1", replies)
    await _answered(replies)
    assert runner.log is not None

    def broken(*args: Any, **kwargs: Any) -> int:
        raise OSError("disk gone")

    monkeypatch.setattr(type(runner.log), "append", broken)
    failed: list[Any] = []
    _join(runner, "m2", failed)
    await _answered(failed)
    assert isinstance(failed[0], StorageFailure)
    for _ in range(200):  # the shard reloads from its log: m2 was never written
        if runner.state is ShardState.ACTIVE:
            break
        await asyncio.sleep(0.01)
    assert runner.state is ShardState.ACTIVE
    group = runner.shard.consumer_group("g")
    assert group is not None and set(group.metadata) == {"m1"}
    await runner.close()
    await committer.close()

"""Consumer groups (KIP-848) on the shard runtime over a real log: heartbeats answered
after the fsync, the group rebuilt by a reload, a failed write answered as a storage
failure (the server sends NOT_COORDINATOR, S9) with the shard back at its durable state,
and ConsumerGroupDescribe answered only once the writes before it are durable. Timers run
on a ManualClock; the tests wait for replies and fsyncs, never for time."""

from __future__ import annotations

import inspect
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.consumer.messages import HeartbeatRequest
from groupcoord.coordinator.groups.topics import StaticTopicImage
from groupcoord.coordinator.runtime.clock import ManualClock
from groupcoord.coordinator.runtime.runner import ShardRunner, ShardState, StorageFailure
from groupcoord.coordinator.server.consumer_group_api import handle_consumer_group_describe
from groupcoord.protocol.api import ApiKey, build, decode_request
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import GroupCommitter, LogConfig
from tests.rawclient import encode_request, request_class
from tests.support import gate_fsync
from tests.unit.handler_contexts import GroupTestbed, group_testbed
from tests.unit.waits import Replies, thread_event, turns, turns_until


async def _runner(path: Path, committer: GroupCommitter, topics: StaticTopicImage) -> ShardRunner:
    runner = ShardRunner(
        0,
        path,
        GroupConfig(consumer_assignment_interval_ms=0),
        LogConfig(segment_bytes_max=1 << 20),
        committer,
        topics=topics,
        clock=ManualClock(wall_ms=1_000_000),
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


async def test_heartbeat_answered_after_fsync_and_group_survives_reload(tmp_path: Path) -> None:
    committer = GroupCommitter()
    topics = StaticTopicImage()
    topics.add("foo", 4)
    runner = await _runner(tmp_path / "shard", committer, topics)
    replies = Replies()
    _join(runner, "m1", replies)
    assert replies == []  # the records are not durable yet
    await replies.wait()
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
    replies = Replies()
    _join(runner, "m1", replies)
    await replies.wait()
    assert runner.log is not None

    def broken(*args: Any, **kwargs: Any) -> int:
        raise OSError("disk gone")

    monkeypatch.setattr(type(runner.log), "append", broken)
    failed = Replies()
    _join(runner, "m2", failed)
    await failed.wait()
    assert isinstance(failed[0], StorageFailure)
    # The shard reloads from its log: m2 was never written.
    await turns_until(lambda: runner.state is ShardState.ACTIVE, "the reload")
    group = runner.shard.consumer_group("g")
    assert group is not None and set(group.metadata) == {"m1"}
    await runner.close()
    await committer.close()


async def test_consumer_group_describe_waits_for_the_writes_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """describe_groups is a read after pending writes: while the join's records are in
    their fsync, its answer (which shows the joined member) is held; it is released after
    the join's, and answered at once when nothing is in flight."""
    committer = GroupCommitter()
    topics = StaticTopicImage()
    topics.add("foo", 4)
    runner = await _runner(tmp_path / "shard", committer, topics)
    in_fsync, release = gate_fsync(monkeypatch)
    joined: list[Any] = []
    _join(runner, "m1", joined)
    await thread_event(in_fsync)
    described = Replies()
    joined_first: list[bool] = []

    def on_described(answer: Any) -> None:
        joined_first.append(bool(joined))
        described.append(answer)

    runner.run(lambda now_ms: runner.shard.consumer.describe_groups(["g", "x"], on_described))
    await turns()
    assert described == [] and joined == []  # held with the join until the fsync
    release.set()
    await described.wait()
    assert joined_first == [True]
    group, missing = described[0]
    assert [m.member_id for m in group.members] == ["m1"] and group.group_epoch == 2
    assert missing.group_id == "x" and missing.error_code != 0

    again: list[Any] = []
    runner.run(lambda now_ms: runner.shard.consumer.describe_groups(["g"], again.append))
    assert again and again[0][0].members  # nothing in flight: answered at once
    await runner.close()
    await committer.close()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[GroupTestbed]:
    async for testbed in group_testbed(tmp_path, shards=2):
        yield testbed


def _describe(server: GroupTestbed, group_ids: list[str]) -> Any:
    """ConsumerGroupDescribe v0 through its handler, as the codec decodes it."""
    m = sys.modules[request_class(ApiKey.CONSUMER_GROUP_DESCRIBE, 0).__module__]
    body = build(
        m.ConsumerGroupDescribeRequest,
        group_ids=tuple(group_ids),
        include_authorized_operations=False,
    )
    frame = encode_request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 7, body)[4:]
    request = decode_request(frame, server.context.supported_versions)
    return handle_consumer_group_describe(server.context, request)


async def test_consumer_group_describe_handler_shows_no_write_before_it_is_durable(
    server: GroupTestbed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D.2 / B.11: ConsumerGroupDescribe reads at the last committed offset. A member whose
    join is still in its fsync is not shown by an answer sent meanwhile: the handler's
    answer waits for the join's records to be durable (a failed write would fail it too)."""
    in_fsync, release = gate_fsync(monkeypatch)
    joined: list[Any] = []
    _join(server.coordinator.runner_for("g"), "m1", joined)
    await thread_event(in_fsync)
    try:
        answer = _describe(server, ["g", ""])
        assert inspect.isawaitable(answer), answer  # not answered from unsynced state
        await turns()
        assert joined == []
    finally:
        release.set()
    response = await answer
    assert joined and joined[0].error_code == ErrorCode.NONE
    group, empty = response.groups
    assert group.error_code == ErrorCode.NONE
    assert [m.member_id for m in group.members] == ["m1"]
    assert empty.error_code == ErrorCode.INVALID_GROUP_ID
    # Nothing in flight: answered at once.
    assert not inspect.isawaitable(_describe(server, ["g"]))

"""The shard runtime over a real log: replies only after fsync, state rebuilt by replaying
the log, and the same state after the log is compacted (hypothesis). Timers and retries run
on a ManualClock; the tests wait for replies and fsyncs, never for time."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.groups import offset_messages as om
from groupcoord.coordinator.groups.classic.messages import JoinGroupRequest
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.runtime import runner as runner_module
from groupcoord.coordinator.runtime.clock import ManualClock
from groupcoord.coordinator.runtime.runner import ShardRunner, ShardState, StorageFailure
from groupcoord.storage import GroupCommitter, LogConfig, compact
from tests.support import gate_fsync
from tests.unit.waits import Replies, thread_event, turns, turns_until


def _commit(
    runner: ShardRunner, group: str, topic: str, partition: int, offset: int, replies: list[Any]
) -> None:
    request = om.OffsetCommitRequest(
        group_id=group,
        version=9,
        topics=[om.OffsetCommitTopic(topic, [om.OffsetCommitPartition(partition, offset)])],
    )
    runner.run(lambda now_ms: runner.shard.offsets.commit_offsets(request, replies.append, now_ms))


def _delete_group(runner: ShardRunner, group: str, replies: list[Any]) -> None:
    runner.run(lambda now_ms: runner.shard.offsets.delete_groups([group], replies.append, now_ms))


def _state(runner: ShardRunner) -> tuple[dict[Any, int], set[str]]:
    offsets = {k: v.offset for k, v in runner.shard.offsets.snapshot().items()}
    return offsets, set(runner.shard.groups)


async def _runner(
    path: Path,
    committer: GroupCommitter,
    segment_bytes: int = 1 << 20,
    clock: ManualClock | None = None,
) -> ShardRunner:
    runner = ShardRunner(
        0,
        path,
        GroupConfig(),
        LogConfig(segment_bytes_max=segment_bytes),
        committer,
        clock=clock or ManualClock(wall_ms=1_000_000),
    )
    await runner.load()
    return runner


async def test_replies_wait_for_the_fsync_and_state_survives_reload(tmp_path: Path) -> None:
    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    assert runner.state is ShardState.ACTIVE
    replies = Replies()
    _commit(runner, "g", "t", 0, 42, replies)
    assert replies == []  # the record is not durable yet
    assert runner.log is not None and runner.log.durable_offset == 0
    await replies.wait()
    assert len(replies) == 1 and replies[0].topics[0].partitions[0].error == 0
    assert runner.log.durable_offset == runner.log.next_offset == 1
    await runner.close()
    again = await _runner(tmp_path / "shard", committer)
    assert _state(again) == ({("g", "t", 0): 42}, {"g"})
    await again.close()
    await committer.close()


async def test_commits_during_a_flush_round_are_appended_as_one_batch_before_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a round's fsync runs, commits of several loop iterations gather in memory and
    go to the log as one record batch just before the next round; all are answered."""
    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    in_fsync, release = gate_fsync(monkeypatch)
    replies = Replies()
    _commit(runner, "g", "t", 0, 1, replies)
    await thread_event(in_fsync)
    assert runner.log is not None
    appended = runner.log.next_offset
    for i in range(5):  # five loop iterations while the first round runs
        _commit(runner, "g", "t", 1 + i, 10 + i, replies)
        await turns(1)
    assert runner.log.next_offset == appended  # held back, not appended yet
    release.set()
    await replies.wait(6)
    assert len(replies) == 6
    assert runner.log.next_offset == appended + 5
    batches = runner.log.read(appended, 1 << 20)
    assert int.from_bytes(batches[57:61], "big") == 5  # one batch holding the five records
    await runner.close()
    await committer.close()


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("commit"),
            st.sampled_from(["a", "b", "c"]),
            st.integers(0, 3),
            st.integers(0, 10**6),
        ),
        st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c"])),
        st.tuples(st.just("compact")),
    ),
    max_size=60,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops)
def test_live_state_equals_replayed_and_compacted_log(
    tmp_path_factory: Any, steps: list[Any]
) -> None:
    path = tmp_path_factory.mktemp("shard")

    async def scenario() -> None:
        committer = GroupCommitter()
        runner = await _runner(path, committer, segment_bytes=2048)
        replies = Replies()
        for step in steps:
            if step[0] == "commit":
                _commit(runner, step[1], "t", step[2], step[3], replies)
            elif step[0] == "delete":
                _delete_group(runner, step[1], replies)
            else:
                await committer.flush_all_now()
                compact(runner.log, 1_000_000, tombstone_retention_ms=0)
            await asyncio.sleep(0)
        await committer.flush_all_now()
        await replies.wait(sum(1 for s in steps if s[0] != "compact"))
        live = _state(runner)
        await runner.close()
        replayed = await _runner(path, committer, segment_bytes=2048)
        assert _state(replayed) == live
        assert replayed.log is not None
        await committer.flush_all_now()
        compact(replayed.log, 1_000_000, tombstone_retention_ms=0)
        await replayed.close()
        compacted = await _runner(path, committer, segment_bytes=2048)
        # Groups whose every record was compacted away exist only if they still hold offsets.
        offsets, groups = _state(compacted)
        assert offsets == live[0]
        assert {g for (g, _, _) in offsets} <= groups <= live[1]
        await compacted.close()
        await committer.close()

    asyncio.run(scenario())


def _park_join(runner: ShardRunner, group: str, replies: list[Any]) -> None:
    """A JoinGroup v3 (no member-id round trip) of a new member: parked for the initial
    rebalance delay (3 s by default)."""
    request = JoinGroupRequest(
        group_id=group,
        member_id="",
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        api_version=3,
    )
    runner.run(lambda now_ms: runner.shard.classic.join_group(request, replies.append, now_ms))


async def test_a_failed_write_answers_the_joins_parked_in_other_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka answers the requests parked in a coordinator it unloads with NOT_COORDINATOR
    (D.4). A failed append reloads the shard from its log, dropping the groups in memory:
    a JoinGroup parked there (another group than the failed write's) is answered with the
    failure (NOT_COORDINATOR on the wire) instead of never."""
    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    parked = Replies()
    _park_join(runner, "b", parked)
    await committer.flush_all_now()
    await turns()
    assert parked == []  # waiting for the initial rebalance delay
    assert runner.log is not None

    def broken(*args: Any, **kwargs: Any) -> int:
        raise OSError("disk gone")

    monkeypatch.setattr(type(runner.log), "append", broken)
    failed = Replies()
    _commit(runner, "a", "t", 0, 1, failed)
    await failed.wait()
    await parked.wait()
    assert len(failed) == 1 and isinstance(failed[0], StorageFailure)
    assert len(parked) == 1 and isinstance(parked[0], StorageFailure)
    monkeypatch.undo()
    await turns_until(lambda: runner.state is ShardState.ACTIVE, "the reload")
    await runner.close()
    await committer.close()


async def test_closing_a_shard_answers_its_parked_joins(tmp_path: Path) -> None:
    """A stopping server unloads its shards: a JoinGroup still parked is answered (with
    NOT_COORDINATOR on the wire) instead of holding its connection's later responses."""
    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    parked: list[Any] = []
    _park_join(runner, "b", parked)
    await turns()
    assert parked == []
    await runner.close()
    assert len(parked) == 1 and isinstance(parked[0], StorageFailure)
    await committer.close()


async def test_a_log_failed_outside_a_write_fails_the_next_write_and_reloads(
    tmp_path: Path,
) -> None:
    """A compaction swap that fails marks the log failed (no write of the shard's own was
    involved). The next commit's append raises LogFailed: it is answered with the failure
    (NOT_COORDINATOR) and the shard reloads from its log, without the commit; the append
    error used to escape the runner, leaving the reply unanswered and the shard ACTIVE with
    state that no log holds."""
    committer = GroupCommitter()
    runner = await _runner(tmp_path / "shard", committer)
    assert runner.log is not None
    runner.log.mark_failed(OSError(28, "No space left on device"))
    replies = Replies()
    _commit(runner, "g", "t", 0, 5, replies)
    await replies.wait()
    assert isinstance(replies[0], StorageFailure)
    await turns_until(lambda: runner.state is ShardState.ACTIVE, "the reload")
    assert _state(runner) == ({}, set())
    await runner.close()
    await committer.close()


async def test_a_batch_gathered_during_a_failing_round_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit made while a round's fsync runs waits in a batch for the next round; when
    that fsync fails, the batch is sealed against the failed log: its reply gets the failure
    too, instead of nothing (which held every later response of its connection). The reload
    fails while fsync still fails, and is retried until it works."""
    committer = GroupCommitter(syncfs_min_logs=0)
    clock = ManualClock(wall_ms=1_000_000)
    runner = await _runner(tmp_path / "shard", committer, clock=clock)
    entered, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        entered.set()
        release.wait(5)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    first, second = Replies(), Replies()
    _commit(runner, "g", "t", 0, 1, first)
    await thread_event(entered)
    _commit(runner, "g", "t", 0, 2, second)  # gathered for the next round
    release.set()
    await first.wait()
    await second.wait()
    assert isinstance(first[0], StorageFailure) and isinstance(second[0], StorageFailure)
    retry_ms = runner_module.RELOAD_RETRY_S * 1000
    for _ in range(3):  # reloads fail meanwhile (their fsync fails too), each retried later
        await turns_until(lambda: runner.state is ShardState.FAILED, "a failed reload")
        await turns()
        assert runner.state is ShardState.FAILED and clock.pending() == 1  # the retry
        clock.advance(retry_ms)
    monkeypatch.setattr(os, "fsync", real_fsync)
    await turns()
    clock.advance(retry_ms)
    await turns_until(lambda: runner.state is ShardState.ACTIVE, "the reload retried")
    await runner.close()
    await committer.close()

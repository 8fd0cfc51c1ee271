"""Coordinator shard records in a real PostgreSQL (cluster/replicated_commit.py,
shard_store.py): a commit is answered only once its round is a row in the database; a node
that takes the lease over restores the shard from the rows and has every acknowledged
commit; the old owner's next write is refused by the fencing guard and never reaches the
database; a snapshot replaces the tail, and a takeover from snapshot + tail has the same
state."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from groupcoord.coordinator.cluster.leases import LeaseManager, NodeInfo, open_pool
from groupcoord.coordinator.cluster.replicated_commit import PgThread, ReplicatedCommitter
from groupcoord.coordinator.cluster.schema import group_shard_resource
from groupcoord.coordinator.cluster.shard_store import Fenced, append, create_tables
from groupcoord.coordinator.groups import offset_messages as om
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.runtime.clock import ManualClock
from groupcoord.coordinator.runtime.runner import ShardRunner, ShardState, StorageFailure
from groupcoord.storage import LogConfig
from tests.postgres_server import PostgresServer, postgres_server
from tests.unit.waits import Replies

pytestmark = pytest.mark.integration

LEASE = group_shard_resource(0)


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


def commit(runner: ShardRunner, group: str, partition: int, offset: int, replies: Any) -> None:
    request = om.OffsetCommitRequest(
        group_id=group,
        version=9,
        topics=[om.OffsetCommitTopic("t", [om.OffsetCommitPartition(partition, offset)])],
    )
    runner.run(lambda now_ms: runner.shard.offsets.commit_offsets(request, replies.append, now_ms))


def offsets(runner: ShardRunner) -> dict[Any, int]:
    return {k: v.offset for k, v in runner.shard.offsets.snapshot().items()}


class Node:
    """One node's pieces: its lease manager, committer (with its database thread) and the
    runner of shard 0 in its own directory, loaded when the lease is acquired."""

    def __init__(self, pool: Any, dsn: str, node_id: int, directory: Path) -> None:
        self.pg = PgThread(dsn, pool_size=2)
        self.committer = ReplicatedCommitter(self.pg, node_id)
        self.runner = ShardRunner(
            0,
            directory,
            GroupConfig(),
            LogConfig(segment_bytes_max=1 << 20),
            self.committer,
            clock=ManualClock(wall_ms=1_000_000),
        )
        self.runner.state = ShardState.NOT_OWNED
        self.leases = LeaseManager(
            pool,
            NodeInfo(node_id, "127.0.0.1", node_id),
            lambda: [LEASE],
            1500,
            300,
            on_acquired=self.acquired,
        )

    async def acquired(self, lease: str, epoch: int) -> None:
        runner = self.runner

        async def restore() -> None:
            await self.committer.restore(
                "shard-0", lease, epoch, runner.directory, runner.log_config
            )

        runner.restore = restore
        await runner.load()

    async def close(self) -> None:
        await self.leases.stop(release=False)
        await self.runner.close()
        await self.committer.close()
        self.pg.close()


async def rows(dsn: str) -> tuple[int, int]:
    conn = await asyncpg.connect(dsn)
    try:
        batches = await conn.fetchval("SELECT count(*) FROM shard_batches")
        snapshots = await conn.fetchval("SELECT count(*) FROM shard_snapshots")
        return int(batches), int(snapshots)
    finally:
        await conn.close()


async def until(condition: Any, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_rounds_in_the_database_takeover_fencing_and_snapshot(
    pg: PostgresServer, tmp_path: Path
) -> None:
    pool = await open_pool(pg.dsn)
    async with pool.acquire() as conn:
        await create_tables(conn)
    a = Node(pool, pg.dsn, 1, tmp_path / "a")
    b = Node(pool, pg.dsn, 2, tmp_path / "b")
    c = Node(pool, pg.dsn, 3, tmp_path / "c")
    try:
        await a.leases.start()
        assert a.runner.state is ShardState.ACTIVE
        replies = Replies()
        for i in range(20):
            commit(a.runner, f"g{i % 3}", i % 2, 100 + i, replies)
        await replies.wait(20)
        assert all(r.topics[0].partitions[0].error == 0 for r in replies)
        # Answered: so the rounds are rows (a round of the runner is one transaction).
        assert (await rows(pg.dsn))[0] >= 1
        acknowledged = offsets(a.runner)
        assert len(acknowledged) == 6

        # a goes silent (its lease runs out, nothing handed back); b takes the shard over
        # and restores every acknowledged commit from the database.
        await a.leases.stop(release=False)
        await b.leases.start()
        await until(lambda: b.runner.state is ShardState.ACTIVE, "b loading the shard")
        assert offsets(b.runner) == acknowledged

        # a wakes up and writes: refused by the guard (Fenced), answered as a failure, and
        # nothing of it reaches the database.
        before = await rows(pg.dsn)
        late = Replies()
        commit(a.runner, "g0", 0, 999, late)
        await late.wait(1)
        assert isinstance(late[0], StorageFailure) and "no longer holds" in str(late[0])
        assert await rows(pg.dsn) == before
        with pytest.raises(Fenced):
            async with pool.acquire() as conn:
                await append(conn, "shard-0", LEASE, 1, 1, 10_000, [b"x"])

        # b commits more, writes a snapshot (the tail rows it covers go), commits again;
        # c takes over from snapshot + tail: the same state.
        more = Replies()
        for i in range(10):
            commit(b.runner, "g1", 1, 500 + i, more)
        await more.wait(10)
        assert b.runner.log is not None
        assert await b.committer.snapshot(b.runner.directory, b.runner.log)
        batches_after_snapshot, snapshots = await rows(pg.dsn)
        assert (batches_after_snapshot, snapshots) == (0, 1)
        tail = Replies()
        commit(b.runner, "g2", 0, 777, tail)
        await tail.wait(1)
        expected = offsets(b.runner)
        assert expected[("g2", "t", 0)] == 777 and expected[("g1", "t", 1)] == 509
        await b.leases.stop(release=True)  # a clean stop: c need not wait for expiry
        await b.runner.disown()
        await c.leases.start()
        await until(lambda: c.runner.state is ShardState.ACTIVE, "c loading the shard")
        assert offsets(c.runner) == expected
    finally:
        for node in (a, b, c):
            await node.close()
        await pool.close()

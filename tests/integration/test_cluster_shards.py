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


async def test_a_round_of_several_shards_is_one_transaction_and_a_stale_one_fails_alone(
    pg: PostgresServer, tmp_path: Path
) -> None:
    """One node's round covers all its shards with pending records in ONE database
    transaction (their rows share one transaction id, xmin), each shard behind its own
    lease's guard: when one shard's lease moved (its epoch is stale), the others of the same
    round commit and only that shard's commits fail."""
    pool = await open_pool(pg.dsn)
    async with pool.acquire() as conn:
        await create_tables(conn)
    shards = (11, 12, 13)
    lease_of = {n: group_shard_resource(n) for n in shards}
    resource_of = {n: f"round-shard-{n}" for n in shards}
    pg_thread = PgThread(pg.dsn, pool_size=2)
    committer = ReplicatedCommitter(pg_thread, 7)
    runners: dict[int, ShardRunner] = {}
    for n in shards:
        runners[n] = ShardRunner(
            n,
            tmp_path / f"s{n}",
            GroupConfig(),
            LogConfig(),
            committer,
            clock=ManualClock(wall_ms=1_000_000),
        )
        runners[n].state = ShardState.NOT_OWNED

    async def acquired(lease: str, epoch: int) -> None:
        n = int(lease.split(":")[1])
        runner = runners[n]

        async def restore() -> None:
            await committer.restore(resource_of[n], lease, epoch, runner.directory, LogConfig())

        runner.restore = restore
        await runner.load()

    leases = LeaseManager(
        pool,
        NodeInfo(7, "127.0.0.1", 7),
        lambda: list(lease_of.values()),
        1500,
        300,
        on_acquired=acquired,
    )

    async def round_of_commits(offset: int) -> dict[int, Any]:
        """One commit on every shard, issued in one loop turn (so one round); the replies."""
        replies = {n: Replies() for n in shards}
        for n in shards:
            commit(runners[n], f"g{n}", 0, offset, replies[n])
        for n in shards:
            await replies[n].wait(1)
        return {n: replies[n][0] for n in shards}

    async def rows_of_the_shards() -> dict[tuple[str, int], str]:
        """(resource, seq) -> the id of the transaction that wrote the row."""
        async with pool.acquire() as conn:
            found = await conn.fetch(
                "SELECT resource, seq, xmin::text AS xid FROM shard_batches"
                " WHERE resource = ANY($1::text[])",
                list(resource_of.values()),
            )
        return {(row["resource"], row["seq"]): row["xid"] for row in found}

    try:
        await leases.start()
        # Other tests' nodes may still count as live for a lease duration: then this node
        # takes its fair share first and the rest once they are gone.
        await until(
            lambda: all(r.state is ShardState.ACTIVE for r in runners.values()),
            "node 7 loading all three shards",
        )
        replies = await round_of_commits(100)
        assert all(r.topics[0].partitions[0].error == 0 for r in replies.values())
        first = await rows_of_the_shards()
        assert {resource for resource, _ in first} == set(resource_of.values())
        assert len(set(first.values())) == 1  # one transaction for the round

        # Shard 12's lease moves to another node (epoch + 1): node 7's next round of the
        # three shards is refused for shard 12 alone.
        async with pool.acquire() as conn:
            await conn.execute(
                "UPDATE leases SET owner_node = 99, epoch = epoch + 1,"
                " expires_at = now() + interval '1 hour' WHERE resource = $1",
                lease_of[12],
            )
        replies = await round_of_commits(200)
        assert replies[11].topics[0].partitions[0].error == 0
        assert replies[13].topics[0].partitions[0].error == 0
        assert isinstance(replies[12], StorageFailure) and "no longer holds" in str(replies[12])
        second = {k: v for k, v in (await rows_of_the_shards()).items() if k not in first}
        assert sorted(resource for resource, _ in second) == [resource_of[11], resource_of[13]]
        assert len(set(second.values())) == 1
        assert offsets(runners[11])[("g11", "t", 0)] == 200
    finally:
        await leases.stop(release=False)
        for runner in runners.values():
            await runner.close()
        await committer.close()
        pg_thread.close()
        await pool.close()

"""Leases with fencing epochs on a real PostgreSQL (coordinator/cluster/leases.py): nodes
split the shards, a node that stops renewing loses its leases to a live one within the
bound, a write at a stale epoch is refused by the fencing guard, a clean stop hands its
leases over at once, a stopped owner's backend stuck in a COPY is terminated."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from groupcoord.coordinator.cluster.leases import (
    LeaseManager,
    NodeInfo,
    lock_hold_ms,
    open_pool,
    session_settings,
)
from groupcoord.coordinator.cluster.schema import (
    FENCED_WRITE_GUARD,
    group_shard_resource,
    txn_shard_resource,
)
from tests.postgres_server import PostgresServer, postgres_server

pytestmark = pytest.mark.integration

LEASE_MS = 1500
RENEW_MS = 300
RESOURCES = [group_shard_resource(n) for n in range(6)] + [txn_shard_resource(n) for n in range(4)]
WAIT_S = 60  # generous: the machine is loaded


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture
def dsn(pg: PostgresServer) -> str:
    async def clean() -> None:
        conn = await asyncpg.connect(pg.dsn)
        try:
            await conn.execute("DROP TABLE IF EXISTS leases, cluster_nodes")
        finally:
            await conn.close()

    asyncio.run(clean())
    return pg.dsn


class Events:
    def __init__(self) -> None:
        self.acquired: list[tuple[str, int]] = []
        self.lost: list[str] = []

    async def on_acquired(self, resource: str, epoch: int) -> None:
        self.acquired.append((resource, epoch))

    async def on_lost(self, resource: str) -> None:
        self.lost.append(resource)


def manager(pool: object, node_id: int, events: Events) -> LeaseManager:
    return LeaseManager(
        pool,
        NodeInfo(node_id, "127.0.0.1", 9000 + node_id),
        lambda: RESOURCES,
        LEASE_MS,
        RENEW_MS,
        on_acquired=events.on_acquired,
        on_lost=events.on_lost,
    )


async def until(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def kinds(held: dict[str, int]) -> tuple[int, int]:
    return (
        sum(r.startswith("group-shard:") for r in held),
        sum(r.startswith("txn-shard:") for r in held),
    )


async def test_two_nodes_split_the_shards_and_a_silent_one_loses_them(dsn: str) -> None:
    pool = await open_pool(dsn)
    a_events, b_events = Events(), Events()
    a, b = manager(pool, 1, a_events), manager(pool, 2, b_events)
    try:
        await a.start()
        assert len(a.held) == len(RESOURCES)  # alone: it takes everything
        await b.start()
        # a gives back what is beyond its share once it sees b; b takes it.
        await until(lambda: kinds(a.held) == (3, 2) and kinds(b.held) == (3, 2), "a 3+2 split")
        assert not set(a.held) & set(b.held)
        # a learns b's leases at its next tick.
        await until(
            lambda: sorted(a.owner_of(r) or 0 for r in RESOURCES) == [1] * 5 + [2] * 5,
            "a seeing b's leases",
        )
        assert b.owner_of(next(iter(a.held))) == 1
        assert {n.node_id for n in b.live} == {1, 2}

        # a stops renewing (as a killed or paused node): b takes every lease once a's run
        # out, each at a higher epoch; a's local deadline passed before that.
        old = dict(a.held)
        await a.stop(release=False)
        stopped = time.monotonic()
        await until(lambda: len(b.held) == len(RESOURCES), "b taking a's leases")
        took_s = time.monotonic() - stopped
        assert took_s >= LEASE_MS / 1000 * 0.5  # not before a's leases could run out
        for resource, epoch in old.items():
            assert b.held[resource] == epoch + 1
            assert a.epoch_of(resource) is None  # a no longer trusts them
        assert {n.node_id for n in b.live} == {2}

        # A write at a's old epoch is refused by the guard; b's goes through.
        async with pool.acquire() as conn:
            resource, epoch = next(iter(old.items()))
            async with conn.transaction():
                assert await conn.fetchval(FENCED_WRITE_GUARD, resource, 1, epoch) is None
            async with conn.transaction():
                assert await conn.fetchval(FENCED_WRITE_GUARD, resource, 2, epoch + 1) == 1
    finally:
        await b.stop()
        await a.stop()
        await pool.close()


async def test_a_clean_stop_hands_the_leases_over_at_once(dsn: str) -> None:
    pool = await open_pool(dsn)
    b_events = Events()
    # Long leases: b can only get a's within the wait because a gives them back.
    a = LeaseManager(pool, NodeInfo(1, "h", 1), lambda: RESOURCES, 600_000, 300)
    b = LeaseManager(
        pool,
        NodeInfo(2, "h", 2),
        lambda: RESOURCES,
        600_000,
        300,
        on_acquired=b_events.on_acquired,
        on_lost=b_events.on_lost,
    )
    try:
        await a.start()
        await b.start()  # a holds everything; b's share is not free
        assert not b.held
        await a.stop()
        await until(lambda: len(b.held) == len(RESOURCES), "b taking the handed-back leases")
        assert sorted(r for r, epoch in b_events.acquired if epoch == 2) == sorted(RESOURCES)
        assert {n.node_id for n in b.live} == {2}
    finally:
        await b.stop()
        await pool.close()


async def test_a_lease_renewed_after_the_local_deadline_is_handed_back(dsn: str) -> None:
    """A paused node (its loop did not run past the local deadline) stops serving what it
    held and never renews it back: the lease is released and re-taken at a new epoch."""
    pool = await open_pool(dsn)
    events = Events()
    a = manager(pool, 1, events)
    try:
        await a.start()
        first = dict(a.held)
        a.local_deadline = time.monotonic() - 1  # as if paused past it
        assert a.epoch_of(RESOURCES[0]) is None
        await a.tick()
        assert sorted(events.lost) == sorted(RESOURCES)
        await a.tick()
        assert {r: e - 1 for r, e in a.held.items()} == first
    finally:
        await a.stop()
        await pool.close()


async def _hold_in_copy(
    dsn: str, node_id: int, resource: str, epoch: int
) -> tuple[asyncpg.Connection, asyncio.Task[None]]:
    """A connection named as node `node_id`'s that holds `resource`'s lease row by the
    fencing guard and then sits inside a COPY waiting for data that never comes: what the
    database sees of a node stopped (SIGSTOP) or cut off in the middle of a round."""
    conn = await asyncpg.connect(dsn, server_settings=session_settings(500, node_id))
    started = asyncio.get_running_loop().create_future()

    async def never_ending() -> AsyncIterator[bytes]:
        yield b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # the binary header, then nothing more
        started.set_result(None)
        await asyncio.Event().wait()

    async def hold() -> None:
        async with conn.transaction():
            assert await conn.fetchval(FENCED_WRITE_GUARD, resource, 1, epoch) == 1
            await conn.execute("CREATE TEMP TABLE sink (b bytea)")
            await conn.copy_to_table("sink", source=never_ending(), format="binary")

    task = asyncio.ensure_future(hold())
    await asyncio.wait({started, task}, return_when=asyncio.FIRST_COMPLETED)
    assert not task.done(), task
    return conn, task


async def backend_alive(dsn: str, pid: int) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        return bool(await conn.fetchval("SELECT 1 FROM pg_stat_activity WHERE pid = $1", pid))
    finally:
        await conn.close()


async def test_a_backend_of_an_expired_owner_stuck_in_a_copy_is_terminated(dsn: str) -> None:
    """Node 1 stops renewing while one of its connections sits in a COPY holding a lease row
    FOR SHARE (no PostgreSQL timeout ends it): node 2 terminates that backend and takes the
    lease within the lease duration plus a few ticks. A backend blocking another lease row
    that is NOT its owner's (named node 3) is left alone: that lease waits for it."""
    a_pool = await open_pool(dsn, node_id=1)
    b_pool = await open_pool(dsn, lock_hold_ms=lock_hold_ms(LEASE_MS), node_id=2)
    a, b = manager(a_pool, 1, Events()), manager(b_pool, 2, Events())
    holders: list[tuple[asyncpg.Connection, asyncio.Task[None]]] = []
    try:
        await a.start()
        owners, others = RESOURCES[0], RESOURCES[1]
        holders.append(await _hold_in_copy(dsn, 1, owners, a.held[owners]))
        holders.append(await _hold_in_copy(dsn, 3, others, a.held[others]))
        pids = [conn.get_server_pid() for conn, _ in holders]
        await a.stop(release=False)  # as a stopped node: its leases run out
        stopped = time.monotonic()
        await b.start()
        await until(lambda: len(b.held) == len(RESOURCES) - 1, "b taking a's leases")
        took_s = time.monotonic() - stopped
        assert owners in b.held and others not in b.held
        assert took_s < LEASE_MS / 1000 + 5, took_s
        assert b.fenced_backends == 1
        assert not await backend_alive(dsn, pids[0])
        # Node 3's backend still holds `others` (not the lease owner's: never terminated).
        await asyncio.sleep(LEASE_MS / 1000)
        assert others not in b.held and await backend_alive(dsn, pids[1])
        holders[1][1].cancel()
        holders[1][0].terminate()
        await until(lambda: others in b.held, "b taking the lease once its holder left")
        assert b.fenced_backends == 1
    finally:
        for conn, task in holders:
            task.cancel()  # it waits for its source, never for the server
            await asyncio.gather(task, return_exceptions=True)
            conn.terminate()
        await b.stop()
        await a.stop()
        await a_pool.close()
        await b_pool.close()

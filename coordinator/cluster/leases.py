"""Node membership and resource leases with fencing epochs, in PostgreSQL (schema.py).

Theory of operation. A node registers its row in `cluster_nodes` and, every renew interval
(a *tick*), pushes its `alive_until` to now() + the lease duration. A node is live while
`alive_until > now()`. Every time is the database's now(): the nodes' clocks never matter.

Each resource (a coordinator shard, a topic partition: schema.py's names) has at most one
lease row. A tick:
1. renews every lease the node holds, matching owner AND epoch, so a lease that was
   taken over (epoch moved on) is never renewed back; a held lease the renewal does not
   return is lost (`on_lost`);
2. reads the live nodes and every lease;
3. takes absent or expired leases, one statement each (INSERT ... ON CONFLICT DO UPDATE
   ... WHERE expired: epoch + 1 on every change of hands), up to its fair share of each
   kind (ceil(resources of the kind / live nodes)), so N nodes split the shards;
   preferring the resources whose round-robin slot among the live nodes is its own, so
   that nodes racing for a dead node's leases mostly pick different ones;
4. gives back (expires_at = now(), same epoch) what it holds beyond its fair share, so a
   node that joins gets its share as the others shed theirs.

A node trusts a lease locally only until its *local deadline*: the monotonic time its
last successful renewal *started* plus the lease duration minus a margin. The database
expires the lease no earlier than the renewal statement ran, so the node stops serving
a resource before anyone else can take it, even if it cannot reach the database or was
paused (SIGSTOP). Whatever it might still try to write is refused by FENCED_WRITE_GUARD:
the row no longer names it at its epoch.

`on_acquired(resource, epoch)` and `on_lost(resource)` are awaited in the tick, in order;
a resource is listed as held (`epoch_of`) only once on_acquired returned, so callers serve
it only after it was loaded. On a clean stop the node hands every lease back and marks
itself dead, so the others take over at their next tick rather than after a timeout.

Stale lock holders (issue 22). A write holds its lease row FOR SHARE until it commits, and
a node paused (SIGSTOP) or cut off inside one keeps that lock while its connection lives,
which on loopback or a silent network is indefinitely (TCP keepalive answers for a paused
process). PostgreSQL ends such a transaction only when it is idle between statements
(idle_in_transaction_session_timeout, `session_settings`): a backend inside a COPY or a
half-sent statement waiting for the client's data is "active", and neither
statement_timeout nor a cancel ends a backend blocked reading from its client (tried on
PostgreSQL 15; 15 has no transaction_timeout). Only pg_terminate_backend does. So a node
taking an expired lease whose acquire waits longer than `fence_after_ms` terminates the
backends that block it AND belong to the lease's owner (every connection names its node
in application_name, `APPLICATION_NAME_PREFIX`), while the lease is still expired
(`_FENCE`): Kafka's fencing of a zombie, done by the database. Nothing of the terminated
transaction is committed; its node, if it wakes, retries, and its guard is refused. A
blocker of another node (a racing acquire) or of a lease taken meanwhile is left alone.
The nodes' database role must be allowed to terminate each other's backends (one role for
every node, or membership in pg_signal_backend); if not, the fence fails (logged) and the
takeover waits for the stopped node's connection to end, as before.

The bound on takeover after a node dies: lease duration + renew interval (the time the
dead node's leases still run, plus one tick of a live node to notice), plus the load.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from ..observability.logging import get_logger
from .schema import SCHEMA_DDL

log = get_logger("groupcoord.cluster")

# A lease is trusted locally until this long before its duration runs out, counted from
# the start of the renewal that extended it (module docstring).
LOCAL_MARGIN_FRACTION = 0.2

_REGISTER = """
INSERT INTO cluster_nodes (node_id, host, port, rack, alive_until)
VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond')
ON CONFLICT (node_id) DO UPDATE
   SET host = EXCLUDED.host, port = EXCLUDED.port, rack = EXCLUDED.rack,
       alive_until = EXCLUDED.alive_until
"""
# The rows are locked first, in resource order (sorted, then locked), the order in which
# a round of writes locks them FOR SHARE (shard_store.py's guard): a renewal and a round
# of the same leases never wait for each other crosswise (a deadlock).
_RENEW = """
UPDATE leases AS l SET expires_at = now() + $2 * interval '1 millisecond'
  FROM (SELECT k.resource FROM leases k
          JOIN unnest($3::text[], $4::bigint[]) AS h(resource, epoch)
            ON k.resource = h.resource AND k.epoch = h.epoch AND k.owner_node = $1
         ORDER BY k.resource
           FOR NO KEY UPDATE OF k) AS held
 WHERE l.resource = held.resource
RETURNING l.resource
"""
_LIVE_NODES = """
SELECT node_id, host, port, rack FROM cluster_nodes WHERE alive_until > now() ORDER BY node_id
"""
_LEASES = "SELECT resource, owner_node, epoch, expires_at > now() AS valid FROM leases"
# Take `resource` when it has no lease or its lease ran out: one statement, so two nodes
# racing for it cannot both win; epoch + 1 on every change of hands.
_ACQUIRE = """
INSERT INTO leases (resource, owner_node, epoch, expires_at)
VALUES ($1, $2, 1, now() + $3 * interval '1 millisecond')
ON CONFLICT (resource) DO UPDATE
   SET owner_node = EXCLUDED.owner_node, epoch = leases.epoch + 1,
       expires_at = EXCLUDED.expires_at
 WHERE leases.expires_at <= now()
RETURNING epoch
"""
_RELEASE = """
UPDATE leases SET expires_at = now()
 WHERE resource = $1 AND owner_node = $2 AND epoch = $3
"""
_LEAVE = "UPDATE cluster_nodes SET alive_until = now() WHERE node_id = $1"
# Every cluster connection's application_name: this and its node id (`session_settings`).
APPLICATION_NAME_PREFIX = "groupcoord-node-"
# Terminate the backends that block backend $1 (an acquire of $2) and are the lease
# owner's ($3 = APPLICATION_NAME_PREFIX), while that lease is still expired (module
# docstring). pg_terminate_backend runs only for the rows the conditions keep.
_FENCE = """
SELECT a.pid, l.owner_node, a.state, a.wait_event, left(a.query, 60) AS query,
       pg_terminate_backend(a.pid) AS terminated
  FROM leases l, pg_stat_activity a
 WHERE l.resource = $2 AND l.expires_at <= now()
   AND a.application_name = $3 || l.owner_node
   AND a.pid = ANY(pg_blocking_pids($1))
"""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A live node as clients are told of it (Metadata, DescribeCluster)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


def resource_kind(resource: str) -> str:
    """`group-shard`, `txn-shard` or `partition`: fair shares are counted per kind."""
    return resource.split(":", 1)[0]


def fair_share(resource_count: int, live_nodes: int) -> int:
    return math.ceil(resource_count / max(live_nodes, 1))


def preference_order(resources: Sequence[str], live: Sequence[int], node_id: int) -> list[str]:
    """`resources` (of one kind, in their order) with those whose round-robin slot among
    the `live` node ids is this node's first: racing nodes mostly pick different ones."""
    if node_id not in live:
        return list(resources)
    mine = live.index(node_id)
    count = len(live)
    slots = sorted(enumerate(resources), key=lambda item: item[0] % count != mine)
    return [resource for _, resource in slots]


OnAcquired = Callable[[str, int], Awaitable[None]]
OnLost = Callable[[str], Awaitable[None]]


async def _nothing_acquired(resource: str, epoch: int) -> None:
    return None


async def _nothing_lost(resource: str) -> None:
    return None


class LeaseManager:
    """This node's membership and leases (module docstring). `resources()` lists every
    resource the cluster has now (its shards; partitions as topics come and go)."""

    def __init__(
        self,
        pool: Any,  # asyncpg.Pool
        me: NodeInfo,
        resources: Callable[[], Sequence[str]],
        lease_duration_ms: int,
        renew_interval_ms: int,
        on_acquired: OnAcquired = _nothing_acquired,
        on_lost: OnLost = _nothing_lost,
        on_tick: Callable[[], None] | None = None,
        fence_after_ms: int | None = None,
    ) -> None:
        """`on_tick`: told after every tick (the live nodes may have changed).
        `fence_after_ms`: how long an acquire waits for a lock before the lease owner's
        backends blocking it are terminated (module docstring; `default_fence_after_ms`)."""
        if renew_interval_ms * 2 > lease_duration_ms:
            raise ValueError("the renew interval must be at most half the lease duration")
        self.pool = pool
        self.me = me
        self.resources = resources
        self.lease_duration_ms = lease_duration_ms
        self.renew_interval_ms = renew_interval_ms
        self.on_acquired = on_acquired
        self.on_lost = on_lost
        self.on_tick = on_tick
        self.fence_after_s = (
            fence_after_ms
            if fence_after_ms is not None
            else default_fence_after_ms(lease_duration_ms)
        ) / 1000
        self.fenced_backends = 0  # stale backends terminated (metrics, tests)
        self.held: dict[str, int] = {}  # resource -> epoch, loaded and served here
        self.owners: dict[str, int] = {}  # resource -> owner node of a valid lease (last tick)
        self.live: tuple[NodeInfo, ...] = ()
        self.local_deadline = 0.0  # time.monotonic(): trust held leases until then
        self.ticks = 0
        self.failed_ticks = 0
        self._task: asyncio.Task[None] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False

    # -- what callers ask ---------------------------------------------------------------------

    def epoch_of(self, resource: str) -> int | None:
        """The epoch this node holds `resource` at, None when it does not hold it (or its
        local deadline passed: it might be someone else's by now)."""
        if time.monotonic() >= self.local_deadline:
            return None
        return self.held.get(resource)

    def owner_of(self, resource: str) -> int | None:
        """The node id owning `resource` as of the last tick, None when nobody does."""
        if resource in self.held and time.monotonic() < self.local_deadline:
            return self.me.node_id
        owner = self.owners.get(resource)
        return None if owner == self.me.node_id else owner

    # -- running ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the tables, register, run the first tick, then tick in the background."""
        async with self.pool.acquire() as conn:
            await conn.execute(SCHEMA_DDL)
        await self.tick()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        interval_s = self.renew_interval_ms / 1000
        started = time.monotonic()
        while not self._stopping:
            # Ticks start every interval, not an interval after the last one ended: a tick
            # that took long (the first, acquiring every lease on a loaded machine) must not
            # push the next renewal past the local deadline.
            await asyncio.sleep(max(0.0, started + interval_s - time.monotonic()))
            if self._stopping:
                return
            started = time.monotonic()
            try:
                await asyncio.wait_for(self.tick(), timeout=max(interval_s, 1.0) * 2)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the database is away: keep trying; leases lapse locally
                self.failed_ticks += 1
                log.warning("lease tick failed", node_id=self.me.node_id, error=repr(e))
                await self._drop_expired_locally()

    async def _drop_expired_locally(self) -> None:
        """Past the local deadline every held lease is given up here (stop serving it):
        another node may own it by now."""
        if self.held and time.monotonic() >= self.local_deadline:
            lost = list(self.held)
            self.held.clear()
            for resource in lost:
                await self.on_lost(resource)

    async def tick(self) -> None:
        """One round of the protocol (module docstring)."""
        node_id = self.me.node_id
        duration_ms = self.lease_duration_ms
        started = time.monotonic()
        async with self.pool.acquire() as conn:
            await conn.execute(
                _REGISTER, node_id, self.me.host, self.me.port, self.me.rack, duration_ms
            )
            if self.held:
                names = list(self.held)
                rows = await conn.fetch(
                    _RENEW, node_id, duration_ms, names, [self.held[n] for n in names]
                )
                renewed = {row["resource"] for row in rows}
            else:
                renewed = set()
            late = time.monotonic() >= self.local_deadline
            for resource in [r for r in self.held if late or r not in renewed]:
                epoch = self.held.pop(resource, None)
                if epoch is None:  # dropped meanwhile by the deadline watchdog
                    continue
                log.warning("lease lost", node_id=node_id, resource=resource, late=late)
                await self.on_lost(resource)
                if late:
                    # Renewed after this node stopped trusting it (paused, or the database
                    # was slow): what it served meanwhile may be behind; hand it back so
                    # that it is loaded afresh, here or elsewhere, at a new epoch.
                    await conn.execute(_RELEASE, resource, node_id, epoch)
            self.local_deadline = started + duration_ms / 1000 * (1 - LOCAL_MARGIN_FRACTION)
            live_rows = await conn.fetch(_LIVE_NODES)
            lease_rows = await conn.fetch(_LEASES)
            self.live = tuple(
                NodeInfo(r["node_id"], r["host"], r["port"], r["rack"]) for r in live_rows
            )
            live_ids = [n.node_id for n in self.live]
            valid = {r["resource"]: r["owner_node"] for r in lease_rows if r["valid"]}
            await self._balance(conn, valid, live_ids)
            self.owners = valid
        self.ticks += 1
        self._watch_deadline()
        if self.on_tick is not None:
            self.on_tick()

    def _watch_deadline(self) -> None:
        """Stop serving held leases at the local deadline even if no tick comes (the
        database is away, or the process was paused and resumes past it)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.held and not self._stopping:
            delay_s = max(self.local_deadline - time.monotonic(), 0.0)
            self._watchdog = asyncio.get_running_loop().call_later(
                delay_s, lambda: self._spawn(self._drop_expired_locally())
            )

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _balance(self, conn: Any, valid: dict[str, int], live_ids: list[int]) -> None:
        """Take free leases up to the fair share of each kind, give back what is beyond."""
        node_id = self.me.node_id
        by_kind: dict[str, list[str]] = {}
        for resource in self.resources():
            by_kind.setdefault(resource_kind(resource), []).append(resource)
        for resources in by_kind.values():
            share = fair_share(len(resources), len(live_ids))
            mine = [r for r in resources if r in self.held]
            for resource in mine[share:]:  # beyond the share: hand back (a node joined)
                await self._release(conn, resource)
                valid.pop(resource, None)
            room = share - len(mine)
            if room <= 0:
                continue
            for resource in preference_order(resources, live_ids, node_id):
                if room <= 0:
                    break
                if resource in self.held or resource in valid:
                    continue
                epoch = await self._acquire(conn, resource)
                if epoch is None:  # another node took it first, or its row stays locked
                    continue
                log.info("lease acquired", node_id=node_id, resource=resource, epoch=epoch)
                valid[resource] = node_id
                room -= 1
                try:
                    await self.on_acquired(resource, epoch)
                except Exception as e:  # could not load it: hand it back for another node
                    log.error("lease load failed", resource=resource, error=repr(e))
                    await conn.execute(_RELEASE, resource, node_id, epoch)
                    valid.pop(resource, None)
                    continue
                self.held[resource] = epoch

    async def _acquire(self, conn: Any, resource: str) -> int | None:
        """_ACQUIRE; when it still waits for a lock after `fence_after_s`, terminate the
        lease owner's backends that block it (`_fence`). The epoch taken, or None (taken
        by another node first, or its row still locked after the lock timeout: tried at
        the next tick, and the tick goes on with the other resources)."""
        acquiring = asyncio.ensure_future(
            conn.fetchval(_ACQUIRE, resource, self.me.node_id, self.lease_duration_ms)
        )
        try:
            done, _ = await asyncio.wait({acquiring}, timeout=self.fence_after_s)
            if not done:
                await self._fence(conn.get_server_pid(), resource)
            epoch: int | None = await acquiring
            return epoch
        except asyncpg.LockNotAvailableError:
            log.warning("lease row locked past the lock timeout", resource=resource)
            return None
        finally:
            acquiring.cancel()  # a tick cancelled meanwhile; nothing once it is done

    async def _fence(self, waiter_pid: int, resource: str) -> None:
        """Terminate the backends of `resource`'s owner blocking backend `waiter_pid`,
        while the lease is expired (`_FENCE`). Failures are logged: the acquire then waits
        out its lock timeout, as without fencing."""
        try:
            async with self.pool.acquire(timeout=self.fence_after_s * 4) as conn:
                rows = await conn.fetch(_FENCE, waiter_pid, resource, APPLICATION_NAME_PREFIX)
        except (OSError, asyncpg.PostgresError) as e:  # TimeoutError is an OSError
            log.warning("could not fence a lock holder", resource=resource, error=repr(e))
            return
        for row in rows:
            self.fenced_backends += 1
            log.warning(
                "stale backend terminated",
                node_id=self.me.node_id,
                resource=resource,
                owner_node=row["owner_node"],
                pid=row["pid"],
                state=row["state"],
                wait_event=row["wait_event"],
                query=row["query"],
                terminated=row["terminated"],
            )

    async def _release(self, conn: Any, resource: str) -> None:
        epoch = self.held.pop(resource, None)
        if epoch is None:
            return
        await self.on_lost(resource)  # stop serving before the lease is free to take
        await conn.execute(_RELEASE, resource, self.me.node_id, epoch)
        log.info("lease released", node_id=self.me.node_id, resource=resource, epoch=epoch)

    async def give_back(self, resource: str) -> None:
        """Hand `resource` back now (on_lost first): it is gone from the cluster (a
        deleted topic's partition), so it is not renewed until it lapses."""
        if resource in self.held:
            async with self.pool.acquire() as conn:
                await self._release(conn, resource)

    async def stop(self, release: bool = True) -> None:
        """Stop ticking; `release`: hand every lease back and mark this node dead (a clean
        shutdown), so others take over at their next tick."""
        self._stopping = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if not release:
            return
        try:
            async with self.pool.acquire() as conn:
                for resource in list(self.held):
                    await self._release(conn, resource)
                await conn.execute(_LEAVE, self.me.node_id)
        except (OSError, asyncpg.PostgresError) as e:
            log.warning("could not give the leases back", error=repr(e))


# How long a session may hold a lock: in a transaction doing nothing, or waiting for a lock.
LOCK_HOLD_MS_DEFAULT = 3_000


def session_settings(lock_hold_ms: int, node_id: int | None = None) -> dict[str, str]:
    """PostgreSQL settings of every cluster connection. A node paused (SIGSTOP) or cut off
    in the middle of a transaction keeps its row locks (the lease row a guarded write holds
    FOR SHARE) while its connection lives: the server ends such a transaction after
    `lock_hold_ms` idle, so a live node's acquire is not blocked behind it for longer, and
    a statement waiting that long for a lock fails (a tick or a round tried again)
    instead of hanging. A transaction paused inside a statement (a COPY) is not idle: its
    blockers are fenced by `node_id`, named in application_name (module docstring)."""
    settings = {
        "idle_in_transaction_session_timeout": str(lock_hold_ms),
        "lock_timeout": str(lock_hold_ms),
    }
    if node_id is not None:
        settings["application_name"] = f"{APPLICATION_NAME_PREFIX}{node_id}"
    return settings


def lock_hold_ms(lease_duration_ms: int) -> int:
    """A third of the lease: locks of a paused node are gone well before its leases run out."""
    return max(lease_duration_ms // 3, 200)


def default_fence_after_ms(lease_duration_ms: int) -> int:
    """A quarter of the lock hold: an expired lease's last write (milliseconds) has
    committed by then unless its node is paused or cut off; the acquire still gets the
    lock within its lock timeout once the holder is terminated."""
    return max(lock_hold_ms(lease_duration_ms) // 4, 50)


async def open_pool(
    dsn: str,
    max_size: int = 10,
    lock_hold_ms: int = LOCK_HOLD_MS_DEFAULT,
    node_id: int | None = None,
) -> Any:
    """An asyncpg pool on the cluster database (`serve --cluster DSN`); `node_id` names
    its connections (`session_settings`)."""
    return await asyncpg.create_pool(
        dsn,
        min_size=1,
        max_size=max_size,
        server_settings=session_settings(lock_hold_ms, node_id),
    )

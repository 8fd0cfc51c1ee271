"""Group commit whose durability is PostgreSQL: a round of all shards is one transaction.

Theory of operation. In cluster mode a coordinator shard keeps its local log (the runner
appends to it, reads and replays it as everywhere else), but that log is only a cache: the
durable copy is the shard's rows in PostgreSQL (shard_store.py). `ReplicatedCommitter` is
the server's GroupCommitter with one change: in a round, the logs of leased shards
(`replicas`, by directory) are not fsynced but *shipped*: on the flusher thread, for each
such log, the flush is begun (which snapshots the log end it covers), the batches between
what was shipped and that end are read back from the log, and the round's batches of ALL
its shards are written to PostgreSQL in one transaction (shard_store.append_round: each
shard behind its own fencing guard, a refused shard failing alone); only then is the flush
ended, advancing the log's durable offset, which is what wakes the round's waiters. So a
reply leaves only once its records are in the database, and the durable offset never
passes what the database holds. A shipping that fails (the database away, or Fenced: the
lease moved) aborts the flush: the log fails as after a failed fsync, its waiters are
failed, and the runner reloads, which in cluster mode means restoring from the database
(`restore`) if this node still holds the lease.

The database is reached from the flusher thread through a loop of its own (`PgThread`)
with its own pool; the server's loop never blocks on it.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from groupcoord.protocol.batches import walk_batches
from groupcoord.storage import GroupCommitter, LogConfig, PartitionLog

from . import shard_store
from .leases import LOCK_HOLD_MS_DEFAULT, open_pool
from .shard_store import ShardImage, ShardWrite

_T = TypeVar("_T")

READ_CHUNK_BYTES = 8 << 20


class PgThread:
    """A thread running an event loop of its own and an asyncpg pool on it."""

    def __init__(
        self,
        dsn: str,
        pool_size: int = 8,
        lock_hold_ms: int = LOCK_HOLD_MS_DEFAULT,
        node_id: int | None = None,
    ) -> None:
        """`node_id` names the pool's connections (leases.session_settings)."""
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="cluster-pg", daemon=True)
        self.thread.start()
        self.dsn = dsn
        self.pool: Any = self.run(open_pool(dsn, pool_size, lock_hold_ms, node_id))

    def run(self, work: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
        """Run `work` on the thread's loop and wait for it (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout_s)

    async def call(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Run `work` on the thread's loop, awaited from another loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))

    def close(self) -> None:
        try:
            self.run(self.pool.close(), 10)
        except Exception:  # the database is away: the connections die with the process
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass(slots=True)
class Replica:
    """A leased shard's log as shipped: `shipped` = (local offset shipped up to, exclusive;
    the seq of the last batch shipped), replaced as one tuple so a snapshot reads a
    consistent pair from another thread."""

    resource: str  # names its rows
    lease: str  # the lease its writes are fenced by
    epoch: int
    next_seq: int
    shipped: tuple[int, int]
    tail_batches: int  # batches written since the last snapshot


def log_batches(log_: PartitionLog, start: int, end: int) -> list[bytes]:
    """The whole batches of `log_` from offset `start` up to (not including) `end`."""
    out: list[bytes] = []
    offset = start
    while offset < end:
        chunk = log_.read(offset, READ_CHUNK_BYTES)
        if not chunk:
            break
        for pos, header in walk_batches(chunk):
            if header.base_offset >= end:
                return out
            out.append(chunk[pos : pos + header.size_bytes])
            offset = header.last_offset + 1
    return out


class ReplicatedCommitter(GroupCommitter):
    """GroupCommitter shipping leased shards' rounds to PostgreSQL (module docstring)."""

    def __init__(
        self, pg: PgThread, node_id: int, ship_timeout_s: float = 30.0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.pg = pg
        self.node_id = node_id
        self.ship_timeout_s = ship_timeout_s
        # Leased shards' logs by directory; None: replicated, but its lease is gone (a round
        # taking it fails its waiters: nothing of it can be made durable any more).
        self.replicas: dict[Path, Replica | None] = {}
        self.shipped_batches = 0

    def _flush_logs(self, logs: list[PartitionLog]) -> list[int | BaseException]:
        results: list[int | BaseException] = [0] * len(logs)
        plain = {i for i, log_ in enumerate(logs) if log_.directory not in self.replicas}
        if plain:
            order = sorted(plain)
            flushed = super()._flush_logs([logs[i] for i in order])
            for i, result in zip(order, flushed, strict=True):
                results[i] = result
        shipping: list[tuple[int, PartitionLog, Replica, Any, list[bytes]]] = []
        for i, log_ in enumerate(logs):
            if i in plain:
                continue
            replica = self.replicas[log_.directory]
            if replica is None:
                results[i] = shard_store.Fenced(f"{log_.directory.name}: lease given up")
                continue
            try:
                plan = log_.begin_flush()
            except Exception as e:
                results[i] = e
                continue
            if plan is None:
                results[i] = log_.durable_offset
                continue
            try:
                batches = log_batches(log_, replica.shipped[0], plan.target)
            except Exception as e:
                log_.abort_flush(plan, e)
                results[i] = e
                continue
            shipping.append((i, log_, replica, plan, batches))
        if not shipping:
            return results
        writes = [
            ShardWrite(replica.resource, replica.lease, replica.epoch, replica.next_seq, batches)
            for _, _, replica, _, batches in shipping
            if batches
        ]
        outcome: list[bool] | BaseException = []
        if writes:
            try:
                outcome = self.pg.run(self._ship_round(writes), self.ship_timeout_s)
            except Exception as e:  # the database refused the round or did not answer
                outcome = e
        written = iter(outcome if isinstance(outcome, list) else ())
        for i, log_, replica, plan, batches in shipping:
            error: BaseException | None = None
            if batches:
                if isinstance(outcome, BaseException):
                    error = outcome
                elif not next(written):
                    error = shard_store.Fenced(
                        f"{replica.lease}: node {self.node_id} no longer holds epoch"
                        f" {replica.epoch}"
                    )
            if error is not None:
                log_.abort_flush(plan, error)
                results[i] = error
                continue
            if batches:
                replica.next_seq += len(batches)
                replica.tail_batches += len(batches)
                self.shipped_batches += len(batches)
            replica.shipped = (plan.target, replica.next_seq - 1)
            try:
                # The database holds the data: the local copy needs no fsync.
                results[i] = log_.end_flush(plan, data_synced=True)
            except Exception as e:
                results[i] = e
        return results

    async def _ship_round(self, writes: list[ShardWrite]) -> list[bool]:
        async with self.pg.pool.acquire() as conn:
            return await shard_store.append_round(conn, self.node_id, writes)

    # -- taking a shard over and giving it up ---------------------------------------------------

    async def restore(
        self, resource: str, lease: str, epoch: int, directory: Path, log_config: LogConfig
    ) -> ShardImage:
        """Rebuild the local log in `directory` from the shard's snapshot and tail in the
        database and ship the shard's next rounds there at `epoch`. What the directory held
        is dropped: only the database's copy is trusted (it may be behind or ahead of it)."""
        self.replicas[directory] = None
        image = await self.pg.call(self._load(resource))
        end = await asyncio.get_running_loop().run_in_executor(
            None, _rebuild_log, directory, log_config, image
        )
        self.replicas[directory] = Replica(
            resource, lease, epoch, image.next_seq, (end, image.next_seq - 1), image.tail_batches
        )
        return image

    async def _load(self, resource: str) -> ShardImage:
        async with self.pg.pool.acquire() as conn:
            return await shard_store.load(conn, resource)

    def forget(self, directory: Path) -> None:
        """The shard's lease is gone: its log is never shipped again (a round still taking
        it fails its waiters: the log is no longer replicated, so nothing there is durable)."""
        if directory in self.replicas:
            self.replicas[directory] = None

    async def snapshot(self, directory: Path, log_: PartitionLog) -> bool:
        """Write the shard's local log (as compacted here) as its snapshot in the database,
        dropping the batches it covers; False when there was nothing new to cover."""
        replica = self.replicas.get(directory)
        if replica is None or replica.tail_batches == 0:
            return False
        end, seq = replica.shipped
        start = log_.log_start_offset
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(None, _snapshot_of, log_, start, end)
        tail_then = replica.tail_batches
        await self.pg.call(self._write_snapshot(replica, seq, data))
        replica.tail_batches = max(replica.tail_batches - tail_then, 0)
        return True

    async def _write_snapshot(self, replica: Replica, seq: int, data: bytes) -> None:
        async with self.pg.pool.acquire() as conn:
            await shard_store.write_snapshot(
                conn, replica.resource, replica.lease, self.node_id, replica.epoch, seq, data
            )


def _snapshot_of(log_: PartitionLog, start: int, end: int) -> bytes:
    return shard_store.compress_snapshot(log_batches(log_, start, end))


def _rebuild_log(directory: Path, log_config: LogConfig, image: ShardImage) -> int:
    """Replace `directory` by a log of `image`'s batches, written in one append (one write);
    returns its end offset.

    Not flushed: the log is a cache of the database's copy, and a restart restores it from
    there again; the runner's PartitionLog.open then checks the batches (CRC) as after a
    crash. (Flushing cost more: with 100 shards restored at once on a loaded machine, the
    fsyncs of rolling and recording a recovery point held up the lease tick past the
    local deadline in bench_cluster, and every lease lapsed.)"""
    shutil.rmtree(directory, ignore_errors=True)
    log_ = PartitionLog.open(directory, log_config)
    try:
        data = image.batches()
        headers = [header for _, header in walk_batches(data)]
        if headers:
            log_.append(data, headers)
        return log_.next_offset
    finally:
        log_.close()

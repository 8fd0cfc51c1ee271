"""serve --cluster: the topic partitions this node leads, stored in PostgreSQL (issue 22
item 2b) and led under `partition:<topic>:<p>` leases.

Theory of operation. Every partition of every topic in the local topic registry is a lease
resource (`resources`, read at every tick, so topics created or deleted are followed);
the lease manager splits them among the live nodes as it splits the coordinator shards.
A partition is served (`Partition.led`) only while this node holds its lease AND its log
was loaded from the database at that lease's epoch:

- acquired: the partition answers NOT_LEADER_OR_FOLLOWER while `PgPartitionStore.load`
  reads its tail state (log start, next offset, the producer batches' headers) in the
  background, retried while the lease is held; then its `Partition.log` becomes that
  PgPartitionLog (the local one of the data directory is closed: it is never written in
  cluster mode), its producer state is rebuilt from the headers (idempotent producers keep
  their sequences across a takeover) and it is led. Appends are acknowledged once the
  store's group-commit round committed them (`RoutingCommitter.wait_durable`).
- lost (not renewed in time, or handed back to a node that joined): it stops at once. It
  is no longer led (Produce, Fetch and ListOffsets answer NOT_LEADER_OR_FOLLOWER), its
  log is fenced (what was appended and not committed is dropped; its waiters fail
  NOT_LEADER_OR_FOLLOWER, and nothing more of it is written: a round in flight is refused
  by the lease guard if the lease moved), its long-poll fetchers are woken.
- deleted (its topic left the registry, DeleteTopics): its rows are dropped under the
  lease, then the lease is handed back.

Retention runs here for the led partitions (rows deleted by retention.ms/bytes, the log
start moved in `partition_starts`), every log_retention_check_interval_ms; so does the
sweep of rows whose topic id the metadata store no longer holds (a deleted topic's rows
that its owner could not drop: it lost its lease first; `drop_orphans`, over two sweeps).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from groupcoord.storage import PartitionLog

from ..observability.logging import get_logger
from ..topics.producers import ProducerStates
from ..topics.registry import Partition, TopicRegistry, wake_waiters
from .partition_log import PgPartitionLog
from .partition_store import PgPartitionStore, ensure_partition_schema
from .replicated_commit import ReplicatedCommitter
from .schema import partition_resource

log = get_logger("groupcoord.cluster")

PARTITION_KIND = "partition"
LOAD_RETRY_S = 1.0


def parse_partition_resource(resource: str) -> tuple[str, int]:
    """(topic, partition) of `partition:<topic>:<p>` (topic names hold no ':')."""
    _, topic, index = resource.split(":")
    return topic, int(index)


class RoutingCommitter(ReplicatedCommitter):
    """The node's committer: a partition stored in PostgreSQL waits for its store's round;
    every other log (the coordinator shards') as before."""

    partition_store: PgPartitionStore | None = None

    async def wait_durable(self, log: Any, offset: int) -> None:
        if type(log) is PgPartitionLog:
            assert self.partition_store is not None
            await self.partition_store.wait_durable(log, offset)
            return
        await super().wait_durable(log, offset)


class PartitionLeadership:
    """The partition side of a cluster node (module docstring)."""

    def __init__(self, registry: TopicRegistry, node_id: int, retention_interval_ms: int) -> None:
        self.registry = registry
        self.node_id = node_id
        self.retention_interval_ms = retention_interval_ms
        self.store: PgPartitionStore | None = None
        self._loads: dict[str, asyncio.Task[None]] = {}
        # resource -> the partition served and its log (loaded at the lease's epoch).
        self._served: dict[str, tuple[Partition, PgPartitionLog]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._retention: asyncio.Task[None] | None = None
        self.give_back: Any = None  # LeaseManager.give_back, set by the node

    # -- what the node and the ownership view ask ---------------------------------------

    def resources(self) -> list[str]:
        return [
            partition_resource(topic.name, partition.index)
            for topic in self.registry.topics()
            for partition in topic.partitions
        ]

    def serves(self, topic: str, index: int) -> bool:
        """Whether this node serves the partition now (leased and loaded)."""
        served = self._served.get(partition_resource(topic, index))
        return served is not None and self.registry.partition(topic, index) is served[0]

    # -- running ------------------------------------------------------------------------

    async def start(self, pool: Any, committer: RoutingCommitter) -> None:
        """Create the tables and the store; no partition is led until its lease is ours."""
        async with pool.acquire() as connection:
            await ensure_partition_schema(connection)
        self.store = PgPartitionStore(pool, self.node_id, health=committer.health)
        committer.partition_store = self.store
        for topic in self.registry.topics():
            for partition in topic.partitions:
                partition.led = False
        self._retention = asyncio.ensure_future(self._retention_loop())

    async def stop(self) -> None:
        """After the leases were handed back: the store's waiters fail, tasks end."""
        for task in [*self._loads.values(), *self._tasks]:
            task.cancel()
        if self._retention is not None:
            self._retention.cancel()
        await asyncio.gather(
            *self._loads.values(),
            *self._tasks,
            *filter(None, [self._retention]),
            return_exceptions=True,
        )
        if self.store is not None:
            await self.store.close()

    async def acquired(self, resource: str, epoch: int) -> None:
        """The lease is ours at `epoch`: load the partition in the background."""
        topic, index = parse_partition_resource(resource)
        partition = self.registry.partition(topic, index)
        if partition is None:  # deleted meanwhile: the lease goes back
            raise LookupError(f"{resource}: no such partition here")
        partition.led = False
        self._loads[resource] = asyncio.ensure_future(self._load(resource, partition, epoch))

    async def _load(self, resource: str, partition: Partition, epoch: int) -> None:
        store = self.store
        assert store is not None
        topic, index = partition.topic.name, partition.index
        while True:
            try:
                loaded = await store.load(
                    topic, index, epoch, partition.log.config, topic_id=partition.topic.topic_id
                )
                break
            except Exception as e:  # the database is away: tried again while leased
                log.warning("partition load failed; retrying", resource=resource, error=repr(e))
                await asyncio.sleep(LOAD_RETRY_S)
        self._loads.pop(resource, None)
        if self.registry.partition(topic, index) is not partition:
            return  # its topic was deleted meanwhile (the next tick hands the lease back)
        old = partition.log
        partition.log = loaded.log  # type: ignore[assignment]
        partition.producers = ProducerStates.from_headers(loaded.producer_headers)
        if isinstance(old, PartitionLog):  # the data directory's, never written here
            old.close()
        self._served[resource] = (partition, loaded.log)
        partition.led = True
        log.info(
            "partition loaded",
            resource=resource,
            epoch=epoch,
            log_start=loaded.log.log_start_offset,
            next_offset=loaded.log.next_offset,
            producer_batches=len(loaded.producer_headers),
            load_ms=round(loaded.load_seconds * 1000, 1),
        )

    async def lost(self, resource: str) -> None:
        """The lease is gone: stop serving at once (module docstring)."""
        task = self._loads.pop(resource, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        served = self._served.pop(resource, None)
        if served is None:
            topic, index = parse_partition_resource(resource)
            partition = self.registry.partition(topic, index)
            if partition is not None:
                partition.led = False
            return
        partition, partition_log = served
        partition.led = False
        partition_log.fence("the lease was lost")
        wake_waiters(partition)

    def tick(self) -> None:
        """After each lease tick: partitions served whose topic was deleted get their rows
        dropped and their lease handed back."""
        for resource, (partition, partition_log) in list(self._served.items()):
            current = self.registry.partition(partition.topic.name, partition.index)
            if current is not partition and not partition_log.fenced:
                partition_log.fence("its topic was deleted")
                self._spawn(self._drop(resource, partition_log))

    async def _drop(self, resource: str, partition_log: PgPartitionLog) -> None:
        assert self.store is not None
        try:
            await self.store.drop_partition(partition_log)
            log.info("partition rows dropped", resource=resource)
        except Exception as e:  # fenced (moved on) or the database away: rows stay
            log.warning("partition drop failed", resource=resource, error=repr(e))
        if self.give_back is not None and self._served.get(resource, (None, None))[1] is (
            partition_log
        ):
            await self.give_back(resource)

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retention_loop(self) -> None:
        interval_s = self.retention_interval_ms / 1000
        orphans: set[Any] = set()  # topic ids found orphaned by the sweep before
        while True:
            await asyncio.sleep(interval_s)
            await self.apply_retention(int(time.time() * 1000))
            assert self.store is not None
            try:
                orphans = await self.store.drop_orphans(orphans)
            except Exception as e:  # the database away: the next pass
                log.warning("orphan partition rows not dropped", error=repr(e))

    async def apply_retention(self, now_ms: int) -> None:
        """Retention of every partition served (rows deleted, log start moved)."""
        store = self.store
        assert store is not None
        for resource, (partition, partition_log) in list(self._served.items()):
            if partition_log.fenced:
                continue
            config = partition_log.config
            if config.retention_ms < 0 and config.retention_bytes < 0:
                continue
            before = partition_log.log_start_offset
            try:
                start = await store.apply_retention(partition_log, now_ms)
            except Exception as e:  # fenced, or the database away: the next pass
                log.warning("partition retention failed", resource=resource, error=repr(e))
                continue
            if start > before:
                partition.producers.forget_below(start)

"""`serve --cluster postgresql://...`: this node's part of a cluster on PostgreSQL.

Theory of operation. The node registers and leases coordinator shards (leases.py). Every
shard starts NOT_OWNED (requests answered NOT_COORDINATOR). When the node acquires shard
n's lease (`group-shard:n`: shard n of both families, lease_ownership.py) it loads both
shards in the background: their local logs are rebuilt from the database's snapshot and
tail (replicated_commit.py's restore), then replayed by the runner's ordinary load;
meanwhile they answer COORDINATOR_LOAD_IN_PROGRESS. From then on their records go to the
database with the node's group-commit rounds: one transaction per round for all the
node's shards, each shard fenced by its own lease epoch (replicated_commit.py). When the
lease is lost (not renewed in time, or handed back to a node that joined) the shards stop
at once: nothing of theirs is shipped again, their parked and unacknowledged requests are
answered NOT_COORDINATOR, and they are NOT_OWNED until acquired again.

Snapshots: a shard whose tail in the database grew past SNAPSHOT_TAIL_BATCHES batches
since its last snapshot gets a new one (its local log, as compacted here), so a takeover
loads one snapshot and a short tail.

Every live node is listed to clients (Metadata, DescribeCluster, FindCoordinator's
answers) at the address it registered: its first listener's advertised address.

Metadata (topics, configs, ACLs, SCRAM credentials, the cluster id) lives in the metadata
store in PostgreSQL and every node's local copy follows it (metadata_sync.py): a topic
created on one node is served by all, with one topic id.

Topic partitions are leased too (`partition:<topic>:<p>`, partition_leases.py): each is
led by the node holding its lease, its batches stored in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config import Config
from ..observability.logging import get_logger
from ..runtime.log_runner import CoordinatorShardRunner, ShardState
from ..runtime.shard_family import ShardFamily
from ..topics.context import Node
from ..topics.registry import TopicRegistry
from . import shard_store
from .lease_ownership import LeaseOwnership
from .leases import LeaseManager, NodeInfo, lock_hold_ms, open_pool, resource_kind
from .metadata_sync import ClusterMetadata, stored_cluster_id
from .partition_leases import PARTITION_KIND, PartitionLeadership, RoutingCommitter
from .peer_auth import PeerListeners
from .replicated_commit import PgThread, ReplicatedCommitter
from .schema import group_shard_resource, txn_shard_resource

log = get_logger("groupcoord.cluster")

SNAPSHOT_TAIL_BATCHES = 2_000
LOAD_RETRY_S = 1.0


class ClusterNode:
    """Leases, replicated shard records and the live nodes list of one node."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.lock_hold_ms = lock_hold_ms(config.cluster_lease_duration_ms)
        # Connects now: a database it cannot reach fails the start.
        self.pg = PgThread(config.cluster, lock_hold_ms=self.lock_hold_ms, node_id=config.node_id)
        # The metadata store's (metadata_sync.py), the first node's choice.
        self.cluster_id: str = self.pg.run(stored_cluster_id(self.pg.pool), 60)
        self.metadata: ClusterMetadata | None = None
        self.committer: ReplicatedCommitter | None = None
        self.families: tuple[ShardFamily[Any], ...] = ()
        self.shard_count = 0
        self.leases: LeaseManager | None = None
        self.ownership = LeaseOwnership(config.node_id)
        self.nodes: list[Node] = []
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._snapshots: asyncio.Task[None] | None = None
        # Where the nodes' peer listeners are (peer_auth.py; this node's is opened by
        # server/peer_sasl.open_peer_listener).
        self.peers = PeerListeners(config, self.lock_hold_ms)
        self.partitions: PartitionLeadership | None = None  # attach_topics

    def follow_metadata(
        self,
        topics: TopicRegistry,
        security: Any,
        topics_deleted: Callable[[Mapping[str, uuid.UUID]], None],
        handlers: dict[int, Any],
    ) -> None:
        """Topics, configs, ACLs and SCRAM credentials follow the metadata store, and the
        APIs changing them write it (metadata_sync.py); started by `start`."""
        self.metadata = ClusterMetadata(
            self.config.cluster, topics, security, topics_deleted, self.config.node_id
        )
        self.metadata.wrap(handlers)

    def make_committer(self, **kwargs: Any) -> ReplicatedCommitter:
        self.committer = RoutingCommitter(self.pg, self.config.node_id, **kwargs)
        return self.committer

    def attach_topics(self, registry: Any) -> None:
        """Lead the registry's partitions by leases, stored in PostgreSQL."""
        self.partitions = PartitionLeadership(
            registry, self.config.node_id, self.config.log_retention_check_interval_ms
        )
        self.ownership.serves = self.partitions.serves
        registry.ownership = self.ownership

    def attach(self, groups: ShardFamily[Any], txns: ShardFamily[Any]) -> None:
        """Take over the shard families: every shard NOT_OWNED until its lease is ours."""
        self.families = (groups, txns)
        self.shard_count = max(groups.shard_count, txns.shard_count)
        for family in self.families:
            family.disown(lambda _shard: False)

    def resources(self) -> Sequence[str]:
        shards = [group_shard_resource(n) for n in range(self.shard_count)]
        return shards if self.partitions is None else shards + self.partitions.resources()

    async def start(self, nodes: list[Node]) -> None:
        """Register at the first listener's address and start leasing (after listening)."""
        self.nodes = nodes
        me = nodes[0]
        if self.metadata is not None:
            await self.metadata.start()
        pool = await open_pool(
            self.config.cluster, lock_hold_ms=self.lock_hold_ms, node_id=self.config.node_id
        )
        async with pool.acquire() as conn:
            await shard_store.create_tables(conn)
        if self.partitions is not None:
            assert isinstance(self.committer, RoutingCommitter)
            await self.partitions.start(pool, self.committer)
        self.leases = LeaseManager(
            pool,
            NodeInfo(self.config.node_id, me.host, me.port),
            self.resources,
            self.config.cluster_lease_duration_ms,
            self.config.cluster_lease_renew_interval_ms,
            on_acquired=self._acquired,
            on_lost=self._lost,
            on_tick=self._list_nodes,
        )
        self.ownership.leases = self.leases
        if self.partitions is not None:
            self.partitions.give_back = self.leases.give_back
        await self.leases.start()
        self._snapshots = asyncio.ensure_future(self._snapshot_loop())

    def peer_address(self, node_id: int) -> str:
        return self.peers.address(node_id)

    def _list_nodes(self) -> None:
        assert self.leases is not None
        if self.partitions is not None:
            self.partitions.tick()
        brokers = tuple((n.node_id, n.host, n.port) for n in self.leases.live)
        for node in self.nodes:
            node.brokers = brokers

    def _runners(self, shard: int) -> list[tuple[CoordinatorShardRunner, str]]:
        """Shard `shard`'s runners with the resource naming each one's rows."""
        groups, txns = self.families
        pairs: list[tuple[CoordinatorShardRunner, str]] = []
        if shard < groups.shard_count:
            pairs.append((groups.runners[shard], group_shard_resource(shard)))
        if shard < txns.shard_count:
            pairs.append((txns.runners[shard], txn_shard_resource(shard)))
        return pairs

    async def _acquired(self, lease: str, epoch: int) -> None:
        if resource_kind(lease) == PARTITION_KIND:
            assert self.partitions is not None
            await self.partitions.acquired(lease, epoch)
            return
        shard = int(lease.split(":", 1)[1])
        for runner, resource in self._runners(shard):
            runner.state = ShardState.LOADING
            runner.restore = self._restorer(runner, resource, lease, epoch)
        self._loads[shard] = asyncio.ensure_future(self._load(shard, epoch))

    def _restorer(
        self, runner: CoordinatorShardRunner, resource: str, lease: str, epoch: int
    ) -> Any:
        committer = self.committer
        assert committer is not None

        async def restore() -> None:
            image = await committer.restore(
                resource, lease, epoch, runner.directory, runner.log_config
            )
            log.info(
                "shard restored",
                resource=resource,
                epoch=epoch,
                snapshot_seq=image.snapshot_seq,
                tail_batches=image.tail_batches,
            )

        return restore

    async def _load(self, shard: int, epoch: int) -> None:
        """Load shard `shard`'s runners, retrying while this node holds the lease (the
        database may be away for a while)."""
        for runner, _ in self._runners(shard):
            while True:
                try:
                    await runner.load()
                    break
                except Exception as e:
                    runner.state = ShardState.FAILED
                    log.warning("shard load failed; retrying", shard=shard, error=repr(e))
                    await asyncio.sleep(LOAD_RETRY_S)

    async def _lost(self, lease: str) -> None:
        if resource_kind(lease) == PARTITION_KIND:
            assert self.partitions is not None
            await self.partitions.lost(lease)
            return
        shard = int(lease.split(":", 1)[1])
        task = self._loads.pop(shard, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        committer = self.committer
        assert committer is not None
        for runner, _ in self._runners(shard):
            # Closed first, so what it gathered is still shipped (a clean hand-back loses
            # nothing; past the lease the guard refuses it and it is answered as failed),
            # then never shipped again.
            await runner.disown()
            committer.forget(runner.directory)
            runner.restore = None

    async def _snapshot_loop(self) -> None:
        interval_s = self.config.cluster_lease_renew_interval_ms / 1000
        committer = self.committer
        assert committer is not None
        while True:
            await asyncio.sleep(interval_s)
            for family in self.families:
                for runner in family.active_runners():
                    replica = committer.replicas.get(runner.directory)
                    log_ = runner.log
                    if replica is None or log_ is None:
                        continue
                    if replica.tail_batches < SNAPSHOT_TAIL_BATCHES:
                        continue
                    try:
                        await committer.snapshot(runner.directory, log_)
                    except Exception as e:  # tried again at the next pass
                        log.warning("snapshot failed", shard=runner.shard_id, error=repr(e))

    async def stop(self) -> None:
        """Hand the leases back (their shards stop first) and mark this node dead."""
        await self.peers.close()
        if self._snapshots is not None:
            self._snapshots.cancel()
            await asyncio.gather(self._snapshots, return_exceptions=True)
        if self.leases is not None:
            await self.leases.stop(release=True)
        if self.partitions is not None:
            await self.partitions.stop()
        if self.leases is not None:
            await self.leases.pool.close()
        if self.metadata is not None:
            await self.metadata.close()

    def close(self) -> None:
        """After the committer closed: the flusher's database connections."""
        self.pg.close()

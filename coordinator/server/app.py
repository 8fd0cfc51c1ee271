"""Server lifecycle: load state, listen, serve, and shut down gracefully.

Shutdown on SIGTERM/SIGINT: stop accepting, let in-flight requests finish (bounded by
shutdown_timeout_ms), fsync every log, close connections, exit 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import os
import signal
import sys
import time
from collections.abc import Coroutine
from functools import partial
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groupcoord.storage import DataDirError, GroupCommitter, LogConfig, StorageError
from groupcoord.storage.checkpoint import atomic_write, read_json_file, state_file_fields
from groupcoord.storage.dir_lock import DataDirLock
from groupcoord.storage.health import StorageHealth
from groupcoord.storage.open_files import OPEN_FILES
from groupcoord.storage.retention import apply_retention

from ..config import FRAME_OVERHEAD_BYTES, Config
from ..node_settings import CLUSTER_NODE_IDS_MAX
from ..observability.coordinator_metrics import CoordinatorCollector
from ..observability.group_api import GroupApi
from ..observability.http import HttpEndpoint
from ..observability.http_access import HttpAccess
from ..observability.lag_metrics import LagMetrics
from ..observability.logging import get_logger, setup_logging
from ..observability.metrics import ServerMetrics
from ..observability.runtime_metrics import RuntimeCollector
from ..observability.storage_damage import report_damage_removed
from ..observability.storage_metrics import StorageCollector
from ..observability.txn_metrics import TxnMetrics
from ..ownership import OwnershipView
from ..runtime.gateway import GroupCoordinatorGateway
from ..runtime.group_config_store import GroupConfigStore
from ..runtime.service import OFFSETS_TOPIC, CoordinatorService, group_config
from ..runtime.shard_count import TXN_SHARD_COUNT_FILE, settled_shard_count
from ..runtime.shard_family import ShardFamily
from ..runtime.txn_gateway import TxnCoordinatorGateway
from ..runtime.txn_service import TRANSACTION_STATE_TOPIC, TxnCoordinatorService
from ..security.acl_model import ALLOW_ALL
from ..security.oauthbearer import OAuthConfigError
from ..security.plain import PlainUsersError
from ..security.tls import TlsConfigError
from ..topics.compaction import TopicCompactor
from ..topics.context import HandlerContext, Node
from ..topics.internal_topics import (
    InternalTopics,
    offsets_topic_configs,
    transaction_state_topic_configs,
)
from ..topics.lag_reads import PartitionEnds
from ..topics.registry import TopicRegistry, wake_waiters
from ..topics.txn_markers import marker_written
from .auth_services import AuthServices
from .connection import Connection, OutgoingWrites
from .connection_limits import ConnectionLimits
from .context import GroupContext
from .data_dir import (
    ACLS_DIR,
    GROUP_CONFIGS_FILE,
    PRODUCER_IDS_FILE,
    check_data_dir,
    load_cluster_id,
)
from .dispatch import build_dispatch
from .endpoints import ServedListener, served_listeners
from .fd_limits import RESERVED_FDS, apply_fd_limits
from .frame_budget import FrameBudget
from .listener import Listener
from .peer_ends import LeaderEnds, WorkerPartitionEnds
from .peer_sasl import open_peer_listener
from .recovery_report import (
    clean_shutdown_marked,
    mark_clean_shutdown,
    report_recovery,
    take_clean_shutdown_marker,
    take_same_boot_marker,
)
from .tls_connection import TlsConnection
from .topic_repair import TopicChanges, TopicRepair
from .topic_sync import SYNCED_APIS, TopicSync
from .txn_markers import TxnMarkerRouter
from .worker_channel import (
    CHANNEL_HOST,
    WorkerChannelConnection,
    channel_address,
    listening_socket,
)
from .worker_layout import ownership_of, same_topic_ids, worker_dir
from .worker_txns import WorkerMarkers, WorkerTxnGateway

if TYPE_CHECKING:
    from ..cluster.node import ClusterNode

log = get_logger("groupcoord.server")

# Connections the kernel holds completed but not yet accepted. A full queue drops new SYNs,
# everyone's alike, and a dropped SYN costs its client a 1 s retransmit; a deep queue costs
# 30-45 us of wait per connection ahead. A flood of 12,000 attempts from one local process
# (tests/bench/bench_connection_flood.py) filled 1,236 places (1024 overflowed: probes
# from other addresses waited 1 s); 4096, Linux's default somaxconn (which caps it), was
# not reached. Kafka's socket.listen.backlog.size is 50.
LISTEN_BACKLOG = 4096
# Failing logs listed by /health (all are counted).
HEALTH_FAILURES_LISTED = 10


class Server:
    def __init__(self, config: Config) -> None:
        # First of all: never write among a user's files (data_dir.py), and no other process
        # may write this data directory (storage/dir_lock.py). Raises DataDirError, or
        # DataDirInUse (an OSError) when another process holds it.
        data = config.data_path
        check_data_dir(data)
        self._data_lock = DataDirLock.acquire(data)
        self._cluster_id = load_cluster_id(data)  # the marker, before any other file
        # Taken (removed) only once the logs it concerns are open: see start().
        self._after_clean_shutdown = clean_shutdown_marked(data)
        # Nothing in the logs can be a torn write but a final one cut short after a clean
        # stop, or after a crash of this process alone (recovery_report.py): a bad batch
        # is then damage, removed alone, the valid ones after it kept.
        self._salvage = take_same_boot_marker(data) or self._after_clean_shutdown
        # The shard count is the data directory's once it has one (runtime/shard_count.py);
        # the config then says the count served, for DescribeConfigs and the rest.
        shards = settled_shard_count(data, config.offsets_partitions, OFFSETS_TOPIC)
        txn_shards = settled_shard_count(
            data,
            config.transaction_state_partitions,
            TRANSACTION_STATE_TOPIC,
            TXN_SHARD_COUNT_FILE,
            "transaction_state_partitions",
        )
        config = dataclasses.replace(
            config, offsets_partitions=shards, transaction_state_partitions=txn_shards
        )
        self.config = config
        _apply_fd_limits(config)
        self.metrics = ServerMetrics(name_labels=config.metrics_name_labels)
        self.topics = TopicRegistry(config)
        self.group_configs = GroupConfigStore(data / GROUP_CONFIGS_FILE)
        committer_settings: dict[str, Any] = dict(
            waiters_max=config.durable_waiters_max,
            syncfs_min_logs=config.syncfs_min_logs,
            on_round_synced=self._round_synced,
            health=StorageHealth(),
        )
        # serve --cluster: shards leased from PostgreSQL, their rounds written there
        # (cluster/node.py). Connects now: a database it cannot reach fails the start.
        self.cluster: ClusterNode | None = None
        if config.cluster:
            from ..cluster.node import ClusterNode  # asyncpg: the `cluster` extra

            self.cluster = ClusterNode(config)
            self._cluster_id = self.cluster.cluster_id
        self.committer = (
            GroupCommitter(**committer_settings)
            if self.cluster is None
            else self.cluster.make_committer(**committer_settings)
        )
        self.metrics.registry.register(StorageCollector(self.committer.health, OPEN_FILES))
        self.coordinator = CoordinatorService(
            config.data_path,
            config.offsets_partitions,
            group_config(config),
            LogConfig(
                segment_bytes_max=config.offsets_segment_bytes,
                retention_ms=-1,
                retention_bytes=-1,
            ),
            self.committer,
            self.metrics,
            topics=self.topics,
            group_configs=self.group_configs,
        )
        self.metrics.registry.register(CoordinatorCollector(self.coordinator.shard_stats))
        # Consumer lag: measured and rendered as /metrics is scraped (lag_metrics.py).
        self.lag = LagMetrics(
            self.coordinator.lag_sources,
            PartitionEnds(self.topics),
            config.metrics_lag_partition_series_max,
            name_labels=config.metrics_name_labels,
            status_intervals=config.metrics_lag_status_intervals,
            status_min_distance_ms=config.metrics_lag_status_min_distance_ms,
        )
        # The only door the network layer has into groups and offsets.
        self.gateway = GroupCoordinatorGateway(self.coordinator, self.group_configs)
        # The transaction coordinator: its shards on the same storage and committer, and
        # its door.
        self.txn_coordinator = TxnCoordinatorService(
            config.data_path,
            config.transaction_state_partitions,
            LogConfig(
                segment_bytes_max=config.transaction_state_segment_bytes,
                retention_ms=-1,
                retention_bytes=-1,
            ),
            self.committer,
            self.allocate_producer_id,
            config.transaction_max_timeout_ms,
        )
        self.txn_gateway = TxnCoordinatorGateway(
            self.txn_coordinator, config.transaction_concurrent_wait_ms
        )
        if self.cluster is not None:
            self.cluster.attach(self.coordinator, self.txn_coordinator)
            self.cluster.attach_topics(self.topics)  # partitions by leases, in PostgreSQL
        # serve --workers: this worker owns a share of the shards and partitions, the rest
        # answer NOT_COORDINATOR / NOT_LEADER_OR_FOLLOWER (ownership.py, worker_layout.py).
        self.ownership = ownership_of(config)
        if self.ownership is not None:
            self.coordinator.disown(self.ownership.owns_shard)
            self.txn_coordinator.disown(self.ownership.owns_shard)
            self.topics.ownership = self.ownership
            self.topics.new_topic_id = same_topic_ids(self._cluster_id)
            # Lag of partitions another worker leads: from their leaders (peer_ends.py).
            self.leader_ends: LeaderEnds | None = LeaderEnds(self.ownership, self._peer)
            self.lag.ends = self._partition_ends()
        else:
            self.leader_ends = None
        # Who owns what, as the request routing asks it: the workers' fixed shares, or
        # serve --cluster's leases (cluster/lease_ownership.py); None for one node.
        routing: OwnershipView | None = self.ownership
        if self.cluster is not None:
            routing = self.cluster.ownership
        # The shard logs as Kafka's internal topics, read-only (topics/internal_topics.py);
        # added at start, once the cluster id (part of their topic ids) is known.
        self.internal_topics = InternalTopics()
        self.metrics.registry.register(
            RuntimeCollector(
                lambda: chain(
                    self.coordinator.queued_events(), self.txn_coordinator.queued_events()
                )
            )
        )
        self.connections: set[Connection] = set()
        self.frame_budget = FrameBudget(
            config.frames_per_loop_iteration_max, config.queued_request_bytes_max
        )
        self.limits = ConnectionLimits(config, self.metrics, self.connections)
        self.outgoing = OutgoingWrites()
        self.handlers, self.supported_versions = build_dispatch()
        # serve --workers: topic changes made here are repeated on the other workers.
        self.topic_changes = TopicChanges(config.data_path)
        self.topic_sync = (
            TopicSync(self.ownership, self.topic_changes, self._shards_loaded)
            if self.ownership is not None
            else None
        )
        if self.topic_sync is not None:
            for key in SYNCED_APIS:
                self.handlers[key] = self.topic_sync.wrap(key, self.handlers[key])
            self.topics.auto_create_hook = self.topic_sync.auto_create
        host, port = config.advertised_address
        self.node = Node(config.node_id, host, port, ownership=routing)
        # Listeners, TLS contexts, SASL mechanisms and SCRAM credentials (raises ConfigError
        # for the listeners, TlsConfigError/PlainUsersError for files it cannot use).
        specs = config.listener_specs
        self.security = AuthServices(config, specs)
        if self.cluster is not None:  # metadata follows PostgreSQL (cluster/metadata_sync.py)
            self.cluster.follow_metadata(
                self.topics, self.security, self.gateway.topics_deleted, self.handlers
            )
        # Who may read the HTTP endpoint (raises ConfigError for an unreadable token file).
        self.http_access = HttpAccess(config)
        # What every handler gets (each connection a copy with its client): see
        # topics/context.py.
        self.context: GroupContext = HandlerContext(
            self.gateway,
            self.topics,
            config,
            self.node,
            self.metrics,
            self.committer,
            self.spawn,
            self.allocate_producer_id,
            self.supported_versions,
            # serve --workers: KIP-890 questions go to the transactional id's owner.
            self.txn_gateway
            if routing is None
            else WorkerTxnGateway(
                self.txn_gateway,
                routing,
                config.transaction_state_partitions,
                self._peer,
            ),
            self.security,
            authorizer=self.security.acls.authorizer if self.security.acls else ALLOW_ALL,
        )
        # Each listener's view: its advertised address and name (endpoints.py).
        self.listeners: list[ServedListener] = served_listeners(specs, self.context)
        # Completes prepared transactions: writes their markers through the data plane and
        # the group coordinator, then the Complete record (txn_markers.py).
        self.txn_metrics = TxnMetrics(
            self.metrics.registry,
            self.txn_coordinator.counters,
            self.txn_coordinator.open_transactions,
        )
        if routing is None:
            self.marker_router = TxnMarkerRouter(self.context, metrics=self.txn_metrics)
        else:  # serve --workers / --cluster: markers of what other nodes own go to them
            markers = WorkerMarkers(self.context, routing, self._peer)
            self.marker_router = TxnMarkerRouter(
                self.context,
                write_marker=markers.write_marker,
                complete_offsets=markers.complete_offsets,
                written=marker_written,
                metrics=self.txn_metrics,
            )
        self.txn_coordinator.set_marker_sink(self.marker_router.submit)
        self.ready = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sockets: list[Listener] = []
        self._http: Listener | None = None
        self._stopped = asyncio.Event()
        self._retention_task: asyncio.Task[None] | None = None
        self._compaction_task: asyncio.Task[None] | None = None
        self._txn_tasks: list[asyncio.Task[None]] = []
        self._repair_task: asyncio.Task[None] | None = None
        self._leader_ends_task: asyncio.Task[None] | None = None
        self._channel: asyncio.Server | None = None  # serve --workers: worker_channel.py
        # The log cleaner of compacted topics (cleanup.policy=compact).
        self.topic_compactor = TopicCompactor(self.topics, config)
        self._topic_compaction_task: asyncio.Task[None] | None = None
        self._producer_ids: ProducerIdAllocator | None = None
        self.exit_code = 0  # of the process, once stopped

    # start / stop ------------------------------------------------------------------------

    async def start(self) -> None:
        started = time.monotonic()
        data = self.config.data_path
        for served in self.listeners:
            served.node.cluster_id = self._cluster_id
        self._add_internal_topics()
        self._producer_ids = ProducerIdAllocator(
            data / PRODUCER_IDS_FILE,
            *(
                (len(self.ownership.node_ids), self.ownership.index)
                if self.ownership
                # serve --cluster: node ids below CLUSTER_NODE_IDS_MAX stride the ids.
                else (CLUSTER_NODE_IDS_MAX, self.config.node_id)
                if self.cluster is not None
                else ()
            ),
        )
        self.security.load()
        if self.security.acls is not None:  # replayed before any request is served
            acl_log = self.security.acls.open(
                self._salvage, partial(report_damage_removed, self.metrics)
            )
            report_recovery([(ACLS_DIR, acl_log)], self._after_clean_shutdown, self.metrics)
        self.topics.load(salvage=self._salvage)
        report_recovery(
            ((f"{t.name}-{p.index}", p.log) for t in self.topics.topics() for p in t.partitions),
            self._after_clean_shutdown,
            self.metrics,
        )
        self.group_configs.load()
        # From here on logs may be written: a crash must not be taken for a clean stop. (A
        # start refused above left the marker: the logs are as the clean stop left them.)
        take_clean_shutdown_marker(data)
        # Shards load in the background: until a shard is active its groups' requests get
        # COORDINATOR_LOAD_IN_PROGRESS, and the data plane is served meanwhile.
        self._coordinator_load = asyncio.ensure_future(self._load_shards(self.coordinator))
        self._compaction_task = asyncio.ensure_future(
            self.coordinator.compaction_loop(
                self.config.offsets_compaction_interval_ms,
                self.config.offsets_tombstone_retention_ms,
            )
        )
        # The transaction shards load beside the group shards (a transaction whose markers
        # wait for an offsets shard retries until that shard is active).
        self._txn_tasks = [
            asyncio.ensure_future(self._load_shards(self.txn_coordinator)),
            asyncio.ensure_future(
                self.txn_coordinator.compaction_loop(
                    self.config.offsets_compaction_interval_ms,
                    self.config.offsets_tombstone_retention_ms,
                )
            ),
            asyncio.ensure_future(
                self.txn_coordinator.maintenance_loop(
                    self.config.transaction_abort_interval_ms,
                    self.config.transaction_expiration_interval_ms,
                    self.config.transactional_id_expiration_ms,
                )
            ),
        ]
        for served in self.listeners:
            await self._open(served)
        if self.ownership is not None:
            self._list_workers()
            await self._open_worker_channel()
        if self.cluster is not None:  # peers authenticate there (cluster/peer_auth.py)
            self._sockets.append(await open_peer_listener(self, self.cluster.peers))
            await self.cluster.start([served.node for served in self.listeners])
        if self.topic_sync is not None and self.ownership is not None:
            self.topic_changes.load()
            self.topic_sync.start(
                [self._peer(n) for n in self.ownership.node_ids if n != self.ownership.node_id]
            )
            self._start_topic_repair()
            assert self.leader_ends is not None
            self._leader_ends_task = asyncio.ensure_future(self.leader_ends.run())
        self.limits.start()
        if self.config.metrics_listen:
            from ..config import split_host_port

            access = self.http_access
            http = HttpEndpoint(
                self.metrics,
                self.health,
                self.refresh_gauges,
                self.coordinator.timeline,
                more_metrics=self.lag.scrape,
                groups=GroupApi(
                    self.coordinator.group_summaries,
                    self.coordinator.group_page,
                    self._partition_ends(),
                ),
                access=access,
            )
            self._http = await Listener.start(
                *split_host_port(self.config.metrics_listen),
                lambda _host: http.protocol(),
                name="http",
                backlog=128,
                # Read per connection: SIGHUP replaces the context.
                tls_context=(lambda: access.context) if access.context is not None else None,
            )
        self._retention_task = asyncio.ensure_future(self._retention_loop())
        self._topic_compaction_task = asyncio.ensure_future(
            self.topic_compactor.run(self.config.log_cleaner_interval_ms)
        )
        if self.config.frame_bytes_max < self.config.message_bytes_max + FRAME_OVERHEAD_BYTES:
            log.warning(
                "frame_bytes_max leaves no room for a max-size batch: produce requests "
                "carrying one close the connection",
                frame_bytes_max=self.config.frame_bytes_max,
                message_bytes_max=self.config.message_bytes_max,
            )
        self.ready = True
        gc.freeze()  # what start-up built lives as long as the server: out of the collector
        log.info(
            "started",
            listen=self.config.listen,
            advertised=f"{self.node.host}:{self.node.port}",
            listeners=[
                f"{s.spec.name}://{s.spec.host}:{s.node.port} ({s.spec.protocol}, "
                f"advertised {s.node.host}:{s.node.port})"
                for s in self.listeners
            ],
            data_dir=str(data),
            topics=len(self.topics.by_name),
            partitions=self.topics.partition_count(),
            load_seconds=round(time.monotonic() - started, 3),
        )

    async def _open(self, served: ServedListener) -> None:
        """Listen on one listener; an ephemeral port (0) is advertised as the real one."""
        spec = served.spec
        tls = None
        if spec.uses_tls:
            name = spec.name

            def tls() -> Any:  # read per connection: SIGHUP replaces the contexts
                return self.security.tls_contexts[name]

        listener = await Listener.start(
            spec.host,
            spec.port,
            lambda host: self.protocol_for(host, served),
            backlog=LISTEN_BACKLOG,
            queues=self.config.accept_queues,
            name=spec.name,
            on_accept_failure=self.metrics.accept_failures_by_error,
            tls_context=tls,
        )
        self._sockets.append(listener)
        if served.node.port == 0:  # an ephemeral port was asked for: advertise the real one
            served.node.port = listener.sockets[0].getsockname()[1]

    def _list_workers(self) -> None:
        """serve --workers: each listener's node lists every worker at that listener's
        address, worker j's port this worker's + (j - this worker's index)."""
        ownership = self.ownership
        assert ownership is not None
        for served in self.listeners:
            node = served.node
            node.brokers = tuple(
                (node_id, node.host, node.port + j - ownership.index)
                for j, node_id in enumerate(ownership.node_ids)
            )

    def _partition_ends(self) -> PartitionEnds | WorkerPartitionEnds:
        """What lag is measured from: this node's logs, and with workers the leaders'."""
        local = PartitionEnds(self.topics)
        return local if self.leader_ends is None else WorkerPartitionEnds(local, self.leader_ends)

    async def _shards_loaded(self) -> None:
        await asyncio.shield(self._coordinator_load)

    def _start_topic_repair(self) -> None:
        """serve --workers: converge on the topic changes missed while down (topic_repair.py)."""
        assert self.ownership is not None
        top = self.config.data_path.parent
        repair = TopicRepair(
            self.topics,
            self.topic_changes,
            (
                worker_dir(top, j)
                for j in range(len(self.ownership.node_ids))
                if j != self.ownership.index
            ),
            self.gateway.topics_deleted,
        )
        self._repair_task = asyncio.ensure_future(
            repair.run(self.config.worker_topic_repair_interval_ms, self._shards_loaded())
        )

    def _peer(self, node_id: int) -> tuple[int, str]:
        """serve --workers: worker `node_id` at its channel's address (worker_channel.py);
        serve --cluster: node `node_id`'s peer listener, host:port over TCP (peer_sasl.py)."""
        if self.ownership is not None:
            index = self.ownership.node_ids.index(node_id)
            return node_id, channel_address(self._cluster_id, index)
        assert self.cluster is not None
        return node_id, self.cluster.peer_address(node_id)

    async def _open_worker_channel(self) -> None:
        """serve --workers: listen on this worker's channel (worker_channel.py), its
        connections seen as the first listener's."""
        assert self.ownership is not None
        first = self.listeners[0]
        # The first listener's view, without its TLS or SASL: the socket authenticates.
        served = ServedListener(
            dataclasses.replace(first.spec, protocol="PLAINTEXT"), first.node, first.context
        )

        def connection() -> Connection | None:
            if self.stopping or self.limits.admit(CHANNEL_HOST) is not None:
                return None
            return WorkerChannelConnection(self, admitted_host=CHANNEL_HOST, listener=served)

        address = channel_address(self._cluster_id, self.ownership.index)
        self._channel = await asyncio.get_running_loop().create_unix_server(
            connection,  # type: ignore[arg-type]
            sock=listening_socket(address, LISTEN_BACKLOG),
        )

    def reload(self) -> None:
        """SIGHUP: re-read the TLS certificate and key and the PLAIN users; open
        connections keep theirs, new ones get the new (auth_services.py)."""
        self.security.reload()
        self.http_access.reload()

    def _add_internal_topics(self) -> None:
        config = self.config
        internal = self.internal_topics
        for name, configs, shards in (
            (OFFSETS_TOPIC, offsets_topic_configs(config.offsets_segment_bytes), self.coordinator),
            (
                TRANSACTION_STATE_TOPIC,
                transaction_state_topic_configs(config.transaction_state_segment_bytes),
                self.txn_coordinator,
            ),
        ):
            self.topics.add_internal(internal.add(name, self._cluster_id, configs, shards))

    def _round_synced(self, elapsed_s: float) -> None:
        """After each flush round: its time, and long polls on the shard logs woken."""
        self.metrics.sync_round.observe(elapsed_s)
        self.internal_topics.wake()

    async def _load_shards(self, family: ShardFamily[Any]) -> None:
        """Load a family of coordinator shards (the group or the transaction coordinator's)."""
        try:
            await family.load(salvage=self._salvage)
        except DataDirError as e:
            # A shard log's files disagree with its data: refuse as a start would (the
            # data plane served meanwhile; nothing of the shard was opened or changed).
            log.error("cannot start", error=str(e))
            self.exit_code = 1
            await self.stop(clean=False)
            return
        report_recovery(
            ((r.directory.name, r.log) for r in family.runners if r.log is not None),
            self._after_clean_shutdown,
            self.metrics,
        )
        # The loaded groups and offsets live as long as the server: keep the cyclic
        # collector from walking them again and again.
        gc.freeze()

    async def stop(self, clean: bool = True) -> None:
        """Stop serving and close everything; `clean`: write the clean shutdown marker
        (not when a shard's load was refused: that log was never opened and closed)."""
        if self.stopping:
            return
        for served in self.listeners:
            served.node.stopping = True
        log.info("stopping", connections=len(self.connections))
        for listener in self._sockets:
            listener.close()
        if self._channel is not None:
            self._channel.close()
        # Long polls return early once `stopping` is set; wake them.
        for topic in self.topics.topics():
            for partition in topic.partitions:
                wake_waiters(partition)
        self.internal_topics.wake(every=True)
        deadline = self.config.shutdown_timeout_ms / 1000
        idle = [c.idle.wait() for c in list(self.connections)]
        if idle:
            try:
                await asyncio.wait_for(asyncio.gather(*idle), deadline)
            except TimeoutError:
                log.warning("in-flight requests did not finish before the shutdown timeout")
        if self._retention_task is not None:
            self._retention_task.cancel()
        if self._compaction_task is not None:
            self._compaction_task.cancel()
        if self._topic_compaction_task is not None:
            self._topic_compaction_task.cancel()
        for task in self._txn_tasks:
            task.cancel()
        await self.marker_router.close()  # a restart resumes the prepared transactions
        if self.topic_sync is not None:
            await self.topic_sync.close()
        if self._repair_task is not None:
            self._repair_task.cancel()
        if self._leader_ends_task is not None:
            self._leader_ends_task.cancel()
        if self.cluster is not None:  # hand the leases back: the others take over at once
            await self.cluster.stop()
        await self.txn_coordinator.close()
        await self.coordinator.close()
        await self.committer.close()
        if self.cluster is not None:
            self.cluster.close()
        for connection in list(self.connections):
            connection.close()
        self.limits.stop()
        if self._http is not None:
            self._http.close()
        self.topics.close()
        if self.security.acls is not None:
            self.security.acls.close()
        if clean:
            mark_clean_shutdown(self.config.data_path)  # every log is flushed and closed
        self._data_lock.release()  # last: everything above may still write the directory
        log.info("stopped")
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    @property
    def _listener(self) -> Listener | None:
        """The first listener's accept loop (tests reach it), None before start."""
        return self._sockets[0] if self._sockets else None

    @property
    def stopping(self) -> bool:
        return self.node.stopping

    # services (handlers get them through the context) ------------------------------------

    def protocol_for(self, host: str, served: ServedListener | None = None) -> Connection | None:
        """The listener's admission, right after accept(): the Connection of a client at
        `host` on listener `served` (None: the first), holding its admission until the
        connection is lost, or None when refused (counted and logged by the limits; the
        listener resets the socket before anything is built for it)."""
        if self.stopping or self.limits.admit(host) is not None:
            return None
        if served is not None and served.spec.uses_tls:
            return TlsConnection(self, admitted_host=host, listener=served)
        return Connection(self, admitted_host=host, listener=served)

    def register(self, connection: Connection) -> bool:
        """A connection is made: serve it (False: refused; close it). The listener admitted
        it already; one made otherwise is admitted here (refusals counted and logged by
        the limits), so that every connection is admitted once, by the limits."""
        if self.stopping:
            return False
        if not connection.admitted:
            if self.limits.admit(connection.host) is not None:
                return False
            connection.admitted = True
        self.connections.add(connection)
        self.metrics.connections.set(len(self.connections))
        return True

    def unregister(self, connection: Connection) -> None:
        """A connection is lost (or its transport was never set up): release its
        admission, once."""
        self.connections.discard(connection)
        if connection.admitted:
            connection.admitted = False
            self.limits.release(connection.host)
        self.metrics.connections.set(len(self.connections))

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a background task, keeping a reference so it is not garbage-collected."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def allocate_producer_id(self) -> int:
        assert self._producer_ids is not None
        return self._producer_ids.next()

    def health(self) -> dict[str, object]:
        """/health: "ok" (HTTP 200) while serving with every log writable; otherwise
        (503) "unavailable" while starting or stopping, or "storage_failed" with the
        reason and the failing logs (storage/health.py)."""
        state: dict[str, object] = {
            "status": "ok" if self.ready and not self.stopping else "unavailable",
            "node_id": self.node.node_id,
            "cluster_id": self.node.cluster_id,
            "topics": len(self.topics.by_name),
            "connections": len(self.connections),
        }
        storage = self.committer.health
        if not storage.healthy:
            failures = storage.failures()
            first = failures[0]
            if state["status"] == "ok":
                state["status"] = "storage_failed"
            state["reason"] = f"{first.kind} failed for log {first.log}: {first.error}"
            state["failing_logs"] = len(failures)
            state["storage_failures"] = [
                {"kind": f.kind, "log": f.log, "error": f.error, "since_ms": f.since_ms}
                for f in failures[:HEALTH_FAILURES_LISTED]
            ]
        return state

    def refresh_gauges(self) -> None:
        self.metrics.queued_bytes.set(self.frame_budget.held_bytes)
        self.metrics.log_partitions.set(self.topics.partition_count())
        sizes = (
            (topic.name, sum(p.log.size_bytes for p in topic.partitions))
            for topic in self.topics.topics()
        )
        if self.metrics.name_labels:
            for name, size_bytes in sizes:
                self.metrics.log_size.labels(name).set(size_bytes)
        else:  # metrics_name_labels off: one series, every topic's bytes
            self.metrics.log_size.labels().set(sum(size for _, size in sizes))

    async def _retention_loop(self) -> None:
        interval = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            partitions = self.topics.local_partitions()
            try:
                deleted = apply_retention([p.log for p in partitions], int(time.time() * 1000))
            except OSError as e:
                log.error("retention failed", error=str(e))
                continue
            if deleted:
                for partition in partitions:
                    # Aborted-index entries below the new log start go with their data.
                    partition.producers.forget_below(partition.log.log_start_offset)
            if deleted:
                log.info("retention deleted segments", segments=deleted)


def _apply_fd_limits(config: Config) -> None:
    """Raise the descriptor limit and size the segment-file LRU (fd_limits.py), before
    any log is opened; say so, and warn when connections could take what logs need."""
    limits = apply_fd_limits(config.segment_files_open_max)
    log.info(
        "file descriptor limit",
        soft=limits.soft,
        hard=limits.hard,
        soft_at_start=limits.soft_before,
        segment_files_open_max=limits.segment_files_open_max,
    )
    if 0 <= limits.soft < config.connections_max + RESERVED_FDS:
        # Past the limit new connections wait in the backlog (listener.py), and the files
        # a flush opens for a moment may fail: the logs then fail until a restart.
        log.warning(
            "connections_max is above the file descriptor limit: connections can take "
            "every descriptor",
            fd_limit=limits.soft,
            connections_max=config.connections_max,
        )


class ProducerIdAllocator:
    """Producer ids unique across restarts: blocks of ids are reserved on disk before use."""

    BLOCK = 1000

    def __init__(self, path: Path, stride: int = 1, offset: int = 0) -> None:
        """`stride`, `offset`: serve --workers' worker `offset` of `stride` hands out the ids
        offset, offset + stride, ...: no two workers ever give out the same id."""
        self.path = path
        self._stride = stride
        self._offset = offset
        reserved = 0
        data = read_json_file(path)
        if data is not None:
            with state_file_fields(path):
                reserved = data["next_block_start"]
                if not isinstance(reserved, int) or reserved < 0:
                    raise ValueError(f"next_block_start must be an integer >= 0: {reserved!r}")
        self._next = reserved
        self._limit = reserved

    def next(self) -> int:
        if self._next >= self._limit:
            self._limit = self._next + self.BLOCK
            atomic_write(self.path, json.dumps({"next_block_start": self._limit}).encode())
        value = self._next
        self._next += 1
        return value * self._stride + self._offset


async def serve(config: Config) -> int:
    try:
        # A data directory another process holds: OSError; one whose files are not ours, or
        # disagree with its data: DataDirError (a StorageError); TLS files or PLAIN users
        # that cannot be used: TlsConfigError, PlainUsersError; OAUTHBEARER without PyJWT:
        # OAuthConfigError.
        server = Server(config)
    except (
        OSError,
        StorageError,
        TlsConfigError,
        PlainUsersError,
        OAuthConfigError,
    ) as e:  # (a ConfigError, e.g. an unreadable token file, goes to the CLI: exit 2)
        log.error("cannot start", error=str(e))
        return 1
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_log_loop_error)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(server.stop()))
    loop.add_signal_handler(signal.SIGHUP, server.reload)
    try:
        await server.start()
    except (OSError, StorageError, OAuthConfigError) as e:  # (a JWKS not fetched)
        log.error("cannot start", error=str(e))
        return 1
    await server.wait_stopped()
    return server.exit_code


def _log_loop_error(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """What escapes a callback or a transport as one JSON line, not asyncio's multi-line
    report (connections catch their own failures; this is the net behind them)."""
    exc = context.get("exception")
    log.error(
        "event loop error",
        message=context.get("message"),
        error=repr(exc) if exc is not None else None,
        exc_info=exc if isinstance(exc, BaseException) else None,
    )


def run(config: Config) -> int:
    setup_logging(config.log_level, config.log_repeat_window_ms)
    # Everything the server creates in data_dir is private to its user unless the setting
    # relaxes it (data_dir.py): one umask covers every file and directory, whoever opens it.
    os.umask(config.data_umask_bits)
    # The fsync worker thread needs the GIL back to report a flush; with Python's default
    # 5 ms switch interval a busy event loop keeps it waiting, which showed up directly in
    # the acks=all p99 (19.5 ms -> 9.2 ms at 91k msg/s with 0.5 ms). While it waits, every
    # GIL release of the loop (each uvloop callback) wakes it in vain: at 0.1 ms it asks
    # for the GIL sooner and those wakes are fewer (durable commits +1-5% in paired runs,
    # 6 pairs, against 0.5 ms).
    sys.setswitchinterval(config.thread_switch_interval_us / 1_000_000)
    # Every request allocates short-lived objects (requests, futures, closures); with the
    # default gen-0 threshold (700) the cyclic collector ran thousands of times a second
    # under load. Collect young objects less often, and old ones rarely.
    gc.set_threshold(50_000, 50, 100)
    try:
        import uvloop

        return uvloop.run(serve(config))
    except ImportError:  # pragma: no cover - uvloop is a dependency; fall back if absent
        return asyncio.run(serve(config))

"""The coordinators' shard logs served as Kafka's internal topics: `__consumer_offsets`
(the group coordinator's shards, partition p = shard p) and `__transaction_state` (the
transaction coordinator's), read-only.

Theory of operation. The shard logs already hold Kafka's record format (coordinator record
keys and values, TxnOffsetCommit batches and their markers), so a read-only partition view
over each shard's current log is all Fetch, ListOffsets, Metadata and DescribeConfigs need:
`InternalPartition.log` asks the runtime for the shard's log at every access (a reload
replaces it) through `ShardLogs`, the one narrow interface the runtime's shard families
(runtime/shard_family.py) implement; topics/ imports nothing of the runtime. The server
(server/app.py) joins the two.

Reads never touch the writer: they run on the event loop between its events, read
whole batches below the durable offset (fetch.py's high watermark and `_visible`), and take
no lock. The producer state a read_committed reader needs (open transactions, aborted ones)
is built lazily by the view from the durable batch headers, at most SCAN_BATCHES_MAX per
read, so a first read of a long log spreads its scan over several reads; while the scan is
behind, the offset it reached holds the last stable offset (a pseudo open transaction), so
read_committed readers never see past what was checked. The shard runner is not asked to
keep any of it: its hot path is unchanged.

Long polls on an internal partition park on its `waiters` like any partition's; the set
records the partition as watched, and `InternalTopics.wake` (told of every fsync round by
the server) wakes the watched ones whose durable offset moved.

Kafka creates an internal topic on the first FindCoordinator for its key type and lists it
from then on; here the shard logs always exist, and the topic is listed (and readable) once
FindCoordinator asked for it or one of its logs holds a record (which survives restarts as
Kafka's topic does).
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from groupcoord.protocol.batches import NO_PRODUCER_ID, InvalidBatch
from groupcoord.storage import PartitionLog, StorageError

from .producers import ProducerStates, _marker
from .registry import Partition, Topic

# Batch headers scanned for producer state per read (a few ms at most).
SCAN_BATCHES_MAX = 5_000
# The namespace of the internal topics' ids: uuid5(namespace, "<cluster id>/<name>"), the
# same across restarts of one data directory, as a Kafka topic's id is.
_ID_NAMESPACE = uuid.UUID("5f0c7d2e-8a8e-4c54-9a59-2f3a3b7c1e11")


class ShardLogs(Protocol):
    """What a family of coordinator shards offers the data plane."""

    @property
    def shard_count(self) -> int: ...

    def shard_log(self, index: int) -> PartitionLog | None:
        """Shard `index`'s log now; None while it is not open."""
        ...


class _Waiters(set[Any]):
    """A partition's long-poll waiters that also marks the partition as watched."""

    __slots__ = ("_partition", "_watched")

    def __init__(self, partition: InternalPartition, watched: set[InternalPartition]) -> None:
        super().__init__()
        self._partition = partition
        self._watched = watched

    def add(self, waiter: Any) -> None:
        super().add(waiter)
        partition = self._partition
        log = partition.log
        partition.durable_at_wait = -1 if log is None else log.durable_offset
        self._watched.add(partition)


class InternalPartition(Partition):
    """A read-only view of one shard log as a partition (see the module docstring)."""

    def __init__(
        self, topic: Topic, index: int, shards: ShardLogs, watched: set[InternalPartition]
    ) -> None:
        # Partition's dataclass __init__ is not called: `log` and `producers` are views.
        self.topic = topic
        self.index = index
        self.waiters = _Waiters(self, watched)
        self.durable_at_wait = -1
        self._shards = shards
        self._states = ProducerStates()
        self._scanned_log: PartitionLog | None = None
        self._scanned = 0  # the offset after the last batch scanned

    @property  # type: ignore[override]
    def log(self) -> PartitionLog | None:
        return self._shards.shard_log(self.index)

    @property  # type: ignore[override]
    def producers(self) -> ProducerStates:
        log = self.log
        if log is not None:
            self._catch_up(log)
        return self._states

    def _catch_up(self, log: PartitionLog) -> None:
        """Scan the durable batches not scanned yet (at most SCAN_BATCHES_MAX) into the
        producer state; a new log (a reload) or one whose start moved past the scan starts
        over."""
        if log is not self._scanned_log or log.log_start_offset > self._scanned:
            self._states = ProducerStates()
            self._scanned_log = log
            self._scanned = log.log_start_offset
        durable = log.durable_offset
        states = self._states
        states.open_txns.pop(NO_PRODUCER_ID, None)
        scanned = self._scanned
        if scanned < durable:
            budget = SCAN_BATCHES_MAX
            try:
                for header in log.batch_headers(scanned):
                    if header.base_offset >= durable or budget <= 0:
                        break
                    budget -= 1
                    if header.last_offset < scanned:
                        continue
                    if not header.is_control:
                        states.record(header, header.base_offset)
                    elif header.producer_id != NO_PRODUCER_ID:
                        marker = _marker(_read_batch(log, header.base_offset, header.size_bytes))
                        if marker is not None:
                            states.record_marker(header, header.base_offset, marker[1], marker[0])
                    scanned = header.last_offset + 1
            except (StorageError, InvalidBatch):
                pass  # damage: the scan stays before it, holding the last stable offset
            self._scanned = scanned
            # Markers scanned are durable: only open transactions hold the LSO.
            states.unstable.clear()
        if scanned < durable:
            # Not checked yet: held back from read_committed readers as an open transaction
            # would be (the last of open_txns, whose order is first-offset order).
            states.open_txns[NO_PRODUCER_ID] = scanned

    @property
    def high_watermark(self) -> int:
        log = self.log
        return -1 if log is None else log.durable_offset

    @property
    def last_stable_offset(self) -> int:
        log = self.log
        if log is None:
            return -1
        states = self.producers
        return states.last_stable_offset(log.durable_offset, log.log_start_offset)


def _read_batch(log: PartitionLog, offset: int, size_bytes: int) -> bytes | None:
    try:
        return log.read(offset, size_bytes)[:size_bytes]
    except StorageError:
        return None


class InternalTopic(Topic):
    """An internal topic over a family of shard logs; its `configs` are those Kafka gives
    it (DescribeConfigs answers them as topic overrides, as Kafka does)."""

    def __init__(
        self,
        name: str,
        topic_id: uuid.UUID,
        configs: dict[str, str],
        shards: ShardLogs,
        watched: set[InternalPartition],
    ) -> None:
        super().__init__(name, topic_id, configs)
        self.internal = True
        self.created = False
        self._shards = shards
        self.partitions = [
            InternalPartition(self, i, shards, watched) for i in range(shards.shard_count)
        ]

    def exists(self) -> bool:
        """Whether Kafka would have created the topic by now (module docstring)."""
        if not self.created:
            shards = self._shards
            for index in range(shards.shard_count):
                log = shards.shard_log(index)
                if log is not None and log.next_offset > 0:
                    self.created = True
                    break
        return self.created


class InternalTopics:
    """The server's internal topics and the long polls parked on them."""

    def __init__(self) -> None:
        self.topics: dict[str, InternalTopic] = {}
        self._watched: set[InternalPartition] = set()

    def add(
        self, name: str, cluster_id: str, configs: dict[str, str], shards: ShardLogs
    ) -> InternalTopic:
        topic_id = uuid.uuid5(_ID_NAMESPACE, f"{cluster_id}/{name}")
        topic = InternalTopic(name, topic_id, configs, shards, self._watched)
        self.topics[name] = topic
        return topic

    def wake(self, every: bool = False) -> None:
        """Wake the long polls of watched partitions whose durable offset moved (after a
        flush round: the shards' appends become durable in rounds); `every`: all of them
        (the server is stopping)."""
        watched = self._watched
        if not watched:
            return
        for partition in list(watched):
            waiters = partition.waiters
            if not waiters:
                watched.discard(partition)
                continue
            log = partition.log
            if every or log is None or log.durable_offset != partition.durable_at_wait:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
                waiters.clear()
                watched.discard(partition)


def offsets_topic_configs(segment_bytes: int) -> dict[str, str]:
    """Kafka's GroupCoordinator.groupMetadataTopicConfigs."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(segment_bytes),
    }


def transaction_state_topic_configs(segment_bytes: int) -> dict[str, str]:
    """Kafka's TransactionStateManager.transactionTopicConfigs (min.insync.replicas is the
    broker's here: one node)."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "segment.bytes": str(segment_bytes),
        "unclean.leader.election.enable": "false",
    }

"""serve --workers: transactions whose coordinator and partitions are on different workers.

Theory of operation. A transactional id's coordinator is the owner of its
`__transaction_state` shard, a partition's leader the owner of the partition, a group's
offsets the owner of its `__consumer_offsets` shard (ownership.py); any two may be
different workers. Between them go Kafka's own broker-to-broker requests, as between Kafka
brokers (topic_sync.py says why requests and not a local channel):

* a partition leader asks the transaction coordinator about a transactional batch
  (KIP-890: Produce, TxnOffsetCommit): `WorkerTxnGateway.verify_partitions` /
  `add_partitions` (transactions V2's, from a leader) answer from the local shard when
  this worker owns it, else send
  AddPartitionsToTxn v5 (VerifyOnly, or adding) to the owner, as Kafka's
  AddPartitionsToTxnManager does;
* the transaction coordinator completes a transaction: `WorkerMarkers` writes a marker
  locally for a partition (or an offsets shard) this worker owns, else sends
  WriteTxnMarkers v2 to the owner, as Kafka's TransactionMarkerChannelManager does; the
  router (txn_markers.py) retries what fails (the owner being restarted: NETWORK_EXCEPTION).

Everything else of the gateway is the local one's: a client's request reaching a worker
that does not own its shard gets NOT_COORDINATOR there, and the client looks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from groupcoord.protocol.api import ApiKey, build, request_types
from groupcoord.protocol.errors import ErrorCode

from ..ownership import OwnershipView
from ..runtime.partitioning import OFFSETS_TOPIC, shard_for
from ..topics.txn_markers import write_txn_marker
from .context import GroupContext
from .topic_sync import Peer, peer_request

TopicPartition = tuple[str, int]
ADD_PARTITIONS_VERSION = 5
WRITE_MARKERS_VERSION = 2
_UNREACHABLE = (OSError, TimeoutError, asyncio.IncompleteReadError)


def _grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for name, index in partitions:
        topics.setdefault(name, []).append(index)
    return topics


class WorkerTxnGateway:
    """The transaction gateway (runtime/txn_gateway.py) whose KIP-890 questions about a
    transactional id another worker coordinates go to that worker (module docstring)."""

    def __init__(
        self,
        local: Any,
        ownership: OwnershipView,
        shard_count: int,
        peer_of: Callable[[int], Peer],
    ) -> None:
        self._local = local
        self._ownership = ownership
        self._shards = shard_count
        self._peer_of = peer_of

    def __getattr__(self, name: str) -> Any:
        return getattr(self._local, name)

    def _owner(self, transactional_id: str) -> int | None:
        """The owner's node id, None when this worker owns the id's shard."""
        shard = shard_for(transactional_id, self._shards)
        return None if self._ownership.owns_shard(shard) else self._ownership.shard_owner(shard)

    async def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        read_at: float,
    ) -> Mapping[TopicPartition, ErrorCode] | ErrorCode:
        owner = self._owner(transactional_id)
        if owner is None:
            answer: Mapping[TopicPartition, ErrorCode] | ErrorCode
            answer = await self._local.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions, read_at
            )
            return answer
        return await self._ask(
            owner, transactional_id, producer_id, producer_epoch, partitions, True
        )

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        read_at: float,
        client_transaction_version: int = 0,
    ) -> ErrorCode:
        # A partition leader adds for transactions V2 (KIP-890 part 2); a client adding
        # (AddPartitionsToTxn v0-v3, AddOffsetsToTxn) asks its coordinator itself and gets
        # NOT_COORDINATOR from a worker that does not own its id, as from a Kafka broker.
        owner = self._owner(transactional_id) if client_transaction_version >= 2 else None
        if owner is None:
            error: ErrorCode = await self._local.add_partitions(
                transactional_id,
                producer_id,
                producer_epoch,
                partitions,
                read_at,
                client_transaction_version,
            )
            return error
        answer = await self._ask(
            owner, transactional_id, producer_id, producer_epoch, partitions, False
        )
        if isinstance(answer, ErrorCode):
            return answer
        return next((e for e in answer.values() if e is not ErrorCode.NONE), ErrorCode.NONE)

    async def _ask(
        self,
        owner: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        verify_only: bool,
    ) -> Mapping[TopicPartition, ErrorCode] | ErrorCode:
        """AddPartitionsToTxn v5 to the owner: its answer per partition, or one error
        (NETWORK_EXCEPTION when it cannot be reached: retriable for the producer)."""
        v = ADD_PARTITIONS_VERSION
        mod = request_types(ApiKey.ADD_PARTITIONS_TO_TXN, v)
        body = build(
            mod.AddPartitionsToTxnRequest,
            transactions=(
                build(
                    mod.AddPartitionsToTxnTransaction,
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    verify_only=verify_only,
                    topics=tuple(
                        build(mod.AddPartitionsToTxnTopic, name=name, partitions=tuple(indexes))
                        for name, indexes in _grouped(partitions).items()
                    ),
                ),
            ),
        )
        try:
            response = await peer_request(
                self._peer_of(owner), ApiKey.ADD_PARTITIONS_TO_TXN, v, body
            )
        except _UNREACHABLE:
            return ErrorCode.NETWORK_EXCEPTION
        if response.error_code:
            return ErrorCode(response.error_code)
        answer: dict[TopicPartition, ErrorCode] = {}
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for partition in topic.results_by_partition:
                    answer[(topic.name, partition.partition_index)] = ErrorCode(
                        partition.partition_error_code
                    )
        return answer


class WorkerMarkers:
    """The marker router's two doors (txn_markers.py's WriteMarker and CompleteOffsets)
    for serve --workers: local for what this worker owns, WriteTxnMarkers v2 to the owner
    otherwise (module docstring)."""

    def __init__(self, ctx: GroupContext, ownership: OwnershipView, peer_of: Callable[[int], Peer]):
        self._ctx = ctx
        self._ownership = ownership
        self._peer_of = peer_of

    async def write_marker(
        self,
        ctx: Any,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        transaction_version: int,
    ) -> ErrorCode:
        if self._ownership.owns_partition(topic, partition):
            return await write_txn_marker(
                ctx,
                topic,
                partition,
                producer_id,
                producer_epoch,
                coordinator_epoch,
                commit,
                transaction_version,
            )
        owner = self._ownership.partition_leader(topic, partition)
        return await self._send(
            owner,
            topic,
            partition,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit,
            transaction_version,
        )

    async def complete_offsets(
        self,
        shard: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        resumed: bool,
        transaction_version: int,
    ) -> ErrorCode:
        if self._ownership.owns_shard(shard):
            error: ErrorCode = await self._ctx.groups.complete_transaction(
                shard, producer_id, producer_epoch, commit, resumed, transaction_version
            )
            return error
        # The owner's group shard decides itself whether the producer's offsets are
        # pending (a resumed job's second marker finds none and changes nothing).
        owner = self._ownership.shard_owner(shard)
        return await self._send(
            owner, OFFSETS_TOPIC, shard, producer_id, producer_epoch, 0, commit, transaction_version
        )

    async def _send(
        self,
        owner: int,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        transaction_version: int,
    ) -> ErrorCode:
        v = WRITE_MARKERS_VERSION
        mod = request_types(ApiKey.WRITE_TXN_MARKERS, v)
        body = build(
            mod.WriteTxnMarkersRequest,
            markers=(
                build(
                    mod.WritableTxnMarker,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=commit,
                    topics=(
                        build(
                            mod.WritableTxnMarkerTopic, name=topic, partition_indexes=(partition,)
                        ),
                    ),
                    coordinator_epoch=coordinator_epoch,
                    transaction_version=transaction_version,
                ),
            ),
        )
        try:
            response = await peer_request(self._peer_of(owner), ApiKey.WRITE_TXN_MARKERS, v, body)
        except _UNREACHABLE:
            return ErrorCode.NETWORK_EXCEPTION
        for marker in response.markers:
            for result in marker.topics:
                for p in result.partitions:
                    return ErrorCode(p.error_code)
        return ErrorCode.UNKNOWN_SERVER_ERROR

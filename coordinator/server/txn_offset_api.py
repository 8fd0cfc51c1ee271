"""TxnOffsetCommit (API 28) v0-v5: from the kio request to the shard's message, through the
gateway, and the shard's answer back to the request's version.

The commit is the producer's: its offsets are written as a transactional batch of the
producer id and epoch and stay pending until the transaction's marker reaches the group's
shard (GroupCoordinatorGateway.complete_transaction). First, as Kafka's group coordinator
(KIP-890 part 1), the transaction coordinator is asked whether the group's offsets
partition is in the producer's transaction: v0-v4 only verify it, v5 adds it (Kafka's
AddPartitionsToTxnManager: DEFAULT_ERROR below v4, GENERIC_ERROR at v4, ADD_PARTITION
from v5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime import group_messages as gm
from ..runtime.partitioning import OFFSETS_TOPIC, shard_for
from ..runtime.pending import Pending
from .context import GroupContext
from .encoded_responses import NO_THROTTLE
from .txn_api import TRANSACTION_VERSION_2, txns

# Kafka's txnOffsetCommitRequestVersionToTransactionSupportedOperation: the client knows
# TRANSACTION_ABORTABLE from v4; from v5 the verification adds the partition (KIP-890).
_GENERIC_ERROR_SINCE = 4
_ADDS_PARTITION_SINCE = 5


def handle_txn_offset_commit(ctx: GroupContext, request: Request) -> Any:
    """TxnOffsetCommit v0-v5. Emits OffsetCommit records in the producer's transactional
    batch for accepted partitions. Errors: INVALID_GROUP_ID (null or empty group id);
    per partition UNKNOWN_TOPIC_OR_PARTITION (no such topic or partition, as Kafka's
    KafkaApis); the shard's (groups/txn_commit.py: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    FENCED_INSTANCE_ID, COORDINATOR_NOT_AVAILABLE, INVALID_PRODUCER_EPOCH,
    OFFSET_METADATA_TOO_LARGE); the verification's (_verify_in_transaction);
    COORDINATOR_LOAD_IN_PROGRESS (COORDINATOR_NOT_AVAILABLE below v2, as Kafka maps it)
    and NOT_COORDINATOR for the whole request."""
    body = request.body
    version = request.api_version
    registry = ctx.topics
    topics: list[gm.OffsetCommitTopic] = []
    invalid: list[tuple[str, int]] = []
    for t in body.topics:
        topic = registry.get(t.name)
        valid = []
        for p in t.partitions:
            if topic is None or not 0 <= p.partition_index < len(topic.partitions):
                invalid.append((t.name, p.partition_index))
            else:
                valid.append(
                    gm.new_commit_partition(
                        p.partition_index,
                        p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1),
                        p.committed_metadata,
                    )
                )
        if valid:
            topics.append(gm.new_commit_topic(t.name, valid, topic.topic_id if topic else None))

    def respond(results: list[tuple[str, int, ErrorCode]]) -> Any:
        merged: dict[str, list[tuple[int, ErrorCode]]] = {}
        for name, index, error in results + [
            (name, index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for name, index in invalid
        ]:
            merged.setdefault(name, []).append((index, error))
        m = response_types(ApiKey.TXN_OFFSET_COMMIT, version)
        return build(
            m.TxnOffsetCommitResponse,
            throttle_time=NO_THROTTLE,
            topics=tuple(
                build(
                    m.TxnOffsetCommitResponseTopic,
                    name=name,
                    partitions=tuple(
                        build(m.TxnOffsetCommitResponsePartition, partition_index=i, error_code=e)
                        for i, e in parts
                    ),
                )
                for name, parts in merged.items()
            ),
        )

    def failed(error: ErrorCode) -> Any:
        if version < 2 and error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        return respond([(t.name, p.index, error) for t in topics for p in t.partitions])

    if not body.group_id:
        return failed(ErrorCode.INVALID_GROUP_ID)
    if not topics:
        return respond([])
    commit = gm.TxnOffsetCommitRequest(
        transactional_id=body.transactional_id,
        group_id=body.group_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        generation_id=getattr(body, "generation_id", -1),
        member_id=getattr(body, "member_id", ""),
        group_instance_id=getattr(body, "group_instance_id", None),
        version=version,
        topics=topics,
    )
    return _verified_commit(ctx, commit, respond, failed)


async def _verified_commit(
    ctx: GroupContext,
    commit: gm.TxnOffsetCommitRequest,
    respond: Callable[[list[tuple[str, int, ErrorCode]]], Any],
    failed: Callable[[ErrorCode], Any],
) -> Any:
    read_at = ctx.read_at
    error = await _verify_in_transaction(ctx, commit, read_at)
    if error is not ErrorCode.NONE:
        return failed(error)
    answer = ctx.groups.txn_commit_offsets(
        commit,
        read_at,
        lambda answer: respond(
            [(t.name, p.index, p.error) for t in answer.topics for p in t.partitions]
        ),
        failed,
    )
    return await answer if isinstance(answer, Pending) else answer


async def _verify_in_transaction(
    ctx: GroupContext, commit: gm.TxnOffsetCommitRequest, read_at: float
) -> ErrorCode:
    """The group's offsets partition is in the producer's transaction (v5: added to it, as
    AddPartitionsToTxn v5 from a broker does). Errors as Kafka's AddPartitionsToTxnManager
    maps them: INVALID_PRODUCER_EPOCH (fenced: another epoch), INVALID_PRODUCER_ID_MAPPING,
    CONCURRENT_TRANSACTIONS; a partition not in the transaction INVALID_TXN_STATE below v4,
    TRANSACTION_ABORTABLE at v4."""
    partition = (OFFSETS_TOPIC, shard_for(commit.group_id, ctx.settings.offsets_partitions))
    gateway = txns(ctx)
    txn_id, producer_id, epoch = commit.transactional_id, commit.producer_id, commit.producer_epoch
    if commit.version >= _ADDS_PARTITION_SINCE:
        error = await gateway.add_partitions(
            txn_id, producer_id, epoch, [partition], read_at, TRANSACTION_VERSION_2
        )
    else:
        verified = await gateway.verify_partitions(txn_id, producer_id, epoch, [partition], read_at)
        error = verified if isinstance(verified, ErrorCode) else verified[partition]
    if error is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error is ErrorCode.TRANSACTION_ABORTABLE and commit.version < _GENERIC_ERROR_SINCE:
        return ErrorCode.INVALID_TXN_STATE
    return error

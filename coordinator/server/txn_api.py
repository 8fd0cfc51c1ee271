"""The transaction coordinator's producer-facing APIs: InitProducerId with a transactional id
(v0-v5), AddPartitionsToTxn v0-v5, AddOffsetsToTxn v0-v4 and EndTxn v0-v5, from kio
requests through the transaction gateway (runtime/txn_gateway.py) to kio responses of the
request's version. Every answer waits for the records it depends on to be durable.

Errors every API shares: COORDINATOR_LOAD_IN_PROGRESS while the id's shard loads,
NOT_COORDINATOR when it failed (or a write before the answer failed). Versions before
KIP-588 (InitProducerId v<4, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn v<2) get
INVALID_PRODUCER_EPOCH where newer ones get PRODUCER_FENCED, as Kafka rewrites it.
"""

from __future__ import annotations

from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime.partitioning import OFFSETS_TOPIC, shard_for
from ..runtime.txn_gateway import TxnCoordinatorGateway
from ..runtime.txn_service import TRANSACTION_STATE_TOPIC
from ..security.acl_model import CLUSTER_NAME
from ..topics.access import (
    CLUSTER,
    CLUSTER_ACTION,
    GROUP,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    allowed,
)
from .context import GroupContext
from .encoded_responses import ms

# Kafka's internal topics: a client may not add them to a transaction itself (no WRITE
# ACL on them; __consumer_offsets goes through AddOffsetsToTxn).
_INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
# AddPartitionsToTxn v4+ (from partition leaders) is transaction version 2 (KIP-890).
_TV2 = 2


def fenced_for_version(error: ErrorCode, version: int, fenced_since: int) -> ErrorCode:
    """PRODUCER_FENCED as versions before `fenced_since` know it (INVALID_PRODUCER_EPOCH)."""
    if error is ErrorCode.PRODUCER_FENCED and version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def txns(ctx: GroupContext) -> TxnCoordinatorGateway:
    gateway: TxnCoordinatorGateway = ctx.txns
    return gateway


def txn_id_denied(ctx: GroupContext, api: ApiKey, transactional_id: str | None) -> bool:
    """With an authorizer: may the principal not WRITE the transactional id (Kafka's
    check of every transactional API; a null id is denied)."""
    if not ctx.authorizer.enabled:
        return False
    return transactional_id is None or not allowed(
        ctx, api, WRITE, TRANSACTIONAL_ID, transactional_id
    )


async def init_transactional_producer_id(ctx: GroupContext, request: Request) -> Any:
    """InitProducerId with a transactional id: emits Empty with a new producer id (or the
    epoch bumped, or KIP-360's recovery with the caller's producer id and epoch); an
    Ongoing transaction of an older instance is fenced and aborted first (the answer is
    then CONCURRENT_TRANSACTIONS, and the client retries). Errors: INVALID_REQUEST,
    INVALID_TRANSACTION_TIMEOUT (above transaction.max.timeout.ms, or not positive),
    PRODUCER_FENCED / INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS."""
    body = request.body
    version = request.api_version
    read_at = ctx.read_at
    if txn_id_denied(ctx, ApiKey.INIT_PRODUCER_ID, body.transactional_id):
        m = response_types(ApiKey.INIT_PRODUCER_ID, version)
        return build(
            m.InitProducerIdResponse,
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    answer = await txns(ctx).init_producer_id(
        body.transactional_id,
        ms(body.transaction_timeout),
        getattr(body, "producer_id", -1),
        getattr(body, "producer_epoch", -1),
        read_at,
    )
    m = response_types(ApiKey.INIT_PRODUCER_ID, version)
    return build(
        m.InitProducerIdResponse,
        error_code=fenced_for_version(answer.error, version, 4),
        producer_id=answer.producer_id,
        producer_epoch=answer.producer_epoch,
    )


async def handle_add_partitions_to_txn(ctx: GroupContext, request: Request) -> Any:
    """AddPartitionsToTxn. v0-v3 (clients): the partitions join the transaction (Ongoing
    written unless all are in it already); one error for every partition. Per partition
    first: an internal topic is TOPIC_AUTHORIZATION_FAILED, an unknown topic or partition
    UNKNOWN_TOPIC_OR_PARTITION, and then the coordinator is not asked: the other partitions
    get OPERATION_NOT_ATTEMPTED. v4+ (batched, from partition leaders): per transaction,
    VerifyOnly answers NONE for a partition in the transaction and TRANSACTION_ABORTABLE
    for one that is not; otherwise the partitions are added (transaction version 2).
    Coordinator errors: INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED /
    INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS. With an authorizer (Kafka's): v0-v3
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition without WRITE on the id, a
    topic without WRITE as an internal one (TOPIC_AUTHORIZATION_FAILED, the others
    OPERATION_NOT_ATTEMPTED); v4+ CLUSTER_AUTHORIZATION_FAILED without CLUSTER_ACTION."""
    body = request.body
    version = request.api_version
    read_at = ctx.read_at
    m = response_types(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    if version < 4:
        topics = [(t.name, list(t.partitions)) for t in body.v3_and_below_topics]
        errors = await _add_for_client(
            ctx,
            body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id,
            body.v3_and_below_producer_epoch,
            topics,
            version,
            read_at,
        )
        return build(
            m.AddPartitionsToTxnResponse,
            results_by_topic_v3_and_below=_topic_results(m, topics, errors),
        )
    if ctx.authorizer.enabled and not allowed(
        ctx, ApiKey.ADD_PARTITIONS_TO_TXN, CLUSTER_ACTION, CLUSTER, CLUSTER_NAME
    ):
        # v4+ is broker-to-broker: Kafka's CLUSTER_ACTION on the cluster, whole request.
        return build(
            m.AddPartitionsToTxnResponse,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            results_by_transaction=(),
        )
    results = []
    for txn in body.transactions:
        topics = [(t.name, list(t.partitions)) for t in txn.topics]
        partitions = [(name, p) for name, indexes in topics for p in indexes]
        if txn.verify_only:
            verified = await txns(ctx).verify_partitions(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions, read_at
            )
            errors = (
                dict.fromkeys(partitions, verified)
                if isinstance(verified, ErrorCode)
                else dict(verified)
            )
        else:
            error = await txns(ctx).add_partitions(
                txn.transactional_id,
                txn.producer_id,
                txn.producer_epoch,
                partitions,
                read_at,
                _TV2,
            )
            errors = dict.fromkeys(partitions, error)
        results.append(
            build(
                m.AddPartitionsToTxnResult,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(m, topics, errors),
            )
        )
    return build(
        m.AddPartitionsToTxnResponse,
        error_code=ErrorCode.NONE,
        results_by_transaction=tuple(results),
    )


async def _add_for_client(
    ctx: GroupContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: list[tuple[str, list[int]]],
    version: int,
    read_at: float,
) -> dict[tuple[str, int], ErrorCode]:
    partitions = [(name, p) for name, indexes in topics for p in indexes]
    if txn_id_denied(ctx, ApiKey.ADD_PARTITIONS_TO_TXN, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    unwritable: set[str] = set()
    if ctx.authorizer.enabled:  # Kafka's: WRITE on each topic (internal ones never)
        unwritable = {
            name
            for name, _ in topics
            if name not in _INTERNAL_TOPICS
            and not allowed(ctx, ApiKey.ADD_PARTITIONS_TO_TXN, WRITE, TOPIC, name)
        }
    errors: dict[tuple[str, int], ErrorCode] = {}
    for name, index in partitions:
        topic = ctx.topics.get(name)
        if name in _INTERNAL_TOPICS or name in unwritable:
            errors[(name, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic is None or not 0 <= index < len(topic.partitions):
            errors[(name, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if errors:
        return {tp: errors.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}
    error = await txns(ctx).add_partitions(
        transactional_id, producer_id, producer_epoch, partitions, read_at
    )
    return dict.fromkeys(partitions, fenced_for_version(error, version, 2))


def _topic_results(
    m: Any, topics: list[tuple[str, list[int]]], errors: dict[tuple[str, int], ErrorCode]
) -> tuple[Any, ...]:
    return tuple(
        build(
            m.AddPartitionsToTxnTopicResult,
            name=name,
            results_by_partition=tuple(
                build(
                    m.AddPartitionsToTxnPartitionResult,
                    partition_index=p,
                    partition_error_code=errors[(name, p)],
                )
                for p in indexes
            ),
        )
        for name, indexes in topics
    )


async def handle_add_offsets_to_txn(ctx: GroupContext, request: Request) -> Any:
    """AddOffsetsToTxn: the group's offsets partition (__consumer_offsets,
    abs(hash(group id)) % the group shard count) joins the transaction, as an
    AddPartitionsToTxn of it; the group is not checked. Errors: AddPartitionsToTxn's."""
    body = request.body
    version = request.api_version
    read_at = ctx.read_at
    m = response_types(ApiKey.ADD_OFFSETS_TO_TXN, version)
    if ctx.authorizer.enabled:
        # Kafka's: WRITE on the transactional id, then READ on the group.
        if txn_id_denied(ctx, ApiKey.ADD_OFFSETS_TO_TXN, body.transactional_id):
            return build(
                m.AddOffsetsToTxnResponse,
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            )
        if not allowed(ctx, ApiKey.ADD_OFFSETS_TO_TXN, READ, GROUP, body.group_id):
            return build(m.AddOffsetsToTxnResponse, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    partition = (OFFSETS_TOPIC, shard_for(body.group_id, ctx.settings.offsets_partitions))
    error = await txns(ctx).add_partitions(
        body.transactional_id, body.producer_id, body.producer_epoch, [partition], read_at
    )
    return build(m.AddOffsetsToTxnResponse, error_code=fenced_for_version(error, version, 2))


async def handle_end_txn(ctx: GroupContext, request: Request) -> Any:
    """EndTxn. v0-v4 (transaction version 1): PrepareCommit/PrepareAbort is written and,
    once durable, NONE is answered; the marker router then writes the markers and
    CompleteCommit/CompleteAbort. A retry of a completed end answers NONE. v5 (transaction
    version 2, as Kafka decides it: by the request's version): the end bumps the epoch,
    the markers carry the bumped epoch, and the answer holds the producer id and epoch the
    client continues with (a new id at epoch 0 once the epoch is exhausted); an abort with
    no transaction is an empty abort (TxnShard.end_transaction_v2). Errors:
    INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED / INVALID_PRODUCER_EPOCH,
    CONCURRENT_TRANSACTIONS (the same end still completing), INVALID_TXN_STATE."""
    body = request.body
    version = request.api_version
    read_at = ctx.read_at
    m = response_types(ApiKey.END_TXN, version)
    if txn_id_denied(ctx, ApiKey.END_TXN, body.transactional_id):
        return build(
            m.EndTxnResponse,
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    if version >= 5:
        answer = await txns(ctx).end_transaction_v2(
            body.transactional_id, body.producer_id, body.producer_epoch, body.committed, read_at
        )
        return build(
            m.EndTxnResponse,
            error_code=answer.error,
            producer_id=answer.producer_id,
            producer_epoch=answer.producer_epoch,
        )
    error = await txns(ctx).end_transaction(
        body.transactional_id, body.producer_id, body.producer_epoch, body.committed, read_at
    )
    return build(
        m.EndTxnResponse,
        error_code=fenced_for_version(error, version, 2),
        producer_id=-1,
        producer_epoch=-1,
    )

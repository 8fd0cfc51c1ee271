"""TxnOffsetCommit (API 28) v0-v5: from the kio request to the shard's message, through the
gateway, and the shard's answer back to the request's version.

The commit is the producer's: its offsets are written as a transactional batch of the
producer id and epoch and stay pending until the transaction's marker reaches the group's
shard (GroupCoordinatorGateway.complete_transaction). First the transaction coordinator is
asked about the group's offsets partition, as Kafka's broker asks it (KIP-890): v5+
(transactions V2) adds it to the transaction, older versions verify that it is in it (with
transaction_partition_verification_enable); a refusal fails the whole request. As Kafka,
the coordinator is not asked when the producer has a transaction open at the request's
epoch in the group's shard already (an earlier TxnOffsetCommit of the same transaction).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime import group_messages as gm
from ..runtime.partitioning import OFFSETS_TOPIC, shard_for
from ..topics.access import GROUP, READ, TOPIC, allowed
from ..topics.txn_verification import ask_coordinator, producer_error
from .context import GroupContext
from .encoded_responses import NO_THROTTLE
from .txn_api import txn_id_denied

# TxnOffsetCommit v5+ is transactions V2: the offsets partition is added implicitly.
_TV2_TXN_OFFSET_COMMIT = 5
_OPERATION_ERRORS = {
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


def handle_txn_offset_commit(ctx: GroupContext, request: Request) -> Any:
    """TxnOffsetCommit v0-v5. Emits OffsetCommit records in the producer's transactional
    batch for accepted partitions. Errors: INVALID_GROUP_ID (null or empty group id);
    per partition UNKNOWN_TOPIC_OR_PARTITION (no such topic or partition, as Kafka's
    KafkaApis); the shard's (groups/txn_commit.py: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    FENCED_INSTANCE_ID, COORDINATOR_NOT_AVAILABLE, INVALID_PRODUCER_EPOCH,
    OFFSET_METADATA_TOO_LARGE); COORDINATOR_LOAD_IN_PROGRESS (COORDINATOR_NOT_AVAILABLE
    below v2, as Kafka maps it) and NOT_COORDINATOR for the whole request; the transaction
    coordinator's refusal of the offsets partition for the whole request:
    INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING, INVALID_TXN_STATE /
    TRANSACTION_ABORTABLE (v4+), CONCURRENT_TRANSACTIONS (v5), COORDINATOR_NOT_AVAILABLE.
    With an authorizer (Kafka's order): TRANSACTIONAL_ID_AUTHORIZATION_FAILED, then
    GROUP_AUTHORIZATION_FAILED, for every partition; TOPIC_AUTHORIZATION_FAILED per
    partition of a topic without READ."""
    body = request.body
    version = request.api_version
    registry = ctx.topics
    topics: list[gm.OffsetCommitTopic] = []
    # Refused here: (topic, partition, error).
    invalid: list[tuple[str, int, ErrorCode]] = []
    unreadable: set[str] = set()
    if ctx.authorizer.enabled:
        whole, unreadable = _refused_commit(ctx, body)
        if whole is not None:  # every partition, nothing written
            return _response(
                version,
                [(t.name, p.partition_index, whole) for t in body.topics for p in t.partitions],
            )
    for t in body.topics:
        topic = registry.get(t.name)
        valid = []
        for p in t.partitions:
            if t.name in unreadable:
                invalid.append((t.name, p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                invalid.append((t.name, p.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
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
        return _response(version, results + invalid)

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

    def write() -> Any:
        return ctx.groups.txn_commit_offsets(
            commit,
            ctx.read_at,
            lambda answer: respond(
                [(t.name, p.index, p.error) for t in answer.topics for p in t.partitions]
            ),
            failed,
        )

    tv2 = version >= _TV2_TXN_OFFSET_COMMIT
    if (
        ctx.txns is None
        or not (tv2 or ctx.settings.transaction_partition_verification_enable)
        or ctx.groups.transaction_ongoing(body.group_id, body.producer_id, body.producer_epoch)
    ):
        # The last test as Kafka's: the offsets partition holds the producer's transaction
        # at this epoch already (an earlier TxnOffsetCommit of it), so it is in the
        # transaction: not asked again (the sentinel verification guard).
        return write()
    return _verified_then(ctx, body, version, tv2, write, failed)


def _response(version: int, results: list[tuple[str, int, ErrorCode]]) -> Any:
    """The TxnOffsetCommitResponse of `version` for [(topic, partition, error)]."""
    merged: dict[str, list[tuple[int, ErrorCode]]] = {}
    for name, index, error in results:
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


def _refused_commit(ctx: GroupContext, body: Any) -> tuple[ErrorCode | None, set[str]]:
    """Kafka's checks of a TxnOffsetCommit: WRITE on the transactional id, then READ on
    the group (either refuses the whole request), then READ on each topic (the topics
    refused)."""
    api = ApiKey.TXN_OFFSET_COMMIT
    if txn_id_denied(ctx, api, body.transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, set()
    if not allowed(ctx, api, READ, GROUP, body.group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, set()
    return None, {
        n
        for n in dict.fromkeys(t.name for t in body.topics)
        if not allowed(ctx, api, READ, TOPIC, n)
    }


async def _verified_then(
    ctx: GroupContext,
    body: Any,
    version: int,
    tv2: bool,
    write: Callable[[], Any],
    failed: Callable[[ErrorCode], Any],
) -> Any:
    """KIP-890 for the group's offsets partition (txn_verification.py): v5+ adds it to the
    transaction, older versions verify it is in it; the commit is written only then."""
    partition = (OFFSETS_TOPIC, shard_for(body.group_id, ctx.settings.offsets_partitions))
    answers = await ask_coordinator(
        ctx.txns,
        body.transactional_id,
        body.producer_id,
        body.producer_epoch,
        [partition],
        tv2,
        ctx.read_at,
    )
    error = producer_error(answers[partition], tv2, version >= 4)
    if error is not ErrorCode.NONE:
        # As Kafka's CoordinatorOperationExceptionHelper maps a failed verification.
        return failed(_OPERATION_ERRORS.get(error, error))
    answer = write()
    if hasattr(answer, "__await__"):
        return await answer
    return answer

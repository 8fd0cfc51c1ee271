"""TxnOffsetCommit (API 28) in the shard: validation (KIP-447 and KIP-1251 fencing) and the
records it writes (Kafka's OffsetMetadataManager.commitTransactionalOffset).

Theory of operation. The request's OffsetCommit records go to the log in a transactional
batch of the producer (the runtime writes it: ShardRunner.call_transactional); replaying
them makes pending offsets (pending_offsets.py), committed by the transaction's COMMIT
marker. The group checks are OffsetCommit's with Kafka's `isTransactional = true`:

* a missing group: generation < 0 creates a simple group (the records' replay does),
  else ILLEGAL_GENERATION (v0-v5; v6's GROUP_ID_NOT_FOUND is not served);
* a classic group: Dead -> COORDINATOR_NOT_AVAILABLE; generation < 0 and Empty -> accepted;
  a generation >= 0, a member id or an instance id -> the member must exist
  (UNKNOWN_MEMBER_ID), the instance id must be the member's (FENCED_INSTANCE_ID) and the
  generation the group's (ILLEGAL_GENERATION); no member information at all (pre-KIP-447
  clients, v0-v2) -> accepted even in a group with members; no REBALANCE_IN_PROGRESS;
* a consumer group (KIP-848): epoch < 0 and no members -> accepted; epoch -1, empty member
  id and no instance id -> accepted even with members; an unknown member ->
  UNKNOWN_MEMBER_ID; otherwise the KIP-1251 check per partition (consumer/fencing.py:
  accepted iff assignment epoch <= client epoch <= member epoch), whose STALE_MEMBER_EPOCH
  is answered ILLEGAL_GENERATION (TxnOffsetCommit v0-v5 know no other).

Any of those errors fails the whole request: every partition carries it and nothing is
written (a mix of valid and invalid partitions writes nothing). Per partition, metadata
over offset_metadata_max_bytes is OFFSET_METADATA_TOO_LARGE. A producer epoch older than
the last one this shard saw of the producer: INVALID_PRODUCER_EPOCH (the log layer's check
in Kafka).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from groupcoord.protocol.errors import ErrorCode

from .classic.group import ClassicGroup, GroupState
from .consumer.fencing import validate_offset_commit
from .consumer.group import ConsumerGroup
from .offset_messages import (
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetCommitTopic,
)
from .offsets import (
    ZERO_UUID,
    OffsetManager,
    _commit_error_response,
    commit_records,
)
from .result import Reply, Result

if TYPE_CHECKING:
    from .shard_view import ShardView


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequest:
    """One TxnOffsetCommit, version-independent (v0-v2 carry no member information:
    generation -1, member id "", no instance id)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    version: int
    topics: list[OffsetCommitTopic] = field(default_factory=list)


def txn_commit_offsets(
    shard: ShardView,
    offsets: OffsetManager,
    request: TxnOffsetCommitRequest,
    reply: Reply,
    now_ms: int,
) -> Result:
    """TxnOffsetCommit: replies with an OffsetCommitResponse (per partition errors); the
    Result's records are the OffsetCommit records the runtime writes as the producer's
    transactional batch. Errors: see the module docstring."""
    result = Result()
    if offsets.pending.fenced(request.producer_id, request.producer_epoch):
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    else:
        consumer_group = shard.consumer_groups.get(request.group_id)
        if consumer_group is not None:
            error = _validate_consumer(consumer_group, request)
        else:
            error = _validate_classic(shard, shard.groups.get(request.group_id), request)
    if error is not ErrorCode.NONE:
        result.reply(reply, _commit_error_response(request, error))  # type: ignore[arg-type]
        return result
    topics = commit_records(
        request.group_id,
        request.topics,
        shard.config.offset_metadata_max_bytes,
        now_ms,
        -1,
        result.records,
    )
    offsets.commits += len(result.records)
    result.reply(reply, OffsetCommitResponse(topics))
    return result


def _validate_classic(
    shard: ShardView, group: ClassicGroup | None, request: TxnOffsetCommitRequest
) -> ErrorCode:
    generation = request.generation_id
    if group is None:
        if generation < 0:
            # A simple group; replay of the records creates it.
            if shard.groups_full() is not None:
                return ErrorCode.GROUP_MAX_SIZE_REACHED
            return ErrorCode.NONE
        return ErrorCode.ILLEGAL_GENERATION
    if group.state is GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.state is GroupState.EMPTY:
        return ErrorCode.NONE
    if generation >= 0 or request.member_id != "" or request.group_instance_id is not None:
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE


def _validate_consumer(group: ConsumerGroup, request: TxnOffsetCommitRequest) -> ErrorCode:
    epoch = request.generation_id
    if epoch < 0 and group.is_empty():
        return ErrorCode.NONE
    if epoch == -1 and request.member_id == "" and request.group_instance_id is None:
        return ErrorCode.NONE
    member = group.member(request.member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    classic_member = group.metadata[request.member_id].classic_member_metadata is not None
    partitions = (
        (topic.topic_id or ZERO_UUID, p.index) for topic in request.topics for p in topic.partitions
    )
    error, _ = validate_offset_commit(member, epoch, partitions, classic_member)
    if error is ErrorCode.STALE_MEMBER_EPOCH:
        return ErrorCode.ILLEGAL_GENERATION  # TxnOffsetCommit v0-v5 (KIP-1319 keeps it for v6)
    return error


__all__ = ["OffsetCommitPartition", "TxnOffsetCommitRequest", "txn_commit_offsets"]

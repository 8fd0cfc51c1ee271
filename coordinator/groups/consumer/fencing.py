"""Offset-commit fencing for members of consumer groups, relaxed by KIP-1251 assignment
epochs (Kafka trunk 4.3, ``ConsumerGroup.validateOffsetCommit`` and its
``createAssignmentEpochValidator``).

Theory of operation. A commit carries the epoch the client last heard. Equal to the
member's epoch: accepted, whatever the partitions (the per-partition check is skipped
entirely). Newer than the member's: the client is ahead of the coordinator, rejected.
Older: the member has moved on (a rebalance happened since), but a commit for a partition
the member still holds, which it obtained no later than the client's epoch, is legitimate:
the client owned it at that epoch and nobody else can have it since. So each committed
partition is looked up in the assigned partitions, then in those pending revocation, and
accepted iff ``assignment_epoch <= client_epoch``. Net rule: accept iff
``assignment_epoch <= client_epoch <= member_epoch``.

Any rejected partition fails the whole request: the caller gives every partition the
error and writes nothing. Members that use the classic protocol inside a consumer group
get ILLEGAL_GENERATION instead of STALE_MEMBER_EPOCH (classic clients know no other).
Member lookup, admin commits, the OffsetCommit version check and classic *groups* are
the caller's business; this is only the epoch part.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from groupcoord.coordinator.groups.consumer.member import ZERO_UUID, ConsumerGroupMember
from groupcoord.protocol.errors import ErrorCode

__all__ = [
    "check_partition",
    "validate_offset_commit",
]

Verdict = tuple[ErrorCode, str | None]

_OK: Verdict = (ErrorCode.NONE, None)


def _stale(classic_protocol_member: bool) -> ErrorCode:
    return ErrorCode.ILLEGAL_GENERATION if classic_protocol_member else ErrorCode.STALE_MEMBER_EPOCH


def check_partition(
    member: ConsumerGroupMember,
    client_epoch: int,
    topic_id: uuid.UUID,
    partition: int,
    topic_name: str,
    classic_protocol_member: bool = False,
) -> Verdict:
    """The per-partition check, for a client epoch older than the member's.

    A ZERO topic id (the topic could not be resolved) never matches an assignment.
    """
    epoch = None if topic_id == ZERO_UUID else member.assignment_epoch(topic_id, partition)
    if epoch is None:
        return (
            _stale(classic_protocol_member),
            f"Partition {topic_name}-{partition} is not assigned or pending revocation for member.",
        )
    if client_epoch < epoch:
        return (
            _stale(classic_protocol_member),
            f"Received member epoch {client_epoch} is older than assignment epoch {epoch} "
            f"for partition {topic_name}-{partition}.",
        )
    return _OK


def validate_offset_commit(
    member: ConsumerGroupMember,
    client_epoch: int,
    partitions: Iterable[tuple[uuid.UUID, int]],
    classic_protocol_member: bool = False,
    topic_name: Callable[[uuid.UUID], str] = str,
) -> Verdict:
    """(NONE, None) if the commit of ``partitions`` [(topic_id, partition)] by a client at
    ``client_epoch`` is accepted, else the request-wide error and its message (the first
    failing partition's, in request order). ``topic_name`` names topics in messages."""
    if client_epoch == member.member_epoch:
        return _OK
    if client_epoch > member.member_epoch:
        return (
            _stale(classic_protocol_member),
            f"Received member epoch {client_epoch} is newer than current member epoch "
            f"{member.member_epoch}.",
        )
    for topic_id, partition in partitions:
        verdict = check_partition(
            member,
            client_epoch,
            topic_id,
            partition,
            topic_name(topic_id),
            classic_protocol_member,
        )
        if verdict[0] is not ErrorCode.NONE:
            return verdict
    return _OK

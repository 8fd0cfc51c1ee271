"""A consumer-group (KIP-848) member as reconciliation sees it: epochs, state, partitions.

Theory of operation. A member's *current* assignment is what the coordinator lets it use
now; it is persisted as one ``ConsumerGroupCurrentMemberAssignment`` record and rebuilt from
it on load. Partitions are kept as ``{topic_id: {partition: assignment_epoch}}``: the
assignment epoch (KIP-1251) is the member epoch at which the member obtained the partition,
and is what relaxed offset-commit fencing compares a stale client epoch with (fencing.py).

``ConsumerGroupMember`` is an immutable snapshot (Kafka's ConsumerGroupMember is too):
reconciliation returns a new one, or the very same object when nothing changes, so a
caller can tell "no record to write" with ``is``. Its partition maps are private copies
with empty topics dropped, so two snapshots holding the same partitions compare equal;
callers must treat them as read-only.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TypeAlias

from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentValue,
    TopicPartitionsWithEpochs,
)

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "PartitionEpochs",
    "ConsumerGroupMember",
    "MemberState",
    "ZERO_UUID",
    "partitions_from_record",
    "partitions_to_record",
]

ZERO_UUID = uuid.UUID(int=0)

# Heartbeat epochs with a meaning (ConsumerGroupHeartbeatRequest).
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# {topic_id: {partition: assignment_epoch}}
PartitionEpochs: TypeAlias = Mapping[uuid.UUID, Mapping[int, int]]


class MemberState(IntEnum):
    """Kafka's org.apache.kafka.coordinator.group.modern.MemberState (the record's int8)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127  # a state written by a newer coordinator; the member gets fenced

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        """As Kafka's ``MemberState.fromValue``: an unknown value is UNKNOWN, not an error,
        so a coordinator downgraded under a newer state can still load the group."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


def _normalize(partitions: PartitionEpochs) -> dict[uuid.UUID, dict[int, int]]:
    return {topic: dict(epochs) for topic, epochs in partitions.items() if epochs}


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    member_epoch: int = 0
    # -1 for a new member, as in Kafka's ConsumerGroupMember.Builder.
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned_partitions: PartitionEpochs = field(default_factory=dict)
    partitions_pending_revocation: PartitionEpochs = field(default_factory=dict)
    rebalance_timeout_ms: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", MemberState.from_value(int(self.state)))
        object.__setattr__(self, "assigned_partitions", _normalize(self.assigned_partitions))
        object.__setattr__(
            self, "partitions_pending_revocation", _normalize(self.partitions_pending_revocation)
        )

    # ---------------------------------------------------------------- derived views

    def update_member_epoch(self, epoch: int) -> ConsumerGroupMember:
        """Kafka's Builder.updateMemberEpoch: the current epoch becomes the previous one."""
        return dataclasses.replace(
            self, member_epoch=epoch, previous_member_epoch=self.member_epoch
        )

    def is_reconciled_to(self, target_assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_assignment_epoch

    def assignment_epoch(self, topic_id: uuid.UUID, partition: int) -> int | None:
        """The partition's assignment epoch, looked up in the assigned partitions, then in
        those pending revocation; None if the member holds neither."""
        epoch = self.assigned_partitions.get(topic_id, {}).get(partition)
        if epoch is None:
            epoch = self.partitions_pending_revocation.get(topic_id, {}).get(partition)
        return epoch

    def owned_partitions(self) -> set[tuple[uuid.UUID, int]]:
        """Every partition the coordinator counts as this member's: assigned or still
        pending revocation (the partition-epoch map covers both)."""
        return {
            (topic, p)
            for source in (self.assigned_partitions, self.partitions_pending_revocation)
            for topic, epochs in source.items()
            for p in epochs
        }

    def assigned_topic_partitions(self) -> list[tuple[uuid.UUID, list[int]]]:
        """The assigned partitions as a heartbeat response carries them (sorted)."""
        return [
            (topic, sorted(self.assigned_partitions[topic]))
            for topic in sorted(self.assigned_partitions, key=lambda t: t.int)
        ]

    # ---------------------------------------------------------------- records

    @classmethod
    def from_record(
        cls,
        member_id: str,
        value: ConsumerGroupCurrentMemberAssignmentValue,
        *,
        instance_id: str | None = None,
        rebalance_timeout_ms: int = -1,
    ) -> ConsumerGroupMember:
        """A member rebuilt from its CurrentMemberAssignment record (replay / load); the
        instance id and rebalance timeout live in the MemberMetadata record."""
        member = cls(member_id, instance_id=instance_id, rebalance_timeout_ms=rebalance_timeout_ms)
        return member.updated_with(value)

    def updated_with(self, value: ConsumerGroupCurrentMemberAssignmentValue) -> ConsumerGroupMember:
        """Kafka's Builder.updateWith(ConsumerGroupCurrentMemberAssignmentValue)."""
        default_epoch = max(value.member_epoch, 0)
        return dataclasses.replace(
            self,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState.from_value(value.state),
            assigned_partitions=partitions_from_record(value.assigned_partitions, default_epoch),
            partitions_pending_revocation=partitions_from_record(
                value.partitions_pending_revocation, default_epoch
            ),
        )

    def to_record(self) -> ConsumerGroupCurrentMemberAssignmentValue:
        """The ConsumerGroupCurrentMemberAssignment value; assignment epochs always set."""
        return ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=int(self.state),
            assigned_partitions=partitions_to_record(self.assigned_partitions),
            partitions_pending_revocation=partitions_to_record(self.partitions_pending_revocation),
        )


def partitions_from_record(
    topics: Iterable[TopicPartitionsWithEpochs], default_epoch: int
) -> dict[uuid.UUID, dict[int, int]]:
    """``{topic_id: {partition: assignment_epoch}}`` from a record's TopicPartitions.

    A topic without ``AssignmentEpochs`` (written before KIP-1251), or with as many epochs
    as partitions not, gives every partition ``default_epoch`` (Kafka: max(member epoch, 0);
    it also logs the mismatch, which a pure module leaves to its caller). A topic repeated
    in one record is merged, as Kafka's map-building does.
    """
    out: dict[uuid.UUID, dict[int, int]] = {}
    for tp in topics:
        epochs = tp.assignment_epochs
        target = out.setdefault(tp.topic_id, {})
        if epochs is None or len(epochs) != len(tp.partitions):
            for p in tp.partitions:
                target[p] = default_epoch
        else:
            target.update(zip(tp.partitions, epochs, strict=True))
    return {topic: parts for topic, parts in out.items() if parts}


def partitions_to_record(partitions: PartitionEpochs) -> tuple[TopicPartitionsWithEpochs, ...]:
    """Record TopicPartitions, topics by id and partitions ascending, epochs aligned."""
    out = []
    for topic in sorted(partitions, key=lambda t: t.int):
        epochs = partitions[topic]
        if not epochs:
            continue
        ordered = sorted(epochs)
        out.append(
            TopicPartitionsWithEpochs(
                topic_id=topic,
                partitions=tuple(ordered),
                assignment_epochs=tuple(epochs[p] for p in ordered),
            )
        )
    return tuple(out)

"""Consumer groups (KIP-848 consumer rebalance protocol): member snapshots, the
reconciliation state machine, KIP-1251 offset-commit fencing, the group as its records
build it and the heartbeat pipeline (manager.py). Pure code: no asyncio, clock or I/O."""

from groupcoord.coordinator.groups.consumer.fencing import check_partition, validate_offset_commit
from groupcoord.coordinator.groups.consumer.member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ZERO_UUID,
    ConsumerGroupMember,
    MemberState,
    PartitionEpochs,
    partitions_from_record,
    partitions_to_record,
)
from groupcoord.coordinator.groups.consumer.reconcile import (
    UNKNOWN_STATE_MESSAGE,
    FencedMemberEpoch,
    OwnedPartitions,
    PartitionEpochFn,
    compute_next_assignment,
    replace_static_member,
    reset_assignment_epochs,
    static_member_temporary_leave,
    subscribed_topic_ids,
)

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "UNKNOWN_STATE_MESSAGE",
    "ZERO_UUID",
    "ConsumerGroupMember",
    "FencedMemberEpoch",
    "MemberState",
    "OwnedPartitions",
    "PartitionEpochFn",
    "PartitionEpochs",
    "check_partition",
    "compute_next_assignment",
    "partitions_from_record",
    "partitions_to_record",
    "replace_static_member",
    "reset_assignment_epochs",
    "static_member_temporary_leave",
    "subscribed_topic_ids",
    "validate_offset_commit",
]

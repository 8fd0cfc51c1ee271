"""Coordinator record types: the record type numbers, the key and value dataclasses of
``__consumer_offsets`` (one per schema in ``schemas/``, fields by snake_case name in the
schema's order) and the codec's errors. The codec is in records.py (see its docstring)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, TypeAlias


class RecordType(IntEnum):
    """Record type numbers (the schemas' ``apiKey``), as in Kafka's CoordinatorRecordType."""

    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16


class RecordError(ValueError):
    """A coordinator record that cannot be decoded (or a value that cannot be encoded)."""


class UnknownRecordType(RecordError):
    """A record type this server does not handle; Kafka's loader warns and skips these."""

    def __init__(self, record_type: int) -> None:
        super().__init__(f"unknown coordinator record type {record_type}")
        self.record_type = record_type


class UnsupportedRecordVersion(RecordError):
    """A value version outside the schema's ``validVersions``."""


class MalformedRecord(RecordError):
    """Truncated, overlong or otherwise invalid record bytes."""


# --------------------------------------------------------------------------------------------
# Keys (version 0, never flexible)


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Types 1 and 0 (legacy, same layout); always written as type 1."""

    RECORD_TYPE: ClassVar[RecordType] = RecordType.OFFSET_COMMIT
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.GROUP_METADATA
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_PARTITION_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_MEMBER_METADATA
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION
    group_id: str
    regular_expression: str


# --------------------------------------------------------------------------------------------
# Values. Field order is the schema's; classes whose schema puts a defaulted field before a
# required one are keyword-only. Arrays are tuples. Defaults are the schema's.


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    """v0-v4 (flexible from v4). ``expire_timestamp`` exists only in v1, ``leader_epoch``
    from v3, ``topic_id`` (tagged, absent when None) from v4."""

    RECORD_TYPE: ClassVar[RecordType] = RecordType.OFFSET_COMMIT
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int
    expire_timestamp: int = -1
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadata:
    """A classic group member (GroupMetadataValue.MemberMetadata)."""

    member_id: str
    group_instance_id: str | None = None
    client_id: str
    client_host: str
    rebalance_timeout: int = -1
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    """v0-v4 (flexible from v4); Kafka trunk writes v3."""

    RECORD_TYPE: ClassVar[RecordType] = RecordType.GROUP_METADATA
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_METADATA
    epoch: int
    metadata_hash: int = 0  # tagged 0 (KIP-1101)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    racks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """Legacy (replaced by ConsumerGroupMetadataValue.metadata_hash); read and tombstoned only."""

    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_PARTITION_METADATA
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMemberMetadataValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_MEMBER_METADATA
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA
    assignment_epoch: int
    assignment_timestamp: int = 0  # tagged 0 (KIP-1263)


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """ConsumerGroupTargetAssignmentMemberValue.TopicPartition."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class TopicPartitionsWithEpochs:
    """ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions; ``assignment_epochs`` is
    the KIP-1251 tagged field (tag 0), aligned with ``partitions`` when present."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitionsWithEpochs, ...]
    partitions_pending_revocation: tuple[TopicPartitionsWithEpochs, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    RECORD_TYPE: ClassVar[RecordType] = RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION
    topics: tuple[str, ...]
    version: int
    timestamp: int


Key: TypeAlias = (
    OffsetCommitKey
    | GroupMetadataKey
    | ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)
Value: TypeAlias = (
    OffsetCommitValue
    | GroupMetadataValue
    | ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)

"""The offset manager's requests and responses (OffsetCommit, OffsetFetch, OffsetDelete,
DeleteGroups), version-independent: the protocol adapter (runtime/group_messages.py) maps
wire versions onto them. Constructors made with `fast_new` skip dataclass __init__ on the
commit path."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.frozen import fast_new


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    index: int
    offset: int
    leader_epoch: int = -1  # -1: absent (v<6 or not sent)
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitTopic:
    name: str  # v10: resolved from topic_id by the adapter
    partitions: list[OffsetCommitPartition]
    topic_id: uuid.UUID | None = None  # None or ZERO_UUID: unknown


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequest:
    group_id: str
    generation_id_or_member_epoch: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: int = -1  # only v2-v4 carry it
    version: int
    topics: list[OffsetCommitTopic] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PartitionResult:
    index: int
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class OffsetCommitTopicResult:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[PartitionResult]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    topics: list[OffsetCommitTopicResult]


# Positional constructors of the commit messages at plain-class speed (a frozen dataclass's
# __init__ costs ~4x): a durable commit builds six of them.
new_commit_partition = fast_new(OffsetCommitPartition)
new_commit_topic = fast_new(OffsetCommitTopic)
new_commit_request = fast_new(OffsetCommitRequest)
_new_partition_result = fast_new(PartitionResult)
_new_topic_result = fast_new(OffsetCommitTopicResult)
_new_commit_response = fast_new(OffsetCommitResponse)


@dataclass(frozen=True, slots=True)
class OffsetFetchTopic:
    name: str
    partitions: list[int]
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchRequest:
    """One group (the adapter splits v8+ batches). `topics` None = every committed offset."""

    group_id: str
    topics: list[OffsetFetchTopic] | None = None
    require_stable: bool = False
    member_id: str | None = None  # v9+, consumer groups only
    member_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetFetchPartition:
    index: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: ErrorCode = ErrorCode.NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchTopicResult:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[OffsetFetchPartition]


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    group_id: str
    topics: list[OffsetFetchTopicResult]
    error: ErrorCode = ErrorCode.NONE  # group-level (v8+) / top-level (v2-v7)


@dataclass(frozen=True, slots=True)
class OffsetDeleteTopicResult:
    name: str
    partitions: list[PartitionResult]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    error: ErrorCode
    topics: list[OffsetDeleteTopicResult]


@dataclass(frozen=True, slots=True)
class DeletableGroupResult:
    group_id: str
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: list[DeletableGroupResult]

"""The shard's request and response messages, as the gateway's callers build and read them:
re-exported from coordinator/groups/ so that the network layer (coordinator/server/) imports
nothing of groups/ itself. Version-independent plain data; the server maps wire versions."""

from __future__ import annotations

from ..groups.classic.messages import (
    DescribedGroup,
    DescribedMember,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMember,
    LeaveMemberResponse,
    ListedGroup,
    SyncGroupRequest,
    SyncGroupResponse,
)
from ..groups.classic.messages import HeartbeatRequest as ClassicHeartbeatRequest
from ..groups.classic.messages import HeartbeatResponse as ClassicHeartbeatResponse
from ..groups.consumer.messages import (
    DescribedConsumerGroup,
    DescribedConsumerMember,
    DescribedTopicPartitions,
)
from ..groups.consumer.messages import HeartbeatRequest as ConsumerHeartbeatRequest
from ..groups.consumer.messages import HeartbeatResponse as ConsumerHeartbeatResponse
from ..groups.offset_messages import (
    DeleteGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetDeleteResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    OffsetFetchTopicResult,
    new_commit_partition,
    new_commit_request,
    new_commit_topic,
)
from ..groups.txn_commit import TxnOffsetCommitRequest

__all__ = [
    "ClassicHeartbeatRequest",
    "ClassicHeartbeatResponse",
    "ConsumerHeartbeatRequest",
    "ConsumerHeartbeatResponse",
    "DeleteGroupsResponse",
    "DescribedConsumerGroup",
    "DescribedConsumerMember",
    "DescribedGroup",
    "DescribedMember",
    "DescribedTopicPartitions",
    "JoinGroupMember",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "LeaveMember",
    "LeaveMemberResponse",
    "ListedGroup",
    "OffsetCommitPartition",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetCommitTopic",
    "OffsetDeleteResponse",
    "OffsetFetchPartition",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetFetchTopic",
    "OffsetFetchTopicResult",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TxnOffsetCommitRequest",
    "new_commit_partition",
    "new_commit_request",
    "new_commit_topic",
]

"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) as the shard sees them:
version-independent, plain data (coordinator/server/consumer_group_api.py maps wire
versions)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from groupcoord.protocol.errors import ErrorCode

# [(topic id, partitions)], as the heartbeat carries owned partitions and assignments.
TopicPartitionList = list[tuple[uuid.UUID, list[int]]]


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None  # v1+
    server_assignor: str | None = None
    topic_partitions: TopicPartitionList | None = None
    api_version: int = 1
    client_id: str = ""
    client_host: str = ""
    # With an authorizer: may this member's principal DESCRIBE the topic. A regex refresh
    # scheduled by this heartbeat keeps only those topics (Kafka resolves a group's regexes
    # with the request context of the member whose heartbeat scheduled it). None: every
    # topic (no authorizer).
    topic_visible: Callable[[str], bool] | None = None

    def is_full(self) -> bool:
        """Kafka's "full request": what a client sends after it lost track of its state."""
        return (
            self.rebalance_timeout_ms != -1
            and (self.subscribed_topic_names is not None or self.subscribed_topic_regex is not None)
            and self.topic_partitions is not None
        )


@dataclass(slots=True)
class HeartbeatResponse:
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitionList | None = None  # None: unchanged, not sent


@dataclass
class DescribedTopicPartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: list[int]


@dataclass
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str  # "" for none, as Kafka's members describe it
    assignment: list[DescribedTopicPartitions]
    target_assignment: list[DescribedTopicPartitions]
    member_type: int = 1  # v1: 0 classic protocol, 1 consumer protocol


@dataclass
class DescribedConsumerGroup:
    group_id: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    group_state: str = ""
    # 0 in an error's answer: Kafka leaves the response's fields at their defaults.
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: list[DescribedConsumerMember] = field(default_factory=list)

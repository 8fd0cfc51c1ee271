"""A harness for consumer-group (KIP-848) shard tests: it plays the runtime as the classic
harness does (replays each Result's records into the shard, keeps every record in `log`,
captures replies) and holds a StaticTopicImage the test can change."""

from __future__ import annotations

import uuid
from typing import Any

from coordinator.groups.config import GroupConfig
from coordinator.groups.consumer.group import ConsumerGroup
from coordinator.groups.consumer.messages import HeartbeatRequest, HeartbeatResponse
from coordinator.groups.result import Record, Result
from coordinator.groups.shard import GroupShard
from coordinator.groups.testing import ManualTimer, SequentialIds
from coordinator.groups.topics import StaticTopicImage

GROUP = "fooup"
START_MS = 1_000_000


class Harness:
    def __init__(self, topics: dict[str, int] | None = None, **config: Any) -> None:
        settings: dict[str, Any] = {"consumer_reconciling_heartbeat_interval_ms": 0}
        settings.update(config)
        self.config = GroupConfig(**settings)
        # Time starts well after 0: an assignment timestamp of 0 means "never assigned".
        self.timer = ManualTimer(start_ms=START_MS)
        self.ids = SequentialIds()
        self.topics = StaticTopicImage()
        for name, partitions in (topics or {}).items():
            self.topics.add(name, partitions)
        self.shard = GroupShard(0, self.config, self.timer, self.ids, topics=self.topics)
        self.timer.on_result = self.apply
        self.log: list[Record] = []
        self.last = Result()

    def topic_id(self, name: str) -> uuid.UUID:
        tid = self.topics.topic_id(name)
        assert tid is not None
        return tid

    def apply(self, result: Result) -> None:
        for key, value in result.records:
            self.shard.replay(key, value, self.timer.now_ms)
        self.log.extend(result.records)
        self.last = result

    def heartbeat(self, **fields: Any) -> HeartbeatResponse:
        """One ConsumerGroupHeartbeat (v1 unless `api_version` says otherwise)."""
        fields.setdefault("group_id", GROUP)
        fields.setdefault("client_id", "client")
        fields.setdefault("client_host", "/127.0.0.1")
        replies: list[HeartbeatResponse] = []
        result = self.shard.consumer.heartbeat(
            HeartbeatRequest(**fields), replies.append, self.timer.now_ms
        )
        self.apply(result)
        for reply, response in result.replies:
            reply(response)
        assert len(replies) == 1
        return replies[0]

    def join(self, member_id: str, topics: list[str], **fields: Any) -> HeartbeatResponse:
        """A first (epoch 0) heartbeat subscribing to `topics`."""
        fields.setdefault("rebalance_timeout_ms", 5000)
        fields.setdefault("topic_partitions", [])
        return self.heartbeat(
            member_id=member_id, member_epoch=0, subscribed_topic_names=topics, **fields
        )

    def sleep(self, ms: int) -> Result:
        return self.timer.sleep(ms)

    def group(self, group_id: str = GROUP) -> ConsumerGroup:
        group = self.shard.consumer_group(group_id)
        assert group is not None
        return group

    def records_of_last(self) -> list[Record]:
        return list(self.last.records)

    def reloaded(self) -> GroupShard:
        """A fresh shard rebuilt by replaying `log` (what a restart loads)."""
        shard = GroupShard(0, self.config, ManualTimer(), SequentialIds(), topics=self.topics)
        for key, value in self.log:
            shard.replay(key, value, self.timer.now_ms)
        return shard


def assignment(response: HeartbeatResponse) -> dict[uuid.UUID, list[int]] | None:
    if response.assignment is None:
        return None
    return {topic: sorted(parts) for topic, parts in response.assignment}

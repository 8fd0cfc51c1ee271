"""The consumer-group (KIP-848) shard tests' harness: the shard test context
(shard_context.py) with the consumer conveniences (heartbeats with a client's defaults, the
group, scripted assignors), a well-behaved client, and `settle`."""

from __future__ import annotations

import uuid
from typing import Any

from groupcoord.coordinator.groups.assignors import Assignment, GroupSpec, TopicDescriber
from groupcoord.coordinator.groups.assignors.spec import PartitionAssignorError
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.consumer.group import ConsumerGroup
from groupcoord.coordinator.groups.consumer.messages import HeartbeatRequest, HeartbeatResponse
from tests.unit.shard_context import ShardContext

GROUP = "fooup"
START_MS = 1_000_000


class Harness(ShardContext):
    def __init__(self, topics: dict[str, int] | None = None, **config: Any) -> None:
        settings: dict[str, Any] = {"consumer_reconciling_heartbeat_interval_ms": 0}
        settings.update(config)
        # Time starts well after 0: an assignment timestamp of 0 means "never assigned".
        super().__init__(GroupConfig(**settings), topics=topics, start_ms=START_MS)

    def heartbeat(self, **fields: Any) -> HeartbeatResponse:
        """One ConsumerGroupHeartbeat (v1 unless `api_version` says otherwise)."""
        fields.setdefault("group_id", GROUP)
        fields.setdefault("client_id", "client")
        fields.setdefault("client_host", "/127.0.0.1")
        response: HeartbeatResponse = self.send_consumer_group_heartbeat(
            HeartbeatRequest(**fields)
        ).response
        return response

    def join(self, member_id: str, topics: list[str] | None, **fields: Any) -> HeartbeatResponse:
        """A first (epoch 0) heartbeat subscribing to `topics` (None: not said)."""
        fields.setdefault("rebalance_timeout_ms", 5000)
        fields.setdefault("topic_partitions", [])
        return self.heartbeat(
            member_id=member_id, member_epoch=0, subscribed_topic_names=topics, **fields
        )

    def group(self, group_id: str = GROUP) -> ConsumerGroup:
        group = self.shard.consumer_group(group_id)
        assert group is not None
        return group

    def script(self, name: str = "range") -> ScriptedAssignor:
        """Replace assignor `name` by a ScriptedAssignor (Kafka's MockPartitionAssignor)."""
        assignor = ScriptedAssignor(name)
        self.shard.consumer.assignors[name] = assignor
        return assignor


class ScriptedAssignor:
    """An assignor that returns what the test prepared (`layout`: member -> topic id ->
    partitions; members left out get nothing), or raises `error` if set. `calls` counts
    assignments, `last_spec` is the last GroupSpec it was given."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.layout: dict[str, dict[uuid.UUID, list[int]]] = {}
        self.error: str | None = None
        self.calls = 0
        self.last_spec: GroupSpec | None = None

    def assign(self, group: GroupSpec, topics: TopicDescriber) -> Assignment:
        self.calls += 1
        self.last_spec = group
        if self.error is not None:
            raise PartitionAssignorError(self.error)
        return {
            member_id: {t: frozenset(ps) for t, ps in self.layout.get(member_id, {}).items()}
            for member_id in group.members
        }


class Client:
    """A well-behaved consumer: heartbeats at the epoch it was last given and reports as
    owned the assignment of its last response that carried one (revoking what it lost)."""

    def __init__(self, h: Harness, member_id: str, instance_id: str | None = None) -> None:
        self.h = h
        self.member_id = member_id
        self.instance_id = instance_id
        self.epoch = 0
        self.owned: list[tuple[uuid.UUID, list[int]]] = []
        self.last = HeartbeatResponse()

    def _send(self, **fields: Any) -> HeartbeatResponse:
        if self.instance_id is not None:
            fields.setdefault("instance_id", self.instance_id)
        response = self.h.heartbeat(member_id=self.member_id, **fields)
        self.last = response
        if response.error_code == 0:
            self.epoch = response.member_epoch
            if response.assignment is not None:
                self.owned = [(t, list(ps)) for t, ps in response.assignment]
        return response

    def join(self, topics: list[str] | None, **fields: Any) -> HeartbeatResponse:
        fields.setdefault("rebalance_timeout_ms", 5000)
        self.owned = []
        return self._send(
            member_epoch=0, subscribed_topic_names=topics, topic_partitions=[], **fields
        )

    def ack(self, **fields: Any) -> HeartbeatResponse:
        """A heartbeat reporting what the client owns (it has revoked what it lost)."""
        fields.setdefault("topic_partitions", [(t, list(ps)) for t, ps in self.owned])
        return self._send(member_epoch=self.epoch, **fields)

    def poll(self, **fields: Any) -> HeartbeatResponse:
        """A heartbeat without TopicPartitions (null: unchanged)."""
        return self._send(member_epoch=self.epoch, **fields)

    def leave(self, epoch: int = -1) -> HeartbeatResponse:
        response = self._send(member_epoch=epoch)
        self.owned = []
        return response

    def owned_dict(self) -> dict[uuid.UUID, list[int]]:
        return {t: sorted(ps) for t, ps in self.owned if ps}


def settle(h: Harness, *clients: Client, rounds: int = 10, group_id: str = GROUP) -> None:
    """Acknowledging heartbeats from every client until the group is Stable."""
    for _ in range(rounds):
        for client in clients:
            response = client.ack()
            assert response.error_code == 0, response
        if h.group(group_id).state().value == "Stable":
            return
    raise AssertionError(f"group not stable after {rounds} rounds: {h.group(group_id).state()}")


def assignment(response: HeartbeatResponse) -> dict[uuid.UUID, list[int]] | None:
    if response.assignment is None:
        return None
    return {topic: sorted(parts) for topic, parts in response.assignment}

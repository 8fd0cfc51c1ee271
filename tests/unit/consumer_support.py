"""A harness for consumer-group (KIP-848) shard tests: it plays the runtime as the classic
harness does (replays each Result's records into the shard, keeps every record in `log`,
captures replies) and holds a StaticTopicImage the test can change."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from groupcoord.coordinator.groups.assignors import Assignment, GroupSpec, TopicDescriber
from groupcoord.coordinator.groups.assignors.spec import PartitionAssignorError
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.consumer.group import ConsumerGroup
from groupcoord.coordinator.groups.consumer.messages import HeartbeatRequest, HeartbeatResponse
from groupcoord.coordinator.groups.result import Record, Result
from groupcoord.coordinator.groups.shard import GroupShard
from groupcoord.coordinator.groups.testing import ManualTimer, SequentialIds
from groupcoord.coordinator.groups.topics import StaticTopicImage

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

    def join(self, member_id: str, topics: list[str] | None, **fields: Any) -> HeartbeatResponse:
        """A first (epoch 0) heartbeat subscribing to `topics` (None: not said)."""
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

    def reload(self) -> GroupShard:
        """Replace the shard by one rebuilt from `log` and loaded (timers re-armed from now
        on), as after a restart; scripted assignors are carried over."""
        assignors = self.shard.consumer.assignors
        self.timer = ManualTimer(start_ms=self.timer.now_ms)
        self.timer.on_result = self.apply
        self.shard = GroupShard(0, self.config, self.timer, self.ids, topics=self.topics)
        self.shard.consumer.assignors = assignors
        for key, value in self.log:
            self.shard.replay(key, value, self.timer.now_ms)
        self.shard.on_loaded(self.timer.now_ms)
        return self.shard

    def assert_replayed(self) -> None:
        """The live consumer groups equal the ones a replay of the log rebuilds."""
        assert_same_groups(self.shard, self.reloaded())

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


def group_state(group: ConsumerGroup) -> dict[str, Any]:
    """Everything durable in a consumer group (what a reload must rebuild)."""
    return {
        "group_epoch": group.group_epoch,
        "metadata_hash": group.metadata_hash,
        "assignment_epoch": group.assignment_epoch,
        "assignment_timestamp_ms": group.assignment_timestamp_ms,
        "target": {m: dict(t) for m, t in group.target.items()},
        "members": dict(group.members),
        "metadata": dict(group.metadata),
        "static_members": dict(group.static_members),
        "owners": {t: dict(ps) for t, ps in group.owners.items() if ps},
        "subscribed_names": +group.subscribed_names,
        "regex_subscribers": +group.regex_subscribers,
        "resolved_regexes": dict(group.resolved_regexes),
        "legacy": group.has_legacy_partition_metadata,
        "state": group.state(),
        "departed_targets": {m: dict(t) for m, t in group.departed_targets.items()},
        "target_sizes": dict(group.target_sizes),
        "target_topics": +group.target_topics,
    }


def assert_same_groups(live: GroupShard, replayed: GroupShard) -> None:
    assert set(live.consumer_groups) == set(replayed.consumer_groups)
    for group_id, group in live.consumer_groups.items():
        assert group_state(group) == group_state(replayed.consumer_groups[group_id]), group_id
        assert_target_hints(group)


def assert_target_hints(group: ConsumerGroup) -> None:
    """What the group keeps beside its target agrees with it: partitions per member and
    members per topic (the assignor's hints), and departed targets that no target holds."""
    target = group.target
    assert group.target_sizes == {m: sum(map(len, t.values())) for m, t in target.items()}
    assert +group.target_topics == Counter(t for held in target.values() for t in held)
    held = {(t, p) for tp in target.values() for t, ps in tp.items() for p in ps}
    for departed in group.departed_targets.values():
        assert not held & {(t, p) for t, ps in departed.items() for p in ps}


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

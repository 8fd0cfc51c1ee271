"""The shard test context (Kafka's GroupMetadataManagerTestContext): one GroupShard with a
manual clock and timer, sequential ids and a static topic image, driven the way the runtime
drives it. Every shard test harness (classic, consumer, migration, offsets) is built on it.

The runtime's part is `apply(result)`: replay the Result's `records` into the shard (the
only way offsets and consumer groups change), append `records` and `applied_records` (the
classic manager's, already applied in memory) to `log`, and, the append being durable at
once, deliver the replies. With `append_fails` set the append fails instead: nothing is
replayed, logged or answered (the runtime answers NOT_COORDINATOR itself) and the test
reloads. Requests and timers both go through it; timers fire only in `sleep(ms)`, which
returns the merged Result of what fired (each fired Result applied before the next fires).
`last` is the last Result applied.

`replayed()` is a fresh shard rebuilt from `log` (what a restart loads), `assert_replayed()`
checks that it holds the live state (consumer groups whole, classic groups as last written,
offsets), `reload()` swaps the shard for a loaded one.

Each shard entry point is called in exactly one method below (the `send_*` methods, which
return the request's reply Capture, `expire_offsets`, `topics_deleted`, `on_loaded`), so
pointing the context at another door into the shard is a one-line change per request kind.
Offset requests, answered at once, also have conveniences returning (response, Result).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from groupcoord.coordinator.groups.classic.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.consumer.group import ConsumerGroup
from groupcoord.coordinator.groups.consumer.messages import HeartbeatRequest as CgHeartbeat
from groupcoord.coordinator.groups.offset_messages import (
    DeleteGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from groupcoord.coordinator.groups.result import Record, Result
from groupcoord.coordinator.groups.shard import GroupShard
from groupcoord.coordinator.groups.testing import ManualTimer, SequentialIds
from groupcoord.coordinator.groups.topics import StaticTopicImage


class Capture:
    """A reply callback that remembers what it was given (and hands it to `then`)."""

    def __init__(self, then: Callable[[Any], None] | None = None) -> None:
        self.responses: list[Any] = []
        self._then = then

    def __call__(self, response: Any) -> None:
        self.responses.append(response)
        if self._then is not None:
            self._then(response)

    @property
    def answered(self) -> bool:
        return bool(self.responses)

    @property
    def response(self) -> Any:
        assert len(self.responses) == 1, self.responses
        return self.responses[0]


class ShardContext:
    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        topics: dict[str, int] | None = None,
        start_ms: int = 0,
    ) -> None:
        self.config = config if config is not None else GroupConfig()
        self.timer = ManualTimer(start_ms)
        self.ids = SequentialIds()
        self.topics = StaticTopicImage()
        for name, partitions in (topics or {}).items():
            self.topics.add(name, partitions)
        self.shard = GroupShard(0, self.config, self.timer, self.ids, topics=self.topics)
        self.timer.on_result = self.apply
        self.log: list[Record] = []  # every record appended, in order
        self.last = Result()
        self.append_fails = False

    @property
    def now(self) -> int:
        return self.timer.now_ms

    def topic_id(self, name: str) -> uuid.UUID:
        tid = self.topics.topic_id(name)
        assert tid is not None
        return tid

    # -- the runtime's part ------------------------------------------------------------------

    def apply(self, result: Result) -> Result:
        """Replay, append, and (the append being durable) deliver the replies; see above."""
        self.last = result
        if self.append_fails:
            return result
        for key, value in result.records:
            self.shard.replay(key, value, self.now)
        self.log.extend(result.records)
        self.log.extend(result.applied_records)
        for callback, response in result.replies:
            callback(response)
        return result

    def sleep(self, ms: int) -> Result:
        """Advance the clock by `ms`, firing (and applying) due timers; what they produced."""
        return self.timer.sleep(ms)

    def replayed(self, records: list[Record] | None = None) -> GroupShard:
        """A fresh shard rebuilt by replaying `records` (default: the whole log), not loaded
        (no timers armed)."""
        shard = GroupShard(0, self.config, ManualTimer(), SequentialIds(), topics=self.topics)
        for key, value in self.log if records is None else records:
            shard.replay(key, value, self.now)
        return shard

    def reload(self) -> GroupShard:
        """Replace the shard by one rebuilt from the log and loaded (timers re-armed from
        now on), as after a failed write or a restart; assignors set by the test are kept."""
        assignors = self.shard.consumer.assignors
        self.append_fails = False
        self.timer = ManualTimer(self.now)
        self.timer.on_result = self.apply
        self.shard = GroupShard(0, self.config, self.timer, self.ids, topics=self.topics)
        self.shard.consumer.assignors = assignors
        for key, value in self.log:
            self.shard.replay(key, value, self.now)
        self.on_loaded()
        return self.shard

    def assert_replayed(self) -> None:
        """The live shard equals the one a replay of the log rebuilds: consumer groups whole,
        classic groups as last written, offsets."""
        replayed = self.replayed()
        assert_same_groups(self.shard, replayed)
        assert set(replayed.groups) == set(self.shard.groups)
        for group_id, group in self.shard.groups.items():
            live = self.shard.classic.persisted_view(group_id)
            assert live == replayed.classic.persisted_view(group_id), group_id
            # The count "has everyone joined" reads agrees with the members.
            parked = sum(m.awaiting_join is not None for m in group.members.values())
            assert group.joined == parked, group_id
        assert replayed.offsets.snapshot() == self.shard.offsets.snapshot()

    # -- the shard's entry points: one call each ---------------------------------------------

    def send_join_group(self, request: JoinGroupRequest, capture: Capture | None = None) -> Capture:
        capture = Capture() if capture is None else capture
        self.apply(self.shard.classic.join_group(request, capture, self.now))
        return capture

    def send_sync_group(self, request: SyncGroupRequest, capture: Capture | None = None) -> Capture:
        capture = Capture() if capture is None else capture
        self.apply(self.shard.classic.sync_group(request, capture, self.now))
        return capture

    def send_heartbeat(self, request: HeartbeatRequest) -> Capture:
        capture = Capture()
        self.apply(self.shard.classic.heartbeat(request, capture, self.now))
        return capture

    def send_leave_group(self, request: LeaveGroupRequest) -> Capture:
        capture = Capture()
        self.apply(self.shard.classic.leave_group(request, capture, self.now))
        return capture

    def send_consumer_group_heartbeat(self, request: CgHeartbeat) -> Capture:
        capture = Capture()
        self.apply(self.shard.consumer.heartbeat(request, capture, self.now))
        return capture

    def send_commit_offsets(self, request: OffsetCommitRequest) -> Capture:
        capture = Capture()
        self.apply(self.shard.offsets.commit_offsets(request, capture, self.now))
        return capture

    def send_fetch_offsets(self, request: OffsetFetchRequest) -> Capture:
        capture = Capture()
        self.apply(self.shard.offsets.fetch_offsets(request, capture, self.now))
        return capture

    def send_delete_offsets(self, group_id: str, topics: dict[str, list[int]]) -> Capture:
        capture = Capture()
        self.apply(self.shard.offsets.delete_offsets(group_id, topics, capture, self.now))
        return capture

    def send_delete_groups(self, group_ids: list[str]) -> Capture:
        capture = Capture()
        self.apply(self.shard.offsets.delete_groups(group_ids, capture, self.now))
        return capture

    # -- offset requests, answered at once: (the response, the Result) ----------------------

    def commit(self, request: OffsetCommitRequest) -> tuple[OffsetCommitResponse, Result]:
        return self._answer(self.send_commit_offsets(request))

    def fetch(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        response, result = self._answer(self.send_fetch_offsets(request))
        assert result.records == [] and result.applied_records == []
        return response  # type: ignore[no-any-return]

    def delete_offsets(
        self, group_id: str, topics: dict[str, list[int]]
    ) -> tuple[OffsetDeleteResponse, Result]:
        return self._answer(self.send_delete_offsets(group_id, topics))

    def delete_groups(self, group_ids: list[str]) -> tuple[DeleteGroupsResponse, Result]:
        return self._answer(self.send_delete_groups(group_ids))

    def _answer(self, capture: Capture) -> tuple[Any, Result]:
        """The one reply of the request just sent, and its Result."""
        assert len(self.last.replies) == 1
        return capture.response, self.last

    def expire_offsets(self) -> Result:
        """The offset-expiration pass, run now (its timer runs the same)."""
        return self.apply(self.shard.offsets.expire(self.now))

    def topics_deleted(self, topics: dict[str, uuid.UUID | None]) -> Result:
        return self.apply(self.shard.offsets.topics_deleted(topics, self.now))

    def on_loaded(self) -> Result:
        """What a load ends with: sessions and the expiration timer armed."""
        return self.apply(self.shard.on_loaded(self.now))


# -- comparing shards ------------------------------------------------------------------------


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
    """The same consumer groups, whole, and each live one's hints agree with its target."""
    assert set(live.consumer_groups) == set(replayed.consumer_groups)
    for group_id, group in live.consumer_groups.items():
        assert group_state(group) == group_state(replayed.consumer_groups[group_id]), group_id
        assert_target_hints(group)
        # The classic members' counts agree with their metadata.
        classic = [m.classic_member_metadata for m in group.metadata.values()]
        supported = Counter(
            name
            for c in classic
            if c is not None
            for name in {p.name for p in c.supported_protocols}
        )
        assert group.classic_members == sum(c is not None for c in classic), group_id
        assert +group.classic_protocols == supported, group_id


def assert_target_hints(group: ConsumerGroup) -> None:
    """What the group keeps beside its target agrees with it: partitions per member and
    members per topic (the assignor's hints), and departed targets that no target holds."""
    target = group.target
    assert group.target_sizes == {m: sum(map(len, t.values())) for m, t in target.items()}
    assert +group.target_topics == Counter(t for held in target.values() for t in held)
    held = {(t, p) for tp in target.values() for t, ps in tp.items() for p in ps}
    for departed in group.departed_targets.values():
        assert not held & {(t, p) for t, ps in departed.items() for p in ps}

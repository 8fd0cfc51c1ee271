"""OffsetManager (coordinator/groups/offsets.py) against the offset scenarios S125-S146
(classic and simple groups), a hypothesis property (live offsets == offsets rebuilt from the
log, and from the compacted log) and a memory budget per stored offset.

Groups with members are built directly in `shard.groups` (ClassicGroup/ClassicMember), so
these tests do not depend on the classic manager's join logic. Requests and timers go
through the shard test context (shard_context.py), which plays the runtime: a Result's
`records` are replayed, never its `applied_records` (already applied by the classic
manager); both go to the log used for rebuilding.
"""

from __future__ import annotations

import gc
import struct
import tracemalloc
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.groups.classic.group import ClassicGroup, ClassicMember, GroupState
from groupcoord.coordinator.groups.classic.rebalance import heartbeat_key
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.offset_messages import (
    DeletableGroupResult,
    DeleteGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetCommitTopicResult,
    OffsetDeleteResponse,
    OffsetDeleteTopicResult,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    OffsetFetchTopicResult,
    PartitionResult,
)
from groupcoord.coordinator.groups.offsets import (
    EXPIRE_TIMER_KEY,
    OffsetAndMetadata,
)
from groupcoord.coordinator.groups.result import Record, Result
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_record,
    default_value_version,
    encode_key,
    encode_value,
)
from tests.unit.shard_context import ShardContext

T0 = 1_700_000_000_000
FOO_ID = uuid.UUID("11111111-1111-1111-1111-111111111111")
BAR_ID = uuid.UUID("22222222-2222-2222-2222-222222222222")
NONE = ErrorCode.NONE


# ---------------------------------------------------------------------------------------------
# Harness


class Harness(ShardContext):
    """The shard test context, starting at T0, with the offset manager at hand."""

    def __init__(self, config: GroupConfig | None = None) -> None:
        super().__init__(config, start_ms=T0)

    @property
    def offsets(self) -> Any:
        return self.shard.offsets

    def add_group(self, group: ClassicGroup) -> ClassicGroup:
        """A group the classic manager would have built; its GroupMetadata record goes to the
        log as an applied record (the manager changes classic state in memory itself)."""
        self.shard.groups[group.group_id] = group
        self.log.append(group.to_record())
        return group


def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: topics, then null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def classic_group(
    group_id: str,
    state: GroupState,
    *,
    generation: int = 1,
    protocol_type: str | None = "consumer",
    protocol_name: str | None = "range",
    members: dict[str, list[str]] | None = None,  # member id -> subscribed topics
    static: dict[str, str] | None = None,  # instance id -> member id
    state_timestamp_ms: int = T0,
) -> ClassicGroup:
    group = ClassicGroup(group_id, state_timestamp_ms=state_timestamp_ms)
    instance_of = {m: i for i, m in (static or {}).items()}
    for member_id, topics in (members or {}).items():
        group.add(
            ClassicMember(
                member_id=member_id,
                group_instance_id=instance_of.get(member_id),
                client_id="client",
                client_host="/127.0.0.1",
                rebalance_timeout_ms=300_000,
                session_timeout_ms=45_000,
                protocol_type=protocol_type or "",
                protocols=[(protocol_name or "range", subscription(topics))],
            )
        )
    group.state = state
    group.generation_id = generation
    group.protocol_type = protocol_type
    group.protocol_name = protocol_name
    return group


def commit_request(
    group_id: str = "foo",
    *,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
    version: int = 9,
    retention_ms: int = -1,
    topics: list[OffsetCommitTopic] | None = None,
) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        retention_time_ms=retention_ms,
        version=version,
        topics=topics
        if topics is not None
        else [OffsetCommitTopic("bar", [OffsetCommitPartition(0, 100, 10, "")])],
    )


def all_errors(response: OffsetCommitResponse) -> list[tuple[str, int, ErrorCode]]:
    return [(t.name, p.index, p.error) for t in response.topics for p in t.partitions]


def value(
    offset: int,
    commit_ts: int,
    *,
    epoch: int = -1,
    metadata: str = "",
    expire_ts: int = -1,
    topic_id: uuid.UUID | None = None,
) -> OffsetCommitValue:
    return OffsetCommitValue(
        offset=offset,
        leader_epoch=epoch,
        metadata=metadata,
        commit_timestamp=commit_ts,
        expire_timestamp=expire_ts,
        topic_id=topic_id,
    )


def seed(h: Harness, group_id: str, topic: str, partition: int, v: OffsetCommitValue) -> None:
    """An offset as if committed earlier: its record replayed and logged."""
    h.apply(Result(records=[(OffsetCommitKey(group_id, topic, partition), v)]))


# ---------------------------------------------------------------------------------------------
# OffsetCommit


@pytest.mark.parametrize(
    ("version", "error"),
    [
        (9, ErrorCode.GROUP_ID_NOT_FOUND),
        (10, ErrorCode.GROUP_ID_NOT_FOUND),
        (8, ErrorCode.ILLEGAL_GENERATION),
        (2, ErrorCode.ILLEGAL_GENERATION),
    ],
)
def test_s125_commit_to_missing_group(version: int, error: ErrorCode) -> None:
    h = Harness()
    topics = [
        OffsetCommitTopic("bar", [OffsetCommitPartition(0, 100), OffsetCommitPartition(1, 5)]),
        OffsetCommitTopic("baz", [OffsetCommitPartition(3, 7)]),
    ]
    response, result = h.commit(
        commit_request(generation=10, member_id="member", version=version, topics=topics)
    )
    assert all_errors(response) == [("bar", 0, error), ("bar", 1, error), ("baz", 3, error)]
    assert result.records == [] and result.applied_records == []
    assert "foo" not in h.shard.groups
    assert h.offsets.offset_count() == 0


@pytest.mark.parametrize("instance_id", [None, "instance"])
def test_s126_simple_group_commit(instance_id: str | None) -> None:
    h = Harness()
    response, result = h.commit(commit_request(instance_id=instance_id))
    assert response == OffsetCommitResponse(
        [OffsetCommitTopicResult("bar", None, [PartitionResult(0, NONE)])]
    )
    assert result.records == [
        (
            OffsetCommitKey("foo", "bar", 0),
            OffsetCommitValue(
                offset=100,
                leader_epoch=10,
                metadata="",
                commit_timestamp=T0,
                expire_timestamp=-1,
                topic_id=None,
            ),
        )
    ]
    assert default_value_version(result.records[0][1]) == 4
    # The record's replay created an empty classic group without protocol type.
    group = h.shard.groups["foo"]
    assert group.state is GroupState.EMPTY and group.protocol_type is None
    assert group.generation_id == 0 and not group.members
    assert h.offsets.get("foo", "bar", 0) == OffsetAndMetadata(100, 10, "", T0, -1, None)
    # The simple group now exists and keeps accepting generation -1 commits.
    again = [OffsetCommitTopic("bar", [OffsetCommitPartition(0, 101)])]
    response, result = h.commit(commit_request(topics=again))
    assert all_errors(response) == [("bar", 0, NONE)]
    assert h.offsets.get("foo", "bar", 0) == OffsetAndMetadata(101, -1, "", T0, -1, None)
    assert h.offsets.offset_count() == 1
    assert h.offsets.commits == 2


def test_s126_commit_record_fields_null_metadata_and_topic_id() -> None:
    h = Harness()
    topics = [
        OffsetCommitTopic("bar", [OffsetCommitPartition(0, 1, -1, None)], topic_id=BAR_ID),
        OffsetCommitTopic("baz", [OffsetCommitPartition(1, 2, 3, "m")], topic_id=uuid.UUID(int=0)),
    ]
    response, result = h.commit(commit_request(version=10, topics=topics))
    assert response.topics[0].topic_id == BAR_ID
    assert result.records == [
        (OffsetCommitKey("foo", "bar", 0), value(1, T0, topic_id=BAR_ID)),
        (OffsetCommitKey("foo", "baz", 1), value(2, T0, epoch=3, metadata="m")),
    ]
    # The records survive the byte codec unchanged.
    for key, v in result.records:
        assert decode_record(encode_key(key), encode_value(v)) == (key, v)


def stable_group(**kw: Any) -> ClassicGroup:
    return classic_group(
        "foo",
        kw.pop("state", GroupState.STABLE),
        generation=kw.pop("generation", 1),
        members={"member": ["bar"], "other": ["bar"]},
        static={"instance": "member"},
        **kw,
    )


@pytest.mark.parametrize(
    ("state", "generation", "member_id", "instance_id", "error"),
    [
        (GroupState.DEAD, 1, "member", None, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (GroupState.DEAD, -1, "", None, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (GroupState.STABLE, 10, "unknown", None, ErrorCode.UNKNOWN_MEMBER_ID),
        (GroupState.STABLE, 10, "member", None, ErrorCode.ILLEGAL_GENERATION),
        (GroupState.STABLE, 1, "member", "unmapped", ErrorCode.UNKNOWN_MEMBER_ID),
        (GroupState.STABLE, 1, "other", "instance", ErrorCode.FENCED_INSTANCE_ID),
        (GroupState.COMPLETING_REBALANCE, 1, "member", None, ErrorCode.REBALANCE_IN_PROGRESS),
        (GroupState.STABLE, -1, "", None, ErrorCode.UNKNOWN_MEMBER_ID),
        (GroupState.PREPARING_REBALANCE, -1, "", None, ErrorCode.UNKNOWN_MEMBER_ID),
        # Member info with generation -1 still goes through member validation.
        (GroupState.STABLE, -1, "member", None, ErrorCode.ILLEGAL_GENERATION),
        # Generation checked before the rebalance state.
        (GroupState.COMPLETING_REBALANCE, 2, "member", None, ErrorCode.ILLEGAL_GENERATION),
        (GroupState.STABLE, 1, "member", None, NONE),
        (GroupState.STABLE, 1, "member", "instance", NONE),
        (GroupState.PREPARING_REBALANCE, 1, "member", None, NONE),
    ],
)
def test_s127_classic_commit_errors(
    state: GroupState, generation: int, member_id: str, instance_id: str | None, error: ErrorCode
) -> None:
    h = Harness()
    h.add_group(stable_group(state=state))
    topics = [OffsetCommitTopic("bar", [OffsetCommitPartition(0, 1), OffsetCommitPartition(1, 2)])]
    request = commit_request(
        generation=generation, member_id=member_id, instance_id=instance_id, topics=topics
    )
    response, result = h.commit(request)
    assert all_errors(response) == [("bar", 0, error), ("bar", 1, error)]
    if error is NONE:
        assert [k for k, _ in result.records] == [
            OffsetCommitKey("foo", "bar", 0),
            OffsetCommitKey("foo", "bar", 1),
        ]
    else:
        assert result.records == []


def test_s127_empty_group_commits() -> None:
    h = Harness()
    h.add_group(classic_group("foo", GroupState.EMPTY, generation=3))
    # Admin / manual assignment: generation -1 to an Empty group is accepted.
    response, _ = h.commit(commit_request(generation=-1))
    assert all_errors(response) == [("bar", 0, NONE)]
    # With a generation, the member must exist even though the group is Empty.
    response, _ = h.commit(commit_request(generation=3, member_id=""))
    assert all_errors(response) == [("bar", 0, ErrorCode.UNKNOWN_MEMBER_ID)]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_s128_retention_time(version: int) -> None:
    h = Harness()
    h.add_group(stable_group())
    request = commit_request(generation=1, member_id="member", version=version, retention_ms=1234)
    response, result = h.commit(request)
    assert all_errors(response) == [("bar", 0, NONE)]
    assert result.records == [
        (OffsetCommitKey("foo", "bar", 0), value(100, T0, epoch=10, expire_ts=T0 + 1234))
    ]
    assert default_value_version(result.records[0][1]) == 1  # v1 alone carries the expiry
    # Retention -1 (the default) sets no expiry, and so does any retention above v4.
    _, result = h.commit(commit_request(generation=1, member_id="member", version=version))
    assert result.records[0][1].expire_timestamp == -1
    _, result = h.commit(
        commit_request(generation=1, member_id="member", version=5, retention_ms=1234)
    )
    assert result.records[0][1].expire_timestamp == -1


@pytest.mark.parametrize(
    ("state", "touched"),
    [
        (GroupState.STABLE, True),
        (GroupState.PREPARING_REBALANCE, True),
        (GroupState.COMPLETING_REBALANCE, False),  # rejected, REBALANCE_IN_PROGRESS
    ],
)
def test_s129_commit_maintains_classic_session(state: GroupState, touched: bool) -> None:
    h = Harness()
    group = h.add_group(stable_group(state=state))
    calls: list[tuple[ClassicGroup, str, int]] = []
    h.shard.classic.touch_member = lambda g, m, now: calls.append((g, m, now))  # type: ignore[attr-defined]
    h.timer.sleep(1_000)
    h.commit(commit_request(generation=1, member_id="member"))
    assert calls == ([(group, "member", T0 + 1_000)] if touched else [])
    # Errors do not refresh the session.
    h.commit(commit_request(generation=7, member_id="member"))
    assert len(calls) == (1 if touched else 0)


def test_s129_commit_resets_the_session_timer() -> None:
    """With the classic manager's timers: the commit re-arms the member's session, so it
    outlives its original deadline."""
    h = Harness()
    group = h.add_group(stable_group())
    h.on_loaded()  # arms every member's session (45 s)
    key = heartbeat_key("foo", "member")
    assert h.timer.deadline(key) == T0 + 45_000
    h.timer.sleep(40_000)
    response, _ = h.commit(commit_request(generation=1, member_id="member"))
    assert all_errors(response) == [("bar", 0, NONE)]
    assert h.timer.deadline(key) == T0 + 85_000
    h.timer.sleep(10_000)  # past the original deadline: "other" expired, "member" did not
    assert "member" in group.members and "other" not in group.members


def test_s136_metadata_too_large() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=5))
    partitions = [
        OffsetCommitPartition(0, 1, metadata="12345"),
        OffsetCommitPartition(1, 2, metadata="123456"),
        OffsetCommitPartition(2, 3, metadata=None),
        # Java's String.length(): a non-BMP character is two UTF-16 units.
        OffsetCommitPartition(3, 4, metadata="1234\U0001f600"),
        OffsetCommitPartition(4, 5, metadata="éééé"),
    ]
    response, result = h.commit(commit_request(topics=[OffsetCommitTopic("bar", partitions)]))
    too_large = ErrorCode.OFFSET_METADATA_TOO_LARGE
    assert all_errors(response) == [
        ("bar", 0, NONE),
        ("bar", 1, too_large),
        ("bar", 2, NONE),
        ("bar", 3, too_large),
        ("bar", 4, NONE),
    ]
    assert result.records == [
        (OffsetCommitKey("foo", "bar", 0), value(1, T0, metadata="12345")),
        (OffsetCommitKey("foo", "bar", 2), value(3, T0)),
        (OffsetCommitKey("foo", "bar", 4), value(5, T0, metadata="éééé")),
    ]
    assert h.offsets.get("foo", "bar", 4).metadata == "éééé"


def test_commit_with_every_partition_rejected_creates_no_group() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=0))
    topics = [OffsetCommitTopic("bar", [OffsetCommitPartition(0, 1, metadata="x")])]
    response, result = h.commit(commit_request(topics=topics))
    assert all_errors(response) == [("bar", 0, ErrorCode.OFFSET_METADATA_TOO_LARGE)]
    assert result.records == [] and "foo" not in h.shard.groups


# ---------------------------------------------------------------------------------------------
# OffsetFetch


def test_s140_fetch_from_missing_or_dead_group() -> None:
    h = Harness()
    request = OffsetFetchRequest(
        group_id="foo", topics=[OffsetFetchTopic("bar", [0, 1]), OffsetFetchTopic("baz", [2])]
    )
    unknown = OffsetFetchResponse(
        "foo",
        [
            OffsetFetchTopicResult(
                "bar", None, [OffsetFetchPartition(0, -1, -1, "", NONE), OffsetFetchPartition(1)]
            ),
            OffsetFetchTopicResult("baz", None, [OffsetFetchPartition(2)]),
        ],
        NONE,
    )
    assert h.fetch(request) == unknown
    assert h.fetch(OffsetFetchRequest(group_id="foo")) == OffsetFetchResponse("foo", [], NONE)
    # A Dead group answers as a missing one, even with offsets stored.
    seed(h, "foo", "bar", 0, value(5, T0))
    h.shard.groups["foo"].state = GroupState.DEAD
    assert h.fetch(request) == unknown
    assert h.fetch(OffsetFetchRequest(group_id="foo", require_stable=True)).topics == []


def test_fetch_offsets() -> None:
    h = Harness()
    seed(h, "foo", "bar", 0, value(5, T0, epoch=2, metadata="m", topic_id=BAR_ID))
    seed(h, "foo", "bar", 1, value(6, T0))
    seed(h, "foo", "baz", 0, value(7, T0, epoch=1))
    response = h.fetch(
        OffsetFetchRequest(
            group_id="foo",
            topics=[OffsetFetchTopic("bar", [0, 1, 2]), OffsetFetchTopic("nope", [0])],
            require_stable=True,
        )
    )
    assert response == OffsetFetchResponse(
        "foo",
        [
            OffsetFetchTopicResult(
                "bar",
                None,
                [
                    OffsetFetchPartition(0, 5, 2, "m"),
                    OffsetFetchPartition(1, 6, -1, ""),
                    OffsetFetchPartition(2, -1, -1, ""),
                ],
            ),
            OffsetFetchTopicResult("nope", None, [OffsetFetchPartition(0)]),
        ],
    )
    everything = h.fetch(OffsetFetchRequest(group_id="foo"))
    assert everything == OffsetFetchResponse(
        "foo",
        [
            OffsetFetchTopicResult(
                "bar", None, [OffsetFetchPartition(0, 5, 2, "m"), OffsetFetchPartition(1, 6)]
            ),
            OffsetFetchTopicResult("baz", None, [OffsetFetchPartition(0, 7, 1)]),
        ],
    )


def test_s142_fetch_with_topic_ids_and_recreated_topic() -> None:
    h = Harness()
    other = uuid.UUID("33333333-3333-3333-3333-333333333333")
    seed(h, "foo", "bar", 0, value(5, T0, topic_id=BAR_ID))
    seed(h, "foo", "bar", 1, value(6, T0))  # stored without a topic id (older record)

    def fetch(topic_id: uuid.UUID | None) -> list[OffsetFetchPartition]:
        topics = [OffsetFetchTopic("bar", [0, 1], topic_id)]
        response = h.fetch(OffsetFetchRequest(group_id="foo", topics=topics))
        assert response.topics[0].topic_id == topic_id
        return response.topics[0].partitions

    found = [OffsetFetchPartition(0, 5), OffsetFetchPartition(1, 6)]
    assert fetch(BAR_ID) == found
    assert fetch(None) == found
    assert fetch(uuid.UUID(int=0)) == found
    # Re-created topic: the stored id differs from the requested one.
    assert fetch(other) == [OffsetFetchPartition(0), OffsetFetchPartition(1, 6)]
    # Fetch-all reports the stored topic id when the topic's offsets agree on one.
    seed(h, "foo", "baz", 0, value(1, T0, topic_id=FOO_ID))
    topics = h.fetch(OffsetFetchRequest(group_id="foo")).topics
    assert [(t.name, t.topic_id) for t in topics] == [("bar", None), ("baz", FOO_ID)]


# ---------------------------------------------------------------------------------------------
# OffsetDelete


def test_s143_offset_delete_simple_group() -> None:
    h = Harness()
    seed(h, "foo", "bar", 0, value(1, T0))
    seed(h, "foo", "bar", 1, value(2, T0))
    seed(h, "foo", "baz", 0, value(3, T0))
    response, result = h.delete_offsets("foo", {"bar": [0, 2], "qux": [0]})
    assert response == OffsetDeleteResponse(
        NONE,
        [
            OffsetDeleteTopicResult("bar", [PartitionResult(0), PartitionResult(2)]),
            OffsetDeleteTopicResult("qux", [PartitionResult(0)]),
        ],
    )
    # A tombstone only where an offset existed.
    assert result.records == [(OffsetCommitKey("foo", "bar", 0), None)]
    assert set(h.offsets.snapshot()) == {("foo", "bar", 1), ("foo", "baz", 0)}


def test_s143_offset_delete_errors() -> None:
    h = Harness()
    response, result = h.delete_offsets("foo", {"bar": [0]})
    assert response == OffsetDeleteResponse(ErrorCode.GROUP_ID_NOT_FOUND, [])
    assert result.records == []

    h.add_group(classic_group("dead", GroupState.DEAD))
    assert h.delete_offsets("dead", {"bar": [0]})[0].error is ErrorCode.GROUP_ID_NOT_FOUND

    # A non-empty classic group whose protocol type is not "consumer".
    for state in (
        GroupState.STABLE,
        GroupState.PREPARING_REBALANCE,
        GroupState.COMPLETING_REBALANCE,
    ):
        h.add_group(
            classic_group("connect", state, protocol_type="connect", members={"m": ["bar"]})
        )
        seed(h, "connect", "bar", 0, value(1, T0))
        response, result = h.delete_offsets("connect", {"bar": [0]})
        assert response == OffsetDeleteResponse(ErrorCode.NON_EMPTY_GROUP, [])
        assert result.records == []
    # Empty, it can delete.
    h.add_group(classic_group("connect", GroupState.EMPTY, protocol_type="connect"))
    response, result = h.delete_offsets("connect", {"bar": [0]})
    assert response.error is NONE
    assert result.records == [(OffsetCommitKey("connect", "bar", 0), None)]


def test_s143_offset_delete_subscribed_topic() -> None:
    h = Harness()
    h.add_group(classic_group("foo", GroupState.STABLE, members={"a": ["bar"], "b": ["baz"]}))
    for topic in ("bar", "baz", "qux"):
        seed(h, "foo", topic, 0, value(1, T0))
    response, result = h.delete_offsets("foo", {"bar": [0, 1], "qux": [0], "baz": [0]})
    subscribed = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    assert response == OffsetDeleteResponse(
        NONE,
        [
            OffsetDeleteTopicResult(
                "bar", [PartitionResult(0, subscribed), PartitionResult(1, subscribed)]
            ),
            OffsetDeleteTopicResult("qux", [PartitionResult(0)]),
            OffsetDeleteTopicResult("baz", [PartitionResult(0, subscribed)]),
        ],
    )
    assert result.records == [(OffsetCommitKey("foo", "qux", 0), None)]


def test_s143_offset_delete_unknown_subscription_counts_as_subscribed() -> None:
    h = Harness()
    group = classic_group("foo", GroupState.STABLE, members={"a": ["bar"]})
    group.members["a"].protocols = [("range", b"\x00")]  # unparseable subscription
    h.add_group(group)
    seed(h, "foo", "qux", 0, value(1, T0))
    response, result = h.delete_offsets("foo", {"qux": [0]})
    assert response.topics == [
        OffsetDeleteTopicResult("qux", [PartitionResult(0, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)])
    ]
    assert result.records == []


# ---------------------------------------------------------------------------------------------
# Expiration


def test_s144_offset_expiration_stable_consumer_group() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=60_000))
    group = h.add_group(classic_group("foo", GroupState.STABLE, members={"m": ["firstTopic"]}))
    seed(h, "foo", "firstTopic", 0, value(1, T0))
    seed(h, "foo", "secondTopic", 0, value(1, T0))
    seed(h, "foo", "secondTopic", 1, value(1, T0 + 500))

    h.timer.sleep(60_000 - 1)
    assert h.expire_offsets().records == []
    h.timer.sleep(1)
    # Subscribed topics never expire; the group keeps offsets so it is not deleted.
    assert h.expire_offsets().records == [(OffsetCommitKey("foo", "secondTopic", 0), None)]
    h.timer.sleep(500)
    assert h.expire_offsets().records == [(OffsetCommitKey("foo", "secondTopic", 1), None)]
    assert set(h.offsets.snapshot()) == {("foo", "firstTopic", 0)}

    # Members go; the group becomes Empty: offsets now age from the state change.
    group.remove("m")
    group.state, group.state_timestamp_ms, group.protocol_name = GroupState.EMPTY, h.now, None
    seed(h, "foo", "secondTopic", 0, value(2, T0))  # old commit, but base is the state time
    h.timer.sleep(59_999)
    assert h.expire_offsets().records == []
    h.timer.sleep(1)
    assert h.expire_offsets().records == [
        (OffsetCommitKey("foo", "firstTopic", 0), None),
        (OffsetCommitKey("foo", "secondTopic", 0), None),
        (GroupMetadataKey("foo"), None),
    ]
    assert h.offsets.offset_count() == 0
    assert "foo" not in h.shard.groups  # the classic manager's replay of the tombstone


@pytest.mark.parametrize(
    "state",
    [GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.STABLE],
)
def test_s144_no_expiration_condition(state: GroupState) -> None:
    h = Harness(GroupConfig(offsets_retention_ms=60_000))
    # Stable counts only for the consumer protocol with known subscriptions: use "connect".
    protocol_type = "connect" if state is GroupState.STABLE else "consumer"
    h.add_group(classic_group("foo", state, protocol_type=protocol_type, members={"m": ["a"]}))
    seed(h, "foo", "bar", 0, value(1, T0))
    h.timer.sleep(10 * 60_000)
    assert h.expire_offsets().records == []


def test_s144_stable_group_with_unknown_subscriptions_does_not_expire() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=60_000))
    group = classic_group("foo", GroupState.STABLE, members={"m": ["a"]})
    group.members["m"].protocols = [("range", b"junk")]
    h.add_group(group)
    seed(h, "foo", "bar", 0, value(1, T0))
    h.timer.sleep(10 * 60_000)
    assert h.expire_offsets().records == []


def test_s144_simple_group_and_explicit_expiry() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=60_000))
    # v2-4 retention: the record's expire timestamp decides, not the broker retention.
    h.commit(
        commit_request(
            version=2,
            retention_ms=1_000,
            topics=[OffsetCommitTopic("bar", [OffsetCommitPartition(0, 1)])],
        )
    )
    h.commit(commit_request(topics=[OffsetCommitTopic("baz", [OffsetCommitPartition(0, 1)])]))
    h.timer.sleep(999)
    assert h.expire_offsets().records == []
    h.timer.sleep(1)
    assert h.expire_offsets().records == [(OffsetCommitKey("foo", "bar", 0), None)]
    h.timer.sleep(59_000)
    assert h.expire_offsets().records == [
        (OffsetCommitKey("foo", "baz", 0), None),
        (GroupMetadataKey("foo"), None),
    ]
    assert "foo" not in h.shard.groups


def test_s144_empty_group_without_state_timestamp_uses_commit_time() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=60_000))
    h.add_group(classic_group("foo", GroupState.EMPTY, state_timestamp_ms=-1))
    seed(h, "foo", "bar", 0, value(1, T0 + 10))
    h.timer.sleep(60_009)
    assert h.expire_offsets().records == []
    h.timer.sleep(1)
    assert h.expire_offsets().records == [
        (OffsetCommitKey("foo", "bar", 0), None),
        (GroupMetadataKey("foo"), None),
    ]


def test_s144_empty_groups_without_offsets_are_deleted() -> None:
    h = Harness()
    h.add_group(classic_group("empty", GroupState.EMPTY))
    h.add_group(classic_group("stable", GroupState.STABLE, members={"m": ["a"]}))
    assert h.expire_offsets().records == [(GroupMetadataKey("empty"), None)]
    assert set(h.shard.groups) == {"stable"}


def test_s144_expiration_timer() -> None:
    h = Harness(GroupConfig(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=1_000))
    seed(h, "foo", "bar", 0, value(1, T0))
    assert not h.timer.is_scheduled(EXPIRE_TIMER_KEY)
    h.on_loaded()
    assert h.timer.deadline(EXPIRE_TIMER_KEY) == T0 + 1_000
    assert h.timer.sleep(59_000).records == []
    fired = h.timer.sleep(1_000)  # the timer's records were replayed through on_result
    assert fired.records == [
        (OffsetCommitKey("foo", "bar", 0), None),
        (GroupMetadataKey("foo"), None),
    ]
    assert h.offsets.offset_count() == 0 and "foo" not in h.shard.groups
    assert h.timer.deadline(EXPIRE_TIMER_KEY) == T0 + 61_000  # rescheduled
    assert h.offsets.expirations == 1


# ---------------------------------------------------------------------------------------------
# Topic deletion


def test_s145_topic_deletion_removes_offsets() -> None:
    h = Harness()
    seed(h, "g1", "bar", 0, value(1, T0, topic_id=BAR_ID))  # matching id
    seed(h, "g1", "bar", 1, value(1, T0))  # no id stored (legacy)
    seed(h, "g2", "bar", 0, value(1, T0, topic_id=FOO_ID))  # re-created topic: kept
    seed(h, "g2", "baz", 0, value(1, T0, topic_id=BAR_ID))  # other topic
    result = h.offsets.topics_deleted({"bar": BAR_ID}, h.now)
    h.apply(result)
    assert result.records == [
        (OffsetCommitKey("g1", "bar", 0), None),
        (OffsetCommitKey("g1", "bar", 1), None),
    ]
    assert set(h.offsets.snapshot()) == {("g2", "bar", 0), ("g2", "baz", 0)}
    # Unknown id of the deleted topic: every offset under the name goes.
    result = h.offsets.topics_deleted({"bar": None}, h.now)
    assert result.records == [(OffsetCommitKey("g2", "bar", 0), None)]


# ---------------------------------------------------------------------------------------------
# DeleteGroups


def test_s146_delete_groups() -> None:
    h = Harness()
    h.add_group(classic_group("empty", GroupState.EMPTY))
    seed(h, "empty", "bar", 0, value(1, T0))
    seed(h, "empty", "bar", 1, value(1, T0))
    seed(h, "simple", "baz", 0, value(1, T0))  # created by replay
    h.add_group(classic_group("dead", GroupState.DEAD))
    for state in (
        GroupState.STABLE,
        GroupState.PREPARING_REBALANCE,
        GroupState.COMPLETING_REBALANCE,
    ):
        h.add_group(classic_group(state.value, state, members={"m": ["bar"]}))
    ids = ["empty", "unknown", "dead", "Stable", "PreparingRebalance", "CompletingRebalance"]
    response, result = h.delete_groups([*ids, "simple", "empty"])
    assert response == DeleteGroupsResponse(
        [
            DeletableGroupResult("empty", NONE),
            DeletableGroupResult("unknown", ErrorCode.GROUP_ID_NOT_FOUND),
            DeletableGroupResult("dead", ErrorCode.GROUP_ID_NOT_FOUND),
            DeletableGroupResult("Stable", ErrorCode.NON_EMPTY_GROUP),
            DeletableGroupResult("PreparingRebalance", ErrorCode.NON_EMPTY_GROUP),
            DeletableGroupResult("CompletingRebalance", ErrorCode.NON_EMPTY_GROUP),
            DeletableGroupResult("simple", NONE),
        ]
    )
    assert result.records == [
        (OffsetCommitKey("empty", "bar", 0), None),
        (OffsetCommitKey("empty", "bar", 1), None),
        (GroupMetadataKey("empty"), None),
        (OffsetCommitKey("simple", "baz", 0), None),
        (GroupMetadataKey("simple"), None),
    ]
    assert h.offsets.offset_count() == 0
    assert h.offsets.deletions == 3


def test_s146_delete_groups_replay_removes_group() -> None:
    """Replay of the GroupMetadata tombstone (the classic manager's part) removes the group,
    live and when the log is replayed into a fresh shard."""
    h = Harness()
    h.commit(commit_request())
    assert "foo" in h.shard.groups
    response, _ = h.delete_groups(["foo"])
    assert response.results == [DeletableGroupResult("foo", NONE)]
    assert "foo" not in h.shard.groups
    assert "foo" not in h.replayed().groups
    # A later commit creates the simple group again.
    h.commit(commit_request())
    assert "foo" in h.shard.groups


# ---------------------------------------------------------------------------------------------
# Property: live state == replay of the log == replay of the compacted log


def compact(log: list[Record]) -> list[Record]:
    """Latest record per key, in log order; keys whose latest is a tombstone dropped."""
    last: dict[Any, int] = {}
    for i, (key, _v) in enumerate(log):
        last[key] = i
    return [entry for i, entry in enumerate(log) if last[entry[0]] == i and entry[1] is not None]


GROUPS = ["g0", "g1", "g2", "stable"]
TOPICS = {"t0": FOO_ID, "t1": BAR_ID, "t2": None}

partitions_st = st.lists(st.integers(0, 2), min_size=1, max_size=3)
op_st = st.one_of(
    st.tuples(
        st.just("commit"),
        st.sampled_from(GROUPS),
        st.sampled_from(sorted(TOPICS)),
        partitions_st,
        st.sampled_from([(9, -1), (2, -1), (3, 5_000), (4, 100_000)]),  # version, retention
        st.sampled_from(["", "meta", "x" * 20]),  # the last one is too large
        st.booleans(),  # with the topic id
    ),
    st.tuples(
        st.just("delete_offsets"),
        st.sampled_from(GROUPS),
        st.sampled_from(sorted(TOPICS)),
        partitions_st,
    ),
    st.tuples(st.just("delete_groups"), st.lists(st.sampled_from(GROUPS), min_size=1, max_size=2)),
    st.tuples(st.just("sleep"), st.integers(0, 70_000)),
    st.tuples(st.just("topics_deleted"), st.sampled_from(sorted(TOPICS)), st.booleans()),
    st.tuples(
        st.just("tombstone"),
        st.sampled_from(GROUPS),
        st.sampled_from(sorted(TOPICS)),
        st.integers(0, 2),
    ),
    st.tuples(st.just("stable_empties"), st.booleans()),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op_st, max_size=40))
def test_property_live_state_equals_replayed_log(ops: list[tuple[Any, ...]]) -> None:
    config = GroupConfig(
        offsets_retention_ms=60_000,
        offsets_retention_check_interval_ms=10_000,
        offset_metadata_max_bytes=10,
    )
    h = Harness(config)
    h.on_loaded()
    # A Stable consumer group subscribed to t0: offsets of t0 never expire or get deleted.
    h.add_group(classic_group("stable", GroupState.STABLE, members={"m": ["t0"]}))
    for op in ops:
        kind = op[0]
        if kind == "commit":
            _, group_id, topic, parts, (version, retention), metadata, with_id = op
            group = h.shard.groups.get(group_id)
            stable = group is not None and group.state is GroupState.STABLE
            topic_id = TOPICS[topic] if with_id else None
            commit_parts = [OffsetCommitPartition(p, h.now % 1000 + p, p, metadata) for p in parts]
            h.commit(
                commit_request(
                    group_id,
                    generation=group.generation_id if group is not None and stable else -1,
                    member_id="m" if stable else "",
                    version=version,
                    retention_ms=retention,
                    topics=[OffsetCommitTopic(topic, commit_parts, topic_id)],
                )
            )
        elif kind == "delete_offsets":
            h.delete_offsets(op[1], {op[2]: op[3]})
        elif kind == "delete_groups":
            h.delete_groups(op[1])
        elif kind == "sleep":
            h.timer.sleep(op[1])
        elif kind == "topics_deleted":
            h.topics_deleted({op[1]: TOPICS[op[1]] if op[2] else None})
        elif kind == "tombstone":
            h.apply(Result(records=[(OffsetCommitKey(op[1], op[2], op[3]), None)]))
        elif kind == "stable_empties":
            group = h.shard.groups.get("stable")
            if group is not None and group.state is GroupState.STABLE and op[1]:
                # What the classic manager does when the last member leaves (in memory,
                # persisted by an applied GroupMetadata record).
                group.remove("m")
                group.state, group.state_timestamp_ms = GroupState.EMPTY, h.now
                group.protocol_name = None
                h.log.append(group.to_record())

        assert h.offsets.offset_count() == len(h.offsets.snapshot())
    # Handlers never change state: only replay does, so a fresh replay agrees.
    live = h.offsets.snapshot()
    replayed = h.replayed()
    assert replayed.offsets.snapshot() == live
    assert replayed.offsets.offset_count() == len(live)
    assert set(replayed.groups) == set(h.shard.groups)
    compacted = h.replayed(compact(h.log))
    assert compacted.offsets.snapshot() == live
    # Every offset of a live group belongs to a group that exists.
    assert {g for g, _, _ in live} <= set(h.shard.groups)
    # The log survives the byte codec (what the runtime really appends).
    for key, v in h.log:
        raw_value = None if v is None else encode_value(v)
        assert decode_record(encode_key(key), raw_value)[0] == key


# ---------------------------------------------------------------------------------------------
# Memory


def test_memory_per_offset() -> None:
    """100k offsets (1000 groups x 10 topics x 10 partitions) replayed from fresh objects,
    as a load decodes them: the manager's structures and the groups must stay < 300 B each."""
    h = Harness()
    n_groups, n_topics, n_parts = 1000, 10, 10
    total = n_groups * n_topics * n_parts
    topic_ids = [uuid.uuid4() for _ in range(n_topics)]

    def records() -> Any:
        i = 0
        for g in range(n_groups):
            for t in range(n_topics):
                for p in range(n_parts):
                    i += 1
                    key = OffsetCommitKey(f"consumer-group-{g:05d}", f"topic-{t:03d}", p)
                    yield (
                        key,
                        OffsetCommitValue(
                            offset=1_000_000 + i * 7,
                            leader_epoch=i % 40,
                            metadata="",
                            commit_timestamp=T0 + i,
                            topic_id=uuid.UUID(bytes=topic_ids[t].bytes) if t % 2 else None,
                        ),
                    )

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for key, v in records():
            h.shard.replay(key, v, T0)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert h.offsets.offset_count() == total
    per_offset = used / total
    print(f"\noffsets: {total}, memory: {used / 1e6:.1f} MB, {per_offset:.0f} bytes/offset")
    assert per_offset < 300
    assert h.offsets.get("consumer-group-00001", "topic-001", 3) == OffsetAndMetadata(
        1_000_000 + 114 * 7, 114 % 40, "", T0 + 114, -1, topic_ids[1]
    )


def test_committed_offsets_and_member_counts_for_lag() -> None:
    """What lag reads of a shard at scrape time: every offset (any metadata or topic id) with
    its commit time, and members per group, a group left with offsets only counted as 0."""
    h = Harness()
    seed(h, "foo", "bar", 0, value(7, T0, metadata="m" * 30, topic_id=uuid.uuid4()))
    seed(h, "foo", "bar", 1, value(9, T0))
    seed(h, "qux", "baz", 0, value(3, T0 + 5))
    assert sorted(h.offsets.committed()) == [
        ("foo", "bar", 0, 7, T0),
        ("foo", "bar", 1, 9, T0),
        ("qux", "baz", 0, 3, T0 + 5),
    ]
    assert h.shard.member_counts() == {"foo": 0, "qux": 0}
    # In lists of whole groups, one as soon as it holds the rows asked (the caller yields
    # to the loop between two): the same rows.
    chunks = list(h.offsets.committed_chunks(2))
    assert [len(chunk) for chunk in chunks] == [2, 1]
    assert sorted(row for chunk in chunks for row in chunk) == sorted(h.offsets.committed())
    assert [len(chunk) for chunk in h.offsets.committed_chunks(1000)] == [3]

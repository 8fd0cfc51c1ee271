"""Offsets of consumer groups (KIP-848) on a pure GroupShard: scenarios S130-S136 of
shared/reference/scenarios.md (OffsetCommit fencing: unknown member, stale epoch, the
OffsetCommit v9 requirement, classic-protocol members, admin commits, KIP-1251 relaxed
fencing by assignment epochs, metadata too large), OffsetFetch member validation (S141),
OffsetDelete (S143: subscribed topics, by name or through a resolved regex), DeleteGroups
(S146) and the expiration of an empty consumer group (S144).

Groups are built the way Kafka's tests build them (ConsumerGroupBuilder): their records are
replayed into the shard and logged, so a member can sit at epoch 10 holding foo-0 since
epoch 7. OffsetDelete's regex case joins members with real heartbeats, since regexes are
resolved there. Handlers are called as the runtime calls them: the Result's records are
replayed and logged, and the shard rebuilt from the log must equal the live one.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from groupcoord.coordinator.groups.consumer.member import ConsumerGroupMember, MemberState
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
    OffsetAndMetadata,
)
from groupcoord.coordinator.groups.result import Result
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
)
from tests.unit.consumer_support import GROUP, START_MS, Client, Harness

TOPICS = {"foo": 6, "bar": 3, "qux": 2}
NONE = ErrorCode.NONE
STALE = ErrorCode.STALE_MEMBER_EPOCH
ILLEGAL = ErrorCode.ILLEGAL_GENERATION
ZERO_UUID = uuid.UUID(int=0)
RETENTION = 60_000


class OffsetsHarness(Harness):
    def __init__(self, **config: Any) -> None:
        config.setdefault("consumer_assignment_interval_ms", 0)
        config.setdefault("offsets_retention_ms", RETENTION)
        super().__init__(dict(TOPICS), **config)
        self.foo = self.topic_id("foo")
        self.bar = self.topic_id("bar")

    # -- building groups ---------------------------------------------------------------------

    def group_at(self, epoch: int) -> None:
        """The group's epoch and target epoch (creates the group if needed)."""
        self.apply(
            Result(
                records=[
                    (ConsumerGroupMetadataKey(GROUP), ConsumerGroupMetadataValue(epoch, 0)),
                    (
                        ConsumerGroupTargetAssignmentMetadataKey(GROUP),
                        ConsumerGroupTargetAssignmentMetadataValue(epoch, START_MS),
                    ),
                ]
            )
        )

    def add_member(
        self,
        member_id: str,
        epoch: int,
        *,
        assigned: dict[uuid.UUID, dict[int, int]] | None = None,
        pending: dict[uuid.UUID, dict[int, int]] | None = None,
        classic: bool = False,
        topics: tuple[str, ...] = ("foo",),
    ) -> None:
        """A member at `epoch` holding `assigned` and revoking `pending` ({topic id:
        {partition: assignment epoch}}), of the classic protocol if `classic`."""
        meta = ConsumerGroupMemberMetadataValue(
            instance_id=None,
            rack_id=None,
            client_id="client",
            client_host="/127.0.0.1",
            subscribed_topic_names=topics,
            subscribed_topic_regex=None,
            rebalance_timeout_ms=5_000,
            server_assignor=None,
            classic_member_metadata=ClassicMemberMetadata(45_000, (ClassicProtocol("range", b""),))
            if classic
            else None,
        )
        member = ConsumerGroupMember(
            member_id,
            member_epoch=epoch,
            previous_member_epoch=epoch - 1,
            state=MemberState.UNREVOKED_PARTITIONS if pending else MemberState.STABLE,
            assigned_partitions=assigned or {},
            partitions_pending_revocation=pending or {},
            rebalance_timeout_ms=5_000,
        )
        self.apply(
            Result(
                records=[
                    (ConsumerGroupMemberMetadataKey(GROUP, member_id), meta),
                    (ConsumerGroupCurrentMemberAssignmentKey(GROUP, member_id), member.to_record()),
                ]
            )
        )


def commit_request(
    *,
    epoch: int,
    member_id: str = "member",
    version: int = 10,
    topics: list[OffsetCommitTopic],
    group_id: str = GROUP,
) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=epoch,
        member_id=member_id,
        version=version,
        topics=topics,
    )


def topic(
    name: str, topic_id: uuid.UUID | None, *partitions: int, metadata: str = ""
) -> OffsetCommitTopic:
    return OffsetCommitTopic(
        name, [OffsetCommitPartition(p, 100 + p, 5, metadata) for p in partitions], topic_id
    )


def errors(response: OffsetCommitResponse) -> list[tuple[str, int, ErrorCode]]:
    return [(t.name, p.index, p.error) for t in response.topics for p in t.partitions]


def committed(offset: int, now: int, topic_id: uuid.UUID | None, metadata: str = "") -> Any:
    return OffsetCommitValue(
        offset=offset,
        leader_epoch=5,
        metadata=metadata,
        commit_timestamp=now,
        expire_timestamp=-1,
        topic_id=topic_id,
    )


def assert_rejected(
    h: OffsetsHarness, request: OffsetCommitRequest, error: ErrorCode
) -> OffsetCommitResponse:
    """The whole request fails: every partition carries `error`, nothing is written."""
    before = len(h.log)
    response, result = h.commit(request)
    assert errors(response) == [
        (t.name, p.index, error) for t in request.topics for p in t.partitions
    ]
    assert result.records == [] and len(h.log) == before
    return response


def assert_accepted(h: OffsetsHarness, request: OffsetCommitRequest) -> OffsetCommitResponse:
    response, result = h.commit(request)
    assert errors(response) == [
        (t.name, p.index, NONE) for t in request.topics for p in t.partitions
    ]
    assert result.records == [
        (
            OffsetCommitKey(GROUP, t.name, p.index),
            committed(p.offset, h.now, None if t.topic_id == ZERO_UUID else t.topic_id),
        )
        for t in request.topics
        for p in t.partitions
    ]
    return response


# =============================================================================================
# OffsetCommit
# =============================================================================================


def test_s130_unknown_member_or_stale_epoch() -> None:
    """S130: member at epoch 10 without assignment: an unknown member id is
    UNKNOWN_MEMBER_ID; epoch 9 (older, and the partition is not assigned) and epoch 11
    (newer) are STALE_MEMBER_EPOCH; epoch 10 commits."""
    h = OffsetsHarness()
    h.group_at(10)
    h.add_member("member", 10)
    foo = [topic("foo", h.foo, 0)]
    assert_rejected(
        h, commit_request(epoch=10, member_id="unknown", topics=foo), ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert_rejected(h, commit_request(epoch=9, topics=foo), STALE)
    assert_rejected(h, commit_request(epoch=11, topics=foo), STALE)
    assert_accepted(h, commit_request(epoch=10, topics=foo))
    assert h.shard.offsets.get(GROUP, "foo", 0) == OffsetAndMetadata(100, 5, "", h.now, -1, h.foo)
    # The offsets belong to the consumer group: no simple group appears.
    assert h.shard.classic_group(GROUP) is None
    h.assert_replayed()


def test_s131_classic_protocol_member_gets_illegal_generation() -> None:
    """S131: a member using the classic protocol is told ILLEGAL_GENERATION on an epoch
    mismatch (older or newer); it may commit with OffsetCommit below v9."""
    h = OffsetsHarness()
    h.group_at(10)
    h.add_member("member", 10, classic=True)
    foo = [topic("foo", h.foo, 0)]
    assert_rejected(h, commit_request(epoch=9, topics=foo), ILLEGAL)
    assert_rejected(h, commit_request(epoch=11, topics=foo), ILLEGAL)
    assert_rejected(h, commit_request(epoch=11, version=8, topics=foo), ILLEGAL)
    assert_accepted(h, commit_request(epoch=10, version=8, topics=foo))


def test_s132_admin_commits_and_the_version_requirement() -> None:
    """S132: MemberId "" with epoch -1 is accepted while the consumer group has no
    members (the group stays a consumer group), UNKNOWN_MEMBER_ID once it has some; a
    consumer-protocol member committing below v9 gets UNSUPPORTED_VERSION."""
    h = OffsetsHarness()
    h.group_at(5)  # an empty consumer group
    admin = commit_request(epoch=-1, member_id="", topics=[topic("foo", h.foo, 0, 1)])
    assert_accepted(h, admin)
    assert h.shard.consumer_group(GROUP) is not None and h.shard.classic_group(GROUP) is None

    h.add_member("member", 5)
    assert_rejected(h, admin, ErrorCode.UNKNOWN_MEMBER_ID)
    assert_rejected(
        h,
        commit_request(epoch=-1, member_id="member", topics=[topic("foo", h.foo, 0)]),
        STALE,
    )
    for version in (8, 2, 0):
        assert_rejected(
            h,
            commit_request(epoch=5, version=version, topics=[topic("foo", h.foo, 0)]),
            ErrorCode.UNSUPPORTED_VERSION,
        )
    assert_accepted(h, commit_request(epoch=5, version=9, topics=[topic("foo", h.foo, 0)]))
    h.assert_replayed()


@pytest.mark.parametrize("pending", [False, True])
def test_s133_relaxed_fencing_by_assignment_epoch(pending: bool) -> None:
    """S133: member epoch 10, foo-0 obtained at epoch 7 (assigned, or pending revocation):
    epoch 11 STALE (newer); 10 accepted (equality skips the partition check: bar-0, not
    held, commits too); 7 accepted; 6 STALE (older than the assignment epoch)."""
    h = OffsetsHarness()
    h.group_at(10)
    held = {h.foo: {0: 7}}
    if pending:
        h.add_member("member", 10, pending=held)
    else:
        h.add_member("member", 10, assigned=held)
    foo0 = [topic("foo", h.foo, 0)]
    assert_rejected(h, commit_request(epoch=11, topics=foo0), STALE)
    assert_accepted(h, commit_request(epoch=10, topics=[*foo0, topic("bar", h.bar, 0)]))
    assert_accepted(h, commit_request(epoch=7, topics=foo0))
    assert_rejected(h, commit_request(epoch=6, topics=foo0), STALE)
    h.assert_replayed()


def test_s133_relaxed_fencing_response_carries_topic_id_and_name() -> None:
    """S133 variant (ResolvesTopicId): assignment epoch 5: epoch 3 STALE, epoch 5 accepted,
    the response topic carrying both the topic id and the name."""
    h = OffsetsHarness()
    h.group_at(10)
    h.add_member("member", 10, assigned={h.foo: {0: 5, 1: 5}})
    request = commit_request(epoch=5, topics=[topic("foo", h.foo, 0, 1)])
    assert_rejected(h, commit_request(epoch=3, topics=[topic("foo", h.foo, 0, 1)]), STALE)
    response = assert_accepted(h, request)
    assert response == OffsetCommitResponse(
        [OffsetCommitTopicResult("foo", h.foo, [PartitionResult(0), PartitionResult(1)])]
    )


def test_s134_partition_not_assigned_fails_the_whole_request() -> None:
    """S134: epoch 10 owns foo-0 (epoch 7) and revokes foo-1 (epoch 7). At epoch 7, foo-2
    and bar-0 (not held) are STALE, and so is a topic without a known id (ZERO); one such
    partition fails every partition of the request; foo-0 with foo-1 commits."""
    h = OffsetsHarness()
    h.group_at(10)
    h.add_member("member", 10, assigned={h.foo: {0: 7}}, pending={h.foo: {1: 7}})
    assert_rejected(h, commit_request(epoch=7, topics=[topic("foo", h.foo, 2)]), STALE)
    assert_rejected(h, commit_request(epoch=7, topics=[topic("bar", h.bar, 0)]), STALE)
    for unknown in (None, ZERO_UUID):
        assert_rejected(h, commit_request(epoch=7, topics=[topic("foo", unknown, 0)]), STALE)
    assert_rejected(
        h,
        commit_request(epoch=7, topics=[topic("foo", h.foo, 0, 1, 2), topic("bar", h.bar, 0)]),
        STALE,
    )
    assert_accepted(h, commit_request(epoch=7, topics=[topic("foo", h.foo, 0, 1)]))
    # At the member's own epoch the id is not looked at.
    assert_accepted(h, commit_request(epoch=10, topics=[topic("foo", None, 2)]))


def test_s135_relaxed_fencing_for_a_classic_protocol_member() -> None:
    """S135: as S133/S134 for a classic-protocol member, with ILLEGAL_GENERATION."""
    h = OffsetsHarness()
    h.group_at(10)
    h.add_member("member", 10, assigned={h.foo: {0: 7}}, pending={h.foo: {1: 7}}, classic=True)
    foo01 = [topic("foo", h.foo, 0, 1)]
    assert_rejected(h, commit_request(epoch=11, topics=foo01), ILLEGAL)
    assert_accepted(h, commit_request(epoch=10, topics=[*foo01, topic("bar", h.bar, 0)]))
    assert_accepted(h, commit_request(epoch=7, topics=foo01))
    assert_rejected(h, commit_request(epoch=6, topics=foo01), ILLEGAL)
    assert_rejected(h, commit_request(epoch=7, topics=[topic("foo", h.foo, 2)]), ILLEGAL)


def test_s136_metadata_too_large_per_partition() -> None:
    """S136: a partition whose metadata exceeds offset.metadata.max.bytes gets
    OFFSET_METADATA_TOO_LARGE; the others commit."""
    h = OffsetsHarness(offset_metadata_max_bytes=5)
    h.group_at(10)
    h.add_member("member", 10, assigned={h.foo: {0: 10, 1: 10, 2: 10}})
    request = commit_request(
        epoch=10,
        topics=[
            OffsetCommitTopic(
                "foo",
                [
                    OffsetCommitPartition(0, 100, 5, "12345"),
                    OffsetCommitPartition(1, 101, 5, "123456"),
                    OffsetCommitPartition(2, 102, 5, None),
                ],
                h.foo,
            )
        ],
    )
    response, result = h.commit(request)
    assert errors(response) == [
        ("foo", 0, NONE),
        ("foo", 1, ErrorCode.OFFSET_METADATA_TOO_LARGE),
        ("foo", 2, NONE),
    ]
    assert result.records == [
        (OffsetCommitKey(GROUP, "foo", 0), committed(100, h.now, h.foo, "12345")),
        (OffsetCommitKey(GROUP, "foo", 2), committed(102, h.now, h.foo)),
    ]
    # The fencing still comes first: a stale request fails whole.
    stale = commit_request(epoch=11, topics=request.topics)
    assert_rejected(h, stale, STALE)


# =============================================================================================
# OffsetFetch
# =============================================================================================


def test_s141_fetch_validates_the_member_strictly() -> None:
    """S141: with a member id or an epoch >= 0 the member must exist (UNKNOWN_MEMBER_ID) at
    exactly its epoch (STALE_MEMBER_EPOCH; ILLEGAL_GENERATION for a classic-protocol
    member): no assignment-epoch leniency. MemberId null with epoch -1 reads freely."""
    h = OffsetsHarness()
    h.group_at(10)
    h.add_member("member", 10, assigned={h.foo: {0: 7}})
    h.add_member("classic", 10, classic=True, topics=("bar",))
    assert_accepted(h, commit_request(epoch=10, topics=[topic("foo", h.foo, 0)]))
    found = OffsetFetchResponse(
        GROUP, [OffsetFetchTopicResult("foo", h.foo, [OffsetFetchPartition(0, 100, 5, "")])]
    )
    for topics in ([OffsetFetchTopic("foo", [0], h.foo)], None):
        request = OffsetFetchRequest(group_id=GROUP, topics=topics)
        assert h.fetch(request) == found
        for member_id, epoch in (("member", 10), (None, -1)):
            request = OffsetFetchRequest(
                group_id=GROUP, topics=topics, member_id=member_id, member_epoch=epoch
            )
            assert h.fetch(request) == found
        for member_id, epoch, error in (
            ("unknown", 10, ErrorCode.UNKNOWN_MEMBER_ID),
            ("member", 7, STALE),
            ("member", 11, STALE),
            ("classic", 9, ILLEGAL),
            ("member", -1, STALE),
        ):
            request = OffsetFetchRequest(
                group_id=GROUP, topics=topics, member_id=member_id, member_epoch=epoch
            )
            assert h.fetch(request) == OffsetFetchResponse(GROUP, [], error), (member_id, epoch)


# =============================================================================================
# OffsetDelete, DeleteGroups, expiration
# =============================================================================================


def seed(h: OffsetsHarness, topic_name: str, partition: int, at_ms: int | None = None) -> None:
    """An offset committed earlier (its record replayed and logged)."""
    value = committed(1, h.now if at_ms is None else at_ms, h.topic_id(topic_name))
    h.apply(Result(records=[(OffsetCommitKey(GROUP, topic_name, partition), value)]))


def test_s143_offset_delete_in_a_consumer_group() -> None:
    """S143: no group-level check for a consumer group with members; a topic the group
    subscribes to (by name, or through a resolved regex) gets GROUP_SUBSCRIBED_TO_TOPIC for
    every partition; others NONE, with a tombstone only where an offset exists."""
    h = OffsetsHarness()
    assert Client(h, "A").join(["foo"]).error_code is NONE
    regex = Client(h, "B").join(None, subscribed_topic_regex="ba.*")
    assert regex.error_code is NONE
    assert h.group().subscribed_topic_names() == {"foo"}  # not resolved yet
    h.sleep(0)  # the regex's resolution
    assert h.group().subscribed_topic_names() == {"foo", "bar"}
    for name, partition in (("foo", 0), ("bar", 0), ("qux", 0), ("qux", 1)):
        seed(h, name, partition)

    response, result = h.delete_offsets(GROUP, {"foo": [0], "bar": [0, 1], "qux": [0, 5]})
    subscribed = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    assert response == OffsetDeleteResponse(
        NONE,
        [
            OffsetDeleteTopicResult("foo", [PartitionResult(0, subscribed)]),
            OffsetDeleteTopicResult(
                "bar", [PartitionResult(0, subscribed), PartitionResult(1, subscribed)]
            ),
            OffsetDeleteTopicResult("qux", [PartitionResult(0), PartitionResult(5)]),
        ],
    )
    assert result.records == [(OffsetCommitKey(GROUP, "qux", 0), None)]
    assert set(h.shard.offsets.group_offsets(GROUP)) == {"foo", "bar", "qux"}
    assert list(h.shard.offsets.group_offsets(GROUP)["qux"]) == [1]
    h.assert_replayed()

    missing, result = h.delete_offsets("missing", {"foo": [0]})
    assert missing == OffsetDeleteResponse(ErrorCode.GROUP_ID_NOT_FOUND, [])


def test_s146_delete_groups_with_consumer_groups() -> None:
    """S146: a consumer group with members is NON_EMPTY_GROUP (nothing written); an empty
    one is deleted: its offsets' tombstones, then the group's in Kafka's order (target
    metadata, the legacy PartitionMetadata it still has, group epoch)."""
    h = OffsetsHarness()
    a = Client(h, "A")
    assert a.join(["foo"]).error_code is NONE
    seed(h, "foo", 0)
    seed(h, "foo", 1)
    seed(h, "bar", 0)
    before = len(h.log)
    response, result = h.delete_groups([GROUP, "missing"])
    assert response == DeleteGroupsResponse(
        [
            DeletableGroupResult(GROUP, ErrorCode.NON_EMPTY_GROUP),
            DeletableGroupResult("missing", ErrorCode.GROUP_ID_NOT_FOUND),
        ]
    )
    assert result.records == [] and len(h.log) == before

    assert a.leave().error_code is NONE
    # A group written by an older coordinator still has the legacy record.
    h.apply(
        Result(
            records=[
                (ConsumerGroupPartitionMetadataKey(GROUP), ConsumerGroupPartitionMetadataValue(()))
            ]
        )
    )
    response, result = h.delete_groups([GROUP, GROUP])
    assert response == DeleteGroupsResponse([DeletableGroupResult(GROUP, NONE)])
    assert result.records == [
        (OffsetCommitKey(GROUP, "foo", 0), None),
        (OffsetCommitKey(GROUP, "foo", 1), None),
        (OffsetCommitKey(GROUP, "bar", 0), None),
        (ConsumerGroupTargetAssignmentMetadataKey(GROUP), None),
        (ConsumerGroupPartitionMetadataKey(GROUP), None),
        (ConsumerGroupMetadataKey(GROUP), None),
    ]
    assert not h.shard.has_group(GROUP) and h.shard.offsets.offset_count() == 0
    h.assert_replayed()
    # The id is free again: a heartbeat creates a new group at epoch 2.
    assert Client(h, "A").join(["foo"]).member_epoch == 2


def test_s144_expiration_of_consumer_group_offsets() -> None:
    """S144 for consumer groups: an offset expires by its commit time, only for topics the
    group does not subscribe to; a group with members is never deleted."""
    h = OffsetsHarness()
    a = Client(h, "A")
    assert a.join(["foo"]).error_code is NONE

    def sleep(ms: int) -> None:  # A keeps its session
        while ms > 0:
            step = min(ms, 10_000)
            h.sleep(step)
            ms -= step
            assert a.poll().error_code is NONE

    seed(h, "foo", 0)
    seed(h, "bar", 0)
    sleep(500)
    seed(h, "bar", 1)
    sleep(RETENTION - 501)
    assert h.expire_offsets().records == []
    sleep(1)
    assert h.expire_offsets().records == [(OffsetCommitKey(GROUP, "bar", 0), None)]
    sleep(500)
    assert h.expire_offsets().records == [(OffsetCommitKey(GROUP, "bar", 1), None)]
    sleep(3 * RETENTION)
    assert h.expire_offsets().records == []  # foo is subscribed
    assert list(h.shard.offsets.group_offsets(GROUP)) == ["foo"]
    assert list(h.group().metadata) == ["A"]
    h.assert_replayed()


def test_s144_expiration_deletes_an_empty_consumer_group() -> None:
    """S144: an empty consumer group is deleted by the expiration cycle that removes its
    last offset (offset tombstones, then the group's), or by the next cycle if it has no
    offsets at all."""
    h = OffsetsHarness()
    a = Client(h, "A")
    assert a.join(["foo"]).error_code is NONE
    seed(h, "foo", 0)
    seed(h, "foo", 1)
    assert a.leave().error_code is NONE
    assert h.group().is_empty()
    h.sleep(RETENTION - 1)
    assert h.expire_offsets().records == []
    assert h.shard.consumer_group(GROUP) is not None
    h.sleep(1)
    assert h.expire_offsets().records == [
        (OffsetCommitKey(GROUP, "foo", 0), None),
        (OffsetCommitKey(GROUP, "foo", 1), None),
        (ConsumerGroupTargetAssignmentMetadataKey(GROUP), None),
        (ConsumerGroupMetadataKey(GROUP), None),
    ]
    assert not h.shard.has_group(GROUP) and h.shard.offsets.offset_count() == 0
    h.assert_replayed()

    # Without offsets: gone at the next cycle.
    b = Client(h, "B")
    assert b.join(["foo"]).error_code is NONE
    assert b.leave().error_code is NONE
    assert h.expire_offsets().records == [
        (ConsumerGroupTargetAssignmentMetadataKey(GROUP), None),
        (ConsumerGroupMetadataKey(GROUP), None),
    ]
    assert not h.shard.has_group(GROUP)
    assert not any(isinstance(key, GroupMetadataKey) for key, _ in h.log)
    h.assert_replayed()


def test_offsets_of_a_simple_group_before_its_consumer_group_replay_into_the_consumer_group() -> (
    None
):
    """Offsets committed by a simple group (an admin reset before the first KIP-848 member)
    replay before the consumer group's records. Live, the consumer group's first write
    tombstones the simple group; once compaction has dropped that tombstone, replay makes the
    simple group first, and the consumer group's first record must replace it (Kafka's
    getOrMaybeCreatePersistedConsumerGroup), or the id is listed twice and the subscribed
    topic's offset expires as a simple group's would."""
    h = OffsetsHarness()
    seed(h, "foo", 0)  # no group yet: the replay creates a simple classic group
    assert h.shard.classic_group(GROUP) is not None
    a = Client(h, "A")
    assert a.join(["foo"]).error_code is NONE
    assert (GroupMetadataKey(GROUP), None) in h.log
    assert h.shard.classic_group(GROUP) is None
    # What compaction leaves after the tombstone retention: the tombstone is gone.
    h.log = [r for r in h.log if r != (GroupMetadataKey(GROUP), None)]
    shard = h.reload()
    assert shard.classic_group(GROUP) is None
    assert shard.consumer_group(GROUP) is not None and shard.group_count() == 1
    for _ in range(3 * RETENTION // 10_000):  # A keeps its session
        h.sleep(10_000)
        assert a.poll().error_code is NONE
    assert h.expire_offsets().records == []  # foo is subscribed: its offset stays
    assert list(h.shard.offsets.group_offsets(GROUP)) == ["foo"]

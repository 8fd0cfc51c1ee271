"""Online migration between classic and consumer groups (KIP-848, reference B.14) on a pure
GroupShard: scenarios S64-S82 of shared/reference/scenarios.md, one test each (named after
it, some with variants), plus a full mixed flow (a consumer member and a classic member
share partitions, the consumer member leaves, the group goes back to classic).

The harness extends consumer_support.Harness (the shard test context, shard_context.py,
which plays the runtime for both protocols: parked JoinGroup/SyncGroup answers come from
later Results) with classic requests. The clock starts at START_MS and moves only through
`sleep`. The assignment interval is 0 unless a test says otherwise.

Where we differ from Kafka on purpose (and the tests follow us):
* The downgrade's rebalance starts from a 0-delay timer (`downgrade-<group>`): the classic
  group only exists once the records are replayed (Kafka swaps the groups in memory).
* A held-back target (assignment interval) is computed by the `assignment-<group>` timer,
  not by the next consumer heartbeat (S75).
* Deleting a consumer group writes the legacy PartitionMetadata tombstone only when the
  group still has that record (S66, S79: Kafka writes it unconditionally).
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from typing import Any

import pytest

from groupcoord.coordinator.groups.classic.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from groupcoord.coordinator.groups.classic.group import ClassicGroup, GroupState
from groupcoord.coordinator.groups.classic.messages import (
    HeartbeatRequest,
    JoinGroupMember,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeaveMemberResponse,
    SyncGroupResponse,
)
from groupcoord.coordinator.groups.classic.rebalance import heartbeat_key
from groupcoord.coordinator.groups.classic.rebalance import join_key as classic_join_key
from groupcoord.coordinator.groups.classic.rebalance import sync_key as classic_sync_key
from groupcoord.coordinator.groups.consumer.group import ConsumerGroupState, target_to_record
from groupcoord.coordinator.groups.consumer.keys import (
    rebalance_timeout_key,
    session_timeout_key,
)
from groupcoord.coordinator.groups.consumer.member import ConsumerGroupMember, MemberState
from groupcoord.coordinator.groups.consumer.messages import (
    HeartbeatRequest as ConsumerHeartbeatRequest,
)
from groupcoord.coordinator.groups.consumer.migration import downgrade_key
from groupcoord.coordinator.groups.consumer.migration import join_key as member_join_key
from groupcoord.coordinator.groups.consumer.migration import sync_key as member_sync_key
from groupcoord.coordinator.groups.result import Record, Result
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
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from tests.unit.classic_support import (
    CLIENT,
    HOST,
    REBALANCE,
    SESSION,
    join_request,
    leave_request,
    sync_request,
)
from tests.unit.consumer_support import GROUP, START_MS, Client, Harness, assignment, settle
from tests.unit.shard_context import Capture, group_state

TOPICS = {"foo": 6, "bar": 3}
CONSUMER_SESSION = 45_000  # group.consumer.session.timeout.ms
DELAY = 100  # group.initial.rebalance.delay.ms
NONE = ErrorCode.NONE

KINDS = {
    ConsumerGroupMemberMetadataKey: "member",
    ConsumerGroupMetadataKey: "group",
    ConsumerGroupTargetAssignmentMemberKey: "target",
    ConsumerGroupTargetAssignmentMetadataKey: "target-meta",
    ConsumerGroupCurrentMemberAssignmentKey: "current",
    ConsumerGroupRegularExpressionKey: "regex",
    ConsumerGroupPartitionMetadataKey: "partition-metadata",
    GroupMetadataKey: "classic",
    OffsetCommitKey: "offset",
}


# =============================================================================================
# Harness
# =============================================================================================


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def subscription(
    topics: list[str],
    owned: list[tuple[str, list[int]]] | None = None,
    *,
    version: int = 1,
    generation: int = -1,
    rack: str | None = None,
) -> bytes:
    """A ConsumerProtocolSubscription at `version` (v1 owned partitions, v2 generation, v3
    rack), as classic clients send in JoinGroup."""
    out = [struct.pack(">hi", version, len(topics)), *(_string(t) for t in topics)]
    out.append(struct.pack(">i", -1))  # null user data
    if version >= 1:
        out.append(struct.pack(">i", len(owned or [])))
        for topic, partitions in owned or []:
            out.append(
                _string(topic) + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
            )
    if version >= 2:
        out.append(struct.pack(">i", generation))
    if version >= 3:
        out.append(struct.pack(">h", -1) if rack is None else _string(rack))
    return b"".join(out)


def assignment_at(version: int, partitions: list[tuple[str, list[int]]]) -> bytes:
    """A ConsumerProtocolAssignment with the version header `version` (the body of v0-v3 is
    the same)."""
    return struct.pack(">h", version) + encode_assignment(partitions)[2:]


class MigrationHarness(Harness):
    def __init__(self, topics: dict[str, int] | None = None, **config: Any) -> None:
        config.setdefault("consumer_assignment_interval_ms", 0)
        config.setdefault("initial_rebalance_delay_ms", DELAY)
        super().__init__(dict(TOPICS) if topics is None else topics, **config)

    def load_classic(self, record: Record) -> ClassicGroup:
        """A classic group as a load rebuilds it from its GroupMetadata record (sessions
        armed)."""
        self.apply(Result(records=[record]))
        self.shard.classic.on_loaded(self.timer.now_ms)
        return self.classic()

    # -- views -------------------------------------------------------------------------------

    def classic(self) -> ClassicGroup:
        group = self.shard.classic_group(GROUP)
        assert group is not None
        return group

    def member(self, member_id: str) -> ConsumerGroupMember:
        member = self.group().member(member_id)
        assert member is not None
        return member

    # -- classic requests --------------------------------------------------------------------

    def cjoin(
        self,
        member_id: str = "",
        *,
        topics: tuple[str, ...] = ("foo",),
        owned: list[tuple[str, list[int]]] | None = None,
        sub_version: int = 1,
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        instance: str | None = None,
        session: int = SESSION,
        rebalance: int = REBALANCE,
        version: int = 9,
    ) -> Capture:
        if protocols is None:
            protocols = [("range", subscription(list(topics), owned, version=sub_version))]
        request = join_request(
            GROUP,
            member_id,
            protocols,
            protocol_type=protocol_type,
            instance=instance,
            session=session,
            rebalance=rebalance,
            version=version,
        )
        return self.send_join_group(request)

    def cjoin_new(self, **kwargs: Any) -> tuple[str, Capture]:
        """The v4+ two-step join of a dynamic member: MEMBER_ID_REQUIRED, then the join."""
        first = self.cjoin(**kwargs)
        assert first.response.error_code is ErrorCode.MEMBER_ID_REQUIRED, first.response
        member_id: str = first.response.member_id
        return member_id, self.cjoin(member_id, **kwargs)

    def csync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance: str | None = None,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
        version: int = 5,
    ) -> Capture:
        request = sync_request(
            GROUP,
            member_id,
            generation,
            assignments,
            instance=instance,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            version=version,
        )
        return self.send_sync_group(request)

    def cheartbeat(self, member_id: str, generation: int, instance: str | None = None) -> ErrorCode:
        capture = self.send_heartbeat(HeartbeatRequest(GROUP, member_id, generation, instance))
        assert not self.last.records and not self.last.applied_records  # they write nothing
        error: ErrorCode = capture.response.error_code
        return error

    def cleave(self, *members: tuple[str, str | None], version: int = 5) -> LeaveGroupResponse:
        capture = self.send_leave_group(leave_request(GROUP, members, version))
        response: LeaveGroupResponse = capture.response
        return response


def kinds(records: list[Record]) -> list[tuple[str, str | None, bool]]:
    """(kind, member id, is tombstone) per record."""
    out = []
    for key, value in records:
        out.append((KINDS[type(key)], getattr(key, "member_id", None), value is None))
    return out


def ok(response: Any) -> Any:
    assert response.error_code is NONE, response
    return response


def classic_member_metadata(
    topics: list[str], metadata: bytes | None = None, *, session: int = SESSION
) -> ConsumerGroupMemberMetadataValue:
    """The MemberMetadata of a classic-protocol member subscribing to `topics` with one
    protocol, "range"."""
    return ConsumerGroupMemberMetadataValue(
        instance_id=None,
        rack_id=None,
        client_id=CLIENT,
        client_host=HOST,
        subscribed_topic_names=tuple(sorted(topics)),
        subscribed_topic_regex=None,
        rebalance_timeout_ms=REBALANCE,
        server_assignor=None,
        classic_member_metadata=ClassicMemberMetadata(
            session,
            (ClassicProtocol("range", subscription(topics) if metadata is None else metadata),),
        ),
    )


def classic_group_record(
    generation: int,
    members: list[tuple[str, list[str], list[tuple[str, list[int]]]]],
    *,
    protocol_type: str = "consumer",
    user_data: bytes | None = None,
    metadata: bytes | None = None,
) -> Record:
    """A Stable classic group's GroupMetadata record: (member id, topics, assignment) each,
    the first member leading."""
    return (
        GroupMetadataKey(GROUP),
        GroupMetadataValue(
            protocol_type=protocol_type,
            generation=generation,
            protocol="range",
            leader=members[0][0],
            current_state_timestamp=START_MS,
            members=tuple(
                MemberMetadata(
                    member_id=member_id,
                    group_instance_id=None,
                    client_id=CLIENT,
                    client_host=HOST,
                    rebalance_timeout=REBALANCE,
                    session_timeout=SESSION,
                    subscription=subscription(topics) if metadata is None else metadata,
                    assignment=encode_assignment(assigned, user_data),
                )
                for member_id, topics, assigned in members
            ),
        ),
    )


def stable_classic_group(h: MigrationHarness) -> tuple[str, str]:
    """Two classic members joined over the wire, Stable at generation 1, the leader (first)
    assigning foo-0..2 to itself and foo-3..5 to the other."""
    m1, j1 = h.cjoin_new()
    m2, j2 = h.cjoin_new()
    h.sleep(2 * DELAY)
    assert j1.response.generation_id == j2.response.generation_id == 1
    assert j1.response.leader == m1
    assignments = {
        m1: encode_assignment([("foo", [0, 1, 2])]),
        m2: encode_assignment([("foo", [3, 4, 5])]),
    }
    assert h.csync(m1, 1, assignments).response.error_code is NONE
    assert h.csync(m2, 1).response.error_code is NONE
    assert h.classic().state is GroupState.STABLE
    return m1, m2


def mixed_group(
    h: MigrationHarness, *, topics: tuple[str, ...] = ("bar",), static: str | None = None
) -> tuple[Client, str, int]:
    """A consumer group with consumer member A (subscribed to foo, all of it) and classic
    member C (subscribed to `topics`, bar by default: free, so assigned at once), synced.
    With `static`, a static classic member of that instance id (subscribed to baz) joins
    between them. Returns (A, C's id, C's generation)."""
    a = Client(h, "A")
    ok(a.join(["foo"]))
    if static is not None:
        ok(h.cjoin(topics=("baz",), instance=static).response)
    c, joined = h.cjoin_new(topics=topics)
    generation: int = ok(joined.response).generation_id
    assert ok(h.csync(c, generation).response)
    return a, c, generation


# =============================================================================================
# Upgrade: classic -> consumer
# =============================================================================================


def test_s64_heartbeat_into_a_non_consumer_protocol_classic_group() -> None:
    """S64: a live classic group whose protocol type is not "consumer" (here "connect",
    rebalancing with its member parked) cannot be upgraded: GROUP_ID_NOT_FOUND, nothing
    written, the classic group untouched."""
    h = MigrationHarness()
    member_id, parked = h.cjoin_new(protocol_type="connect")
    assert h.classic().state is GroupState.PREPARING_REBALANCE
    before = len(h.log)
    response = h.join("new", ["foo"])
    assert response.error_code is ErrorCode.GROUP_ID_NOT_FOUND
    assert response.error_message == (
        f"Cannot upgrade classic group {GROUP} to consumer group because its protocol type "
        "is connect, not consumer."
    )
    assert len(h.log) == before and h.last.records == []
    assert h.shard.consumer_group(GROUP) is None
    assert not parked.answered and list(h.classic().members) == [member_id]
    h.sleep(DELAY)
    assert parked.response.error_code is NONE  # the classic rebalance goes on


def test_s64_heartbeat_into_a_memberless_rebalancing_classic_group() -> None:
    """S64 as Kafka builds it: a classic group without protocol type, in
    PreparingRebalance, no members. Not Empty, not "consumer": GROUP_ID_NOT_FOUND."""
    h = MigrationHarness()
    group = h.shard.get_or_create_classic_group(GROUP, h.now)
    h.apply(Result(applied_records=[group.empty_record()]))
    group.transition(GroupState.PREPARING_REBALANCE, h.now)
    response = h.join("new", ["foo"])
    assert response.error_code is ErrorCode.GROUP_ID_NOT_FOUND


def test_s65_heartbeat_converts_an_empty_classic_group() -> None:
    """S65: an Empty classic group (its member left; its offsets stay) becomes a consumer
    group in the heartbeat's write: GroupMetadata tombstone first, then the new group's
    records; MemberEpoch 2."""
    h = MigrationHarness()
    member_id, joined = h.cjoin_new()
    h.sleep(DELAY)
    generation = ok(joined.response).generation_id
    ok(h.csync(member_id, generation, {member_id: b""}).response)
    offset = OffsetCommitValue(
        offset=42,
        leader_epoch=-1,
        metadata="",
        commit_timestamp=h.now,
        expire_timestamp=-1,
        topic_id=h.topic_id("foo"),
    )
    h.apply(Result(records=[(OffsetCommitKey(GROUP, "foo", 0), offset)]))
    h.cleave((member_id, None))
    assert h.classic().state is GroupState.EMPTY

    response = ok(h.join("new", ["foo"]))
    assert response.member_epoch == 2
    assert kinds(h.last.records) == [
        ("classic", None, True),
        ("member", "new", False),
        ("group", None, False),
        ("target", "new", False),
        ("target-meta", None, False),
        ("current", "new", False),
    ]
    assert h.shard.classic_group(GROUP) is None
    assert h.group().group_epoch == 2 and list(h.group().metadata) == ["new"]
    assert not h.timer.is_scheduled(heartbeat_key(GROUP, member_id))
    assert h.shard.offsets.get(GROUP, "foo", 0) is not None  # the offsets stay
    h.assert_replayed()


def test_s66_join_group_converts_an_empty_consumer_group() -> None:
    """S66: JoinGroup (MemberId "") against an Empty consumer group deletes it in the same
    write (target-metadata then group-epoch tombstones; no PartitionMetadata tombstone, the
    group never had that legacy record) and creates the classic group, which hands out a
    member id (MEMBER_ID_REQUIRED)."""
    h = MigrationHarness()
    a = Client(h, "A")
    ok(a.join(["foo"]))
    ok(a.leave())
    assert h.group().is_empty() and h.group().group_epoch == 3

    reply = h.cjoin()
    member_id = reply.response.member_id
    assert reply.response == JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
    assert kinds(h.last.records) == [("target-meta", None, True), ("group", None, True)]
    assert h.last.applied_records == [
        (
            GroupMetadataKey(GROUP),
            GroupMetadataValue(
                protocol_type="",
                generation=0,
                protocol=None,
                leader=None,
                current_state_timestamp=h.now,
                members=(),
            ),
        )
    ]
    assert h.shard.consumer_group(GROUP) is None
    group = h.classic()
    assert group.state is GroupState.EMPTY and group.pending_members == {member_id}
    h.assert_replayed()

    # The group is now an ordinary classic group.
    parked = h.cjoin(member_id)
    h.sleep(DELAY)
    assert ok(parked.response).generation_id == 1 and parked.response.leader == member_id


def test_s67_online_upgrade_of_a_stable_classic_group() -> None:
    """S67: a consumer heartbeat (epoch 0) into a Stable classic group at generation 10.
    The write: the classic tombstone; the consumer group (members STABLE at epoch 10 with
    their classic assignments, epoch 10, targets = those assignments, target epoch 10);
    then the new member as usual (epoch 11, a new target)."""
    h = MigrationHarness()
    foo, bar = h.topic_id("foo"), h.topic_id("bar")
    both = ["foo", "bar"]
    m1_parts = {foo: [0, 1, 2], bar: [0]}
    m2_parts = {foo: [3, 4, 5], bar: [1, 2]}
    h.load_classic(
        classic_group_record(
            10,
            [
                ("m1", both, [("foo", [0, 1, 2]), ("bar", [0])]),
                ("m2", both, [("foo", [3, 4, 5]), ("bar", [1, 2])]),
            ],
        )
    )
    assert h.timer.is_scheduled(heartbeat_key(GROUP, "m1"))

    response = ok(h.join("new", both))
    assert response.member_epoch == 11
    records = h.last.records
    assert kinds(records[:9]) == [
        ("classic", None, True),
        ("member", "m1", False),
        ("member", "m2", False),
        ("group", None, False),
        ("target", "m1", False),
        ("target", "m2", False),
        ("target-meta", None, False),
        ("current", "m1", False),
        ("current", "m2", False),
    ]
    group = h.group()

    def converted(member_id: str, parts: dict[uuid.UUID, list[int]]) -> ConsumerGroupMember:
        return ConsumerGroupMember(
            member_id,
            member_epoch=10,
            previous_member_epoch=10,
            state=MemberState.STABLE,
            assigned_partitions={t: dict.fromkeys(ps, 10) for t, ps in parts.items()},
            rebalance_timeout_ms=REBALANCE,
        )

    assert [value for _, value in records[:9]] == [
        None,
        classic_member_metadata(both),
        classic_member_metadata(both),
        ConsumerGroupMetadataValue(10, group.metadata_hash),
        target_to_record({t: frozenset(ps) for t, ps in m1_parts.items()}),
        target_to_record({t: frozenset(ps) for t, ps in m2_parts.items()}),
        ConsumerGroupTargetAssignmentMetadataValue(10, START_MS),
        converted("m1", m1_parts).to_record(),
        converted("m2", m2_parts).to_record(),
    ]
    # Then the joining member, as in any heartbeat.
    rest = kinds(records[9:])
    assert rest[:2] == [("member", "new", False), ("group", None, False)]
    assert rest[-2:] == [("target-meta", None, False), ("current", "new", False)]
    assert {kind for kind, _, _ in rest[2:-2]} == {"target"}
    assert values_of(records[9:], ConsumerGroupMetadataKey) == [
        ConsumerGroupMetadataValue(11, group.metadata_hash)
    ]

    assert h.shard.classic_group(GROUP) is None
    assert group.group_epoch == group.assignment_epoch == 11
    assert group.member("m1") == converted("m1", m1_parts)
    assert group.member("m2") == converted("m2", m2_parts)
    # Classic sessions became consumer-group sessions, with the classic session timeout.
    for member_id in ("m1", "m2"):
        assert not h.timer.is_scheduled(heartbeat_key(GROUP, member_id))
        assert h.timer.deadline(session_timeout_key(GROUP, member_id)) == h.now + SESSION
    assert h.timer.deadline(session_timeout_key(GROUP, "new")) == h.now + CONSUMER_SESSION
    h.assert_replayed()

    # The classic members learn of the new target by their heartbeats: rejoin.
    assert h.cheartbeat("m1", 10) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.timer.deadline(member_join_key(GROUP, "m1")) == h.now + REBALANCE


def values_of(records: list[Record], key_type: type) -> list[Any]:
    return [value for key, value in records if isinstance(key, key_type)]


def test_s68_upgrade_while_preparing_rebalance() -> None:
    """S68 (PreparingRebalance): the leader's parked JoinGroup is answered
    REBALANCE_IN_PROGRESS; members convert at the current generation with their
    assignments; the classic join timer is gone."""
    h = MigrationHarness()
    m1, m2 = stable_classic_group(h)
    parked = h.cjoin(m1)  # the leader rejoins: a rebalance starts
    assert h.classic().state is GroupState.PREPARING_REBALANCE and not parked.answered
    assert h.timer.is_scheduled(classic_join_key(GROUP))

    response = ok(h.join("new", ["foo"]))
    assert parked.response == JoinGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS, member_id=m1)
    assert response.member_epoch == 2
    foo = h.topic_id("foo")
    assert h.member(m1).member_epoch == 1 and h.member(m1).state is MemberState.STABLE
    assert h.member(m1).assigned_partitions == {foo: {0: 1, 1: 1, 2: 1}}
    assert h.member(m2).assigned_partitions == {foo: {3: 1, 4: 1, 5: 1}}
    assert not h.timer.is_scheduled(classic_join_key(GROUP))
    h.assert_replayed()

    # m1 rejoins through the consumer group.
    assert h.cheartbeat(m1, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = h.cjoin(m1, owned=[("foo", [0, 1, 2])])
    assert ok(rejoined.response).protocol_type == "consumer"


def test_s68_upgrade_while_completing_rebalance() -> None:
    """S68 (CompletingRebalance): the follower's parked SyncGroup is answered
    REBALANCE_IN_PROGRESS; members convert at the new generation; the classic sync timer
    is gone."""
    h = MigrationHarness()
    m1, m2 = stable_classic_group(h)
    j1 = h.cjoin(m1)
    j2 = h.cjoin(m2)
    assert ok(j1.response).generation_id == ok(j2.response).generation_id == 2
    assert h.classic().state is GroupState.COMPLETING_REBALANCE
    parked = h.csync(m2, 2)
    assert not parked.answered and h.timer.is_scheduled(classic_sync_key(GROUP))

    ok(h.join("new", ["foo"]))
    assert parked.response == SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS)
    assert h.member(m1).member_epoch == h.member(m2).member_epoch == 2
    assert h.group().group_epoch == 3
    assert not h.timer.is_scheduled(classic_sync_key(GROUP))
    h.assert_replayed()
    # Their SyncGroup at generation 2 now says: rejoin (a newer target exists).
    assert h.csync(m1, 2).response == SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS)


def test_s69_upgrade_blocked_by_custom_assignor_data() -> None:
    """S69: a classic assignment carrying user data (a custom assignor) cannot be
    converted: GROUP_ID_NOT_FOUND, nothing written, the classic group stays."""
    h = MigrationHarness()
    h.load_classic(classic_group_record(3, [("m1", ["foo"], [("foo", [0])])], user_data=b"custom"))
    before = len(h.log)
    response = h.join("new", ["foo"])
    assert response.error_code is ErrorCode.GROUP_ID_NOT_FOUND
    assert "unsupported custom assignor" in (response.error_message or "")
    assert len(h.log) == before
    assert h.classic().state is GroupState.STABLE and list(h.classic().members) == ["m1"]
    assert h.timer.is_scheduled(heartbeat_key(GROUP, "m1"))
    assert h.shard.consumer_group(GROUP) is None


@pytest.mark.parametrize(
    ("config", "metadata", "reason"),
    [
        ({"consumer_migration_policy": "downgrade"}, None, "the online upgrade is disabled"),
        ({"consumer_migration_policy": "DISABLED"}, None, "the online upgrade is disabled"),
        ({"consumer_max_size": 1}, None, "its size exceeds group.consumer.max.size"),
        ({}, b"\xff", "a member's subscription or assignment cannot be read"),
    ],
)
def test_upgrade_refused_by_policy_size_or_unreadable_metadata(
    config: dict[str, Any], metadata: bytes | None, reason: str
) -> None:
    h = MigrationHarness(**config)
    members = [("m1", ["foo"], [("foo", [0])]), ("m2", ["foo"], [("foo", [1])])]
    h.load_classic(classic_group_record(3, members, metadata=metadata))
    response = h.join("new", ["foo"])
    assert response.error_code is ErrorCode.GROUP_ID_NOT_FOUND
    assert response.error_message == (
        f"Cannot upgrade classic group {GROUP} to consumer group because {reason}."
    )
    assert h.last.records == [] and h.shard.consumer_group(GROUP) is None


def test_upgrade_allowed_by_upgrade_policy() -> None:
    h = MigrationHarness(consumer_migration_policy="Upgrade")
    h.load_classic(classic_group_record(3, [("m1", ["foo"], [("foo", [0])])]))
    assert ok(h.join("new", ["foo"])).member_epoch == 4


# =============================================================================================
# Classic members in a consumer group
# =============================================================================================


def test_s70_migration_disabled() -> None:
    """S70: with the policy `disabled` a classic JoinGroup to a non-empty consumer group
    is INCONSISTENT_GROUP_PROTOCOL; an empty consumer group still converts."""
    h = MigrationHarness(consumer_migration_policy="disabled")
    a = Client(h, "A")
    ok(a.join(["foo"]))
    before = len(h.log)
    reply = h.cjoin()
    assert reply.response == JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    assert len(h.log) == before
    ok(a.leave())
    assert h.cjoin().response.error_code is ErrorCode.MEMBER_ID_REQUIRED
    assert h.shard.consumer_group(GROUP) is None and h.classic().state is GroupState.EMPTY


def test_s71_classic_member_joins_a_consumer_group() -> None:
    """S71: JoinGroup v9 with MemberId "" gets MEMBER_ID_REQUIRED and a fresh id (nothing
    written); with it, the member joins: generation = its member epoch (the bumped group
    epoch), protocol "consumer"/"range", no leader, no members; its session timer uses the
    request's session timeout, its sync timer the rebalance timeout."""
    h = MigrationHarness()
    a = Client(h, "A")
    ok(a.join(["foo"]))
    epoch = h.group().group_epoch
    before = len(h.log)

    first = h.cjoin()
    member_id = first.response.member_id
    assert first.response == JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
    assert member_id and member_id not in h.group().metadata
    assert len(h.log) == before and h.group().group_epoch == epoch

    second = h.cjoin(member_id)
    assert second.response == JoinGroupResponse(
        NONE,
        generation_id=epoch + 1,
        protocol_type="consumer",
        protocol_name="range",
        leader="",
        skip_assignment=False,
        member_id=member_id,
        members=[],
    )
    group = h.group()
    assert group.group_epoch == group.assignment_epoch == epoch + 1
    assert group.metadata[member_id] == classic_member_metadata(["foo"])
    assert kinds(h.last.records) == [
        ("member", member_id, False),
        ("group", None, False),
        ("target", member_id, False),
        ("target", "A", False),
        ("target-meta", None, False),
        ("current", member_id, False),
    ]
    # Its partitions are still A's: it waits for them at the new epoch.
    member = h.member(member_id)
    assert member.member_epoch == epoch + 1
    assert member.state is MemberState.UNRELEASED_PARTITIONS
    assert h.timer.deadline(session_timeout_key(GROUP, member_id)) == h.now + SESSION
    assert h.timer.deadline(member_sync_key(GROUP, member_id)) == h.now + REBALANCE
    assert not h.timer.is_scheduled(member_join_key(GROUP, member_id))
    h.assert_replayed()


def test_s71_join_before_v4_and_static_join_need_no_member_id_round_trip() -> None:
    h = MigrationHarness()
    ok(Client(h, "A").join(["foo"]))
    old = h.cjoin(version=3)
    assert ok(old.response).member_id in h.group().metadata
    static = h.cjoin(instance="i1")
    member_id = ok(static.response).member_id
    assert h.group().static_member_id("i1") == member_id
    assert h.group().metadata[member_id].instance_id == "i1"


def test_s72_classic_join_errors_against_a_consumer_group() -> None:
    """S72: GROUP_MAX_SIZE_REACHED; INCONSISTENT_GROUP_PROTOCOL (a protocol the classic
    members do not all support, or another protocol type); UNKNOWN_MEMBER_ID (a static
    member id with an unknown instance id); FENCED_INSTANCE_ID (a known instance id with
    another member id). Nothing is written."""
    h = MigrationHarness(consumer_max_size=3)
    a = Client(h, "A")
    ok(a.join(["foo"]))
    static = ok(h.cjoin(instance="i1").response).member_id
    before = len(h.log)

    rr = [("roundrobin", subscription(["foo"]))]
    assert h.cjoin(protocols=rr).response == JoinGroupResponse(
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert h.cjoin(protocol_type="connect").response == JoinGroupResponse(
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert h.cjoin("m-x", instance="unknown").response == JoinGroupResponse(
        ErrorCode.UNKNOWN_MEMBER_ID, member_id="m-x"
    )
    assert h.cjoin("m-x", instance="i1").response == JoinGroupResponse(
        ErrorCode.FENCED_INSTANCE_ID, member_id="m-x"
    )
    assert len(h.log) == before

    # A protocol list that includes one every classic member supports is fine.
    either = [*rr, ("range", subscription(["foo"]))]
    member_id, joined = h.cjoin_new(protocols=either)
    assert ok(joined.response).protocol_name == "roundrobin"  # the member's first
    assert len(h.group()) == 3
    assert h.cjoin().response == JoinGroupResponse(ErrorCode.GROUP_MAX_SIZE_REACHED)
    assert h.cjoin("m-y").response == JoinGroupResponse(
        ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="m-y"
    )
    # Members already in (and static members taking their own place) are not new.
    assert ok(h.cjoin(member_id, protocols=either).response)
    assert ok(h.cjoin(static, instance="i1").response)
    assert static in h.group().metadata


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_s73_sync_group_from_a_classic_member(version: int) -> None:
    """S73: SyncGroup answers protocol "consumer", the member's protocol name and its
    assigned partitions, ConsumerProtocol-encoded at the version of its subscription;
    it writes nothing, cancels the sync timer and refreshes the session."""
    h = MigrationHarness()
    ok(Client(h, "A").join(["foo"]))
    member_id, joined = h.cjoin_new(topics=("bar",), sub_version=version)
    generation = ok(joined.response).generation_id
    assert h.timer.is_scheduled(member_sync_key(GROUP, member_id))
    h.sleep(1_000)
    before = len(h.log)

    reply = h.csync(member_id, generation)
    expected = assignment_at(version, [("bar", [0, 1, 2])])
    assert reply.response == SyncGroupResponse(NONE, "consumer", "range", expected)
    decoded = decode_assignment(reply.response.assignment)
    assert decoded.version == version and decoded.partitions == [("bar", [0, 1, 2])]
    assert len(h.log) == before
    assert not h.timer.is_scheduled(member_sync_key(GROUP, member_id))
    assert h.timer.deadline(session_timeout_key(GROUP, member_id)) == h.now + SESSION

    # SyncGroup v4 (no protocol type or name) gets them too.
    old = h.csync(member_id, generation, protocol_type=None, protocol_name=None, version=4)
    assert old.response == SyncGroupResponse(NONE, "consumer", "range", expected)


def test_s74_sync_group_errors_in_a_consumer_group() -> None:
    """S74: UNKNOWN_MEMBER_ID (unknown member, unknown instance id, or a member of the
    consumer protocol); FENCED_INSTANCE_ID; INCONSISTENT_GROUP_PROTOCOL (type not
    "consumer", or name not the member's); ILLEGAL_GENERATION (not the member epoch);
    REBALANCE_IN_PROGRESS (a newer target: the join timer starts)."""
    h = MigrationHarness({**TOPICS, "baz": 2})
    a, c, generation = mixed_group(h, static="i1")
    static = h.group().static_member_id("i1")
    assert static is not None
    static_generation = h.member(static).member_epoch
    assert h.csync(static, static_generation, instance="i1").response.error_code is (
        ErrorCode.REBALANCE_IN_PROGRESS  # C joined after it
    )
    before = len(h.log)

    def sync_error(member_id: str, gen: int, **kw: Any) -> ErrorCode:
        error: ErrorCode = h.csync(member_id, gen, **kw).response.error_code
        return error

    assert sync_error("unknown", generation) is ErrorCode.UNKNOWN_MEMBER_ID
    assert sync_error("A", a.epoch) is ErrorCode.UNKNOWN_MEMBER_ID
    assert sync_error(static, static_generation, instance="i2") is ErrorCode.UNKNOWN_MEMBER_ID
    assert sync_error(c, generation, instance="i1") is ErrorCode.FENCED_INSTANCE_ID
    assert sync_error(c, generation, protocol_type="connect") is (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert sync_error(c, generation, protocol_name="roundrobin") is (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert sync_error(c, generation + 1) is ErrorCode.ILLEGAL_GENERATION
    assert len(h.log) == before

    # A new member moves the target on: C must rejoin first.
    ok(Client(h, "B").join(["bar"]))
    assert h.group().assignment_epoch > h.member(c).member_epoch == generation
    assert not h.timer.is_scheduled(member_join_key(GROUP, c))
    assert sync_error(c, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.timer.deadline(member_join_key(GROUP, c)) == h.now + REBALANCE


def test_s75_classic_member_told_to_rejoin_only_once_the_new_target_exists() -> None:
    """S75: while the assignment interval holds the new target back (group epoch ahead of
    the assignment epoch), the classic member's SyncGroup and Heartbeat succeed; once the
    target is computed (here by the assignment timer when the interval ends) both say
    REBALANCE_IN_PROGRESS."""
    h = MigrationHarness(consumer_assignment_interval_ms=1_000)
    ok(Client(h, "A").join(["foo"]))
    h.sleep(1_000)
    c, joined = h.cjoin_new(topics=("bar",))
    generation = ok(joined.response).generation_id
    assert h.group().assignment_epoch == generation  # computed at once: the interval was over

    h.sleep(10)
    ok(Client(h, "B").join(["bar"]))
    group = h.group()
    assert group.group_epoch == generation + 1 and group.assignment_epoch == generation
    assert ok(h.csync(c, generation).response).assignment == assignment_at(1, [("bar", [0, 1, 2])])
    assert h.cheartbeat(c, generation) is NONE

    h.sleep(990)  # the interval ends: the target is computed
    assert h.group().assignment_epoch == generation + 1
    assert h.cheartbeat(c, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.csync(c, generation).response == SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS)


def test_s76_classic_heartbeat_in_a_consumer_group() -> None:
    """S76: NONE and the session refreshed; UNKNOWN_MEMBER_ID (unknown member, or a
    consumer-protocol member); FENCED_INSTANCE_ID; ILLEGAL_GENERATION;
    REBALANCE_IN_PROGRESS when the member epoch is behind the assignment epoch. Heartbeats
    write nothing (checked by the harness)."""
    h = MigrationHarness({**TOPICS, "baz": 2})
    a, c, generation = mixed_group(h, static="i1")
    static = h.group().static_member_id("i1")
    assert static is not None
    h.sleep(3_000)
    assert h.cheartbeat(c, generation) is NONE
    assert h.timer.deadline(session_timeout_key(GROUP, c)) == h.now + SESSION
    assert h.cheartbeat("unknown", generation) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.cheartbeat("A", a.epoch) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.cheartbeat(c, generation, instance="i1") is ErrorCode.FENCED_INSTANCE_ID
    assert h.cheartbeat(static, generation, instance="i9") is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.cheartbeat(c, generation + 1) is ErrorCode.ILLEGAL_GENERATION
    assert h.cheartbeat(c, generation - 1) is ErrorCode.ILLEGAL_GENERATION

    ok(Client(h, "B").join(["bar"]))
    assert h.cheartbeat(c, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.timer.deadline(member_join_key(GROUP, c)) == h.now + REBALANCE


def test_s76_rebalance_in_progress_while_unrevoked_or_when_awaited_partitions_are_free() -> None:
    """S76: REBALANCE_IN_PROGRESS while the member still has partitions to revoke, and
    when the partitions it awaits (UNRELEASED) are free; NONE while they are still held."""
    h = MigrationHarness()
    scripted = h.script("uniform")
    foo, bar = h.topic_id("foo"), h.topic_id("bar")
    a = Client(h, "A")
    scripted.layout = {"A": {foo: [0, 1, 2, 3, 4, 5]}}
    ok(a.join(["foo"]))

    # UNRELEASED: C's target foo-3..5 is still A's.
    scripted.layout = {"A": {foo: [0, 1, 2]}, "C": {foo: [3, 4, 5], bar: [0, 1, 2]}}
    joined = h.cjoin("C", topics=("foo", "bar"), version=3)
    generation = ok(joined.response).generation_id
    member = h.member("C")
    assert member.state is MemberState.UNRELEASED_PARTITIONS
    assert member.member_epoch == h.group().assignment_epoch == generation
    ok(h.csync("C", generation).response)
    assert h.cheartbeat("C", generation) is NONE  # still held by A
    ok(a.ack())  # A is told to revoke foo-3..5
    assert h.member("A").state is MemberState.UNREVOKED_PARTITIONS
    assert h.cheartbeat("C", generation) is NONE
    ok(a.ack())  # A revoked them: they are free
    assert h.member("A").state is MemberState.STABLE
    assert h.cheartbeat("C", generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.timer.deadline(member_join_key(GROUP, "C")) == h.now + REBALANCE
    rejoined = h.cjoin("C", topics=("foo", "bar"), owned=[("bar", [0, 1, 2])], version=3)
    assert ok(rejoined.response).generation_id == generation
    assert h.member("C").assigned_partitions == {
        foo: {3: generation, 4: generation, 5: generation},
        bar: {0: generation, 1: generation, 2: generation},
    }
    assert not h.timer.is_scheduled(member_join_key(GROUP, "C"))
    assert h.cheartbeat("C", generation) is NONE

    # UNREVOKED: B takes bar-2 from C; C reports it still owns it when it rejoins.
    scripted.layout = {
        "A": {foo: [0, 1, 2]},
        "C": {foo: [3, 4, 5], bar: [0, 1]},
        "B": {bar: [2]},
    }
    ok(Client(h, "B").join(["bar"]))
    assert h.cheartbeat("C", generation) is ErrorCode.REBALANCE_IN_PROGRESS
    owned_all = [("foo", [3, 4, 5]), ("bar", [0, 1, 2])]
    rejoined = h.cjoin("C", topics=("foo", "bar"), owned=owned_all, version=3)
    assert ok(rejoined.response).generation_id == generation  # the old epoch until revoked
    assert h.member("C").state is MemberState.UNREVOKED_PARTITIONS
    assert h.member("C").partitions_pending_revocation == {bar: {2: generation}}
    assert h.cheartbeat("C", generation) is ErrorCode.REBALANCE_IN_PROGRESS
    # Its SyncGroup answers what it keeps (no REBALANCE_IN_PROGRESS while revoking).
    synced = h.csync("C", generation)
    assert sorted(decode_assignment(ok(synced.response).assignment).partitions) == [
        ("bar", [0, 1]),
        ("foo", [3, 4, 5]),
    ]
    owned_kept = [("foo", [3, 4, 5]), ("bar", [0, 1])]
    rejoined = h.cjoin("C", topics=("foo", "bar"), owned=owned_kept, version=3)
    new_generation = ok(rejoined.response).generation_id
    assert new_generation == h.group().assignment_epoch > generation
    assert h.member("C").state is MemberState.STABLE
    assert h.cheartbeat("C", new_generation) is NONE


def test_s76_classic_member_told_to_rejoin_only_once_every_awaited_partition_is_free() -> None:
    """S76 / B.14: a classic member awaiting partitions held by two members is told to
    rejoin only when neither holds them any more (Kafka's `!waitingOnUnreleasedPartition`),
    not as soon as the first is released."""
    h = MigrationHarness()
    scripted = h.script("uniform")
    foo, bar = h.topic_id("foo"), h.topic_id("bar")
    a, b = Client(h, "A"), Client(h, "B")
    scripted.layout = {"A": {foo: [0, 1, 2, 3, 4, 5]}, "B": {bar: [0, 1, 2]}}
    ok(a.join(["foo"]))
    ok(b.join(["bar"]))
    settle(h, a, b)

    # C's target: foo-3 (A's) and bar-0 (B's).
    scripted.layout = {"A": {foo: [0, 1, 2, 4, 5]}, "B": {bar: [1, 2]}, "C": {foo: [3], bar: [0]}}
    generation = ok(h.cjoin("C", topics=("foo", "bar"), version=3).response).generation_id
    assert h.member("C").state is MemberState.UNRELEASED_PARTITIONS
    ok(h.csync("C", generation).response)
    assert h.cheartbeat("C", generation) is NONE

    ok(a.ack())
    ok(a.ack())  # A revoked foo-3: free; bar-0 is still B's
    assert h.group().current_partition_epoch(foo, 3) == -1
    assert h.cheartbeat("C", generation) is NONE
    assert not h.timer.is_scheduled(member_join_key(GROUP, "C"))

    ok(b.ack())
    ok(b.ack())  # B revoked bar-0: every awaited partition is free
    assert h.group().current_partition_epoch(bar, 0) == -1
    assert h.cheartbeat("C", generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.timer.deadline(member_join_key(GROUP, "C")) == h.now + REBALANCE


def test_s77_classic_member_fenced_on_session_timeout() -> None:
    """S77: a classic member that stops heartbeating is fenced after its own session
    timeout: its tombstones and one group epoch bump (a consumer member remains: no
    downgrade)."""
    h = MigrationHarness()
    a, c, generation = mixed_group(h)
    epoch = h.group().group_epoch
    h.sleep(SESSION - 1)
    assert c in h.group().metadata
    h.sleep(1)
    assert c not in h.group().metadata
    assert kinds(h.last.records) == [
        ("current", c, True),
        ("target", c, True),
        ("member", c, True),
        ("group", None, False),
    ]
    assert values_of(h.last.records, ConsumerGroupMetadataKey)[0].epoch == epoch + 1
    assert h.shard.classic_group(GROUP) is None
    h.assert_replayed()


def test_s77_classic_member_fenced_when_it_does_not_rejoin_in_time() -> None:
    """S77: told REBALANCE_IN_PROGRESS, a classic member must rejoin within its rebalance
    timeout (heartbeats do not extend it), else it is fenced. A rejoin stops the clock."""
    h = MigrationHarness()
    a, c, generation = mixed_group(h)
    ok(Client(h, "B").join(["bar"]))
    assert h.cheartbeat(c, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    deadline = h.now + REBALANCE
    assert h.timer.deadline(member_join_key(GROUP, c)) == deadline
    h.sleep(3_000)
    assert h.cheartbeat(c, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.timer.deadline(member_join_key(GROUP, c)) == deadline
    h.sleep(1_999)
    assert c in h.group().metadata
    epoch = h.group().group_epoch
    h.sleep(1)
    assert c not in h.group().metadata and h.group().group_epoch == epoch + 1
    h.assert_replayed()

    # Rejoining in time cancels the join timer (and starts the sync timer).
    d, joined = h.cjoin_new(topics=("bar",))
    d_generation = ok(joined.response).generation_id
    ok(h.csync(d, d_generation).response)
    ok(Client(h, "E").join(["bar"]))
    assert h.cheartbeat(d, d_generation) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.timer.is_scheduled(member_join_key(GROUP, d))
    ok(h.cjoin(d, topics=("bar",)).response)
    assert not h.timer.is_scheduled(member_join_key(GROUP, d))
    assert h.timer.deadline(member_sync_key(GROUP, d)) == h.now + REBALANCE


def test_s77_classic_member_fenced_when_it_does_not_sync_in_time() -> None:
    """A JoinGroup not followed by a SyncGroup within the rebalance timeout fences the
    member (Kafka's sync timer)."""
    h = MigrationHarness()
    ok(Client(h, "A").join(["foo"]))
    c, joined = h.cjoin_new(topics=("bar",))
    ok(joined.response)
    h.sleep(REBALANCE - 1)
    assert h.cheartbeat(c, joined.response.generation_id) is NONE  # heartbeats do not help
    h.sleep(1)
    assert c not in h.group().metadata
    assert kinds(h.last.records) == [
        ("current", c, True),
        ("target", c, True),
        ("member", c, True),
        ("group", None, False),
    ]


def test_s78_batch_leave_of_classic_members() -> None:
    """S78: per-member answers (unknown member or instance: UNKNOWN_MEMBER_ID; instance id
    with another member id: FENCED_INSTANCE_ID); the valid ones (by member id, or by
    instance id with MemberId "") are removed in one write with one epoch bump."""
    h = MigrationHarness()
    a, c1, _ = mixed_group(h)
    c2 = ok(h.cjoin(topics=("bar",), instance="i2").response).member_id
    epoch = h.group().group_epoch
    response = h.cleave(
        (c1, None),
        ("unknown", None),
        ("other", "i2"),
        ("", "i9"),
        ("", "i2"),
    )
    assert response == LeaveGroupResponse(
        NONE,
        [
            LeaveMemberResponse(c1, None, NONE),
            LeaveMemberResponse("unknown", None, ErrorCode.UNKNOWN_MEMBER_ID),
            LeaveMemberResponse("other", "i2", ErrorCode.FENCED_INSTANCE_ID),
            LeaveMemberResponse("", "i9", ErrorCode.UNKNOWN_MEMBER_ID),
            LeaveMemberResponse("", "i2", NONE),
        ],
    )
    assert kinds(h.last.records) == [
        ("current", c1, True),
        ("target", c1, True),
        ("member", c1, True),
        ("current", c2, True),
        ("target", c2, True),
        ("member", c2, True),
        ("group", None, False),
    ]
    assert values_of(h.last.records, ConsumerGroupMetadataKey)[0].epoch == epoch + 1
    assert list(h.group().metadata) == ["A"]
    for member_id in (c1, c2):
        assert not h.timer.is_scheduled(session_timeout_key(GROUP, member_id))
    h.assert_replayed()


def test_s78_leave_without_a_valid_member_writes_nothing() -> None:
    h = MigrationHarness()
    a, c, generation = mixed_group(h)
    before = len(h.log)
    response = h.cleave(("unknown", None), ("", "i1"))
    assert response == LeaveGroupResponse(
        NONE,
        [
            LeaveMemberResponse("unknown", None, ErrorCode.UNKNOWN_MEMBER_ID),
            LeaveMemberResponse("", "i1", ErrorCode.UNKNOWN_MEMBER_ID),
        ],
    )
    assert h.last.records == [] and len(h.log) == before
    # LeaveGroup v0-2: one member, its error at the top.
    assert h.cleave(("unknown", None), version=2) == LeaveGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID)
    assert h.cleave((c, None), version=2) == LeaveGroupResponse(NONE)
    assert c not in h.group().metadata


# =============================================================================================
# Downgrade: consumer -> classic
# =============================================================================================


def downgrade_records(
    h: MigrationHarness, remaining: dict[str, int], epoch: int, at_ms: int | None = None
) -> list[Record]:
    """What the downgrade at `at_ms` (default now) writes: every tombstone of the consumer
    group (D.6 order: current assignments, targets, target metadata, member metadata,
    group epoch), then the classic group's GroupMetadata (Stable, generation = the group
    epoch, each remaining member's target as its assignment at its subscription's version).
    `remaining`: member id -> ConsumerProtocol version of its subscription."""
    group = h.group()
    records: list[Record] = []
    records += [(ConsumerGroupCurrentMemberAssignmentKey(GROUP, m), None) for m in group.members]
    records += [(ConsumerGroupTargetAssignmentMemberKey(GROUP, m), None) for m in group.target]
    records.append((ConsumerGroupTargetAssignmentMetadataKey(GROUP), None))
    records += [(ConsumerGroupMemberMetadataKey(GROUP, m), None) for m in group.metadata]
    records.append((ConsumerGroupMetadataKey(GROUP), None))
    members = []
    for member_id, version in remaining.items():
        meta = group.metadata[member_id]
        classic = meta.classic_member_metadata
        assert classic is not None
        target = group.target.get(member_id, {})
        assigned = [
            (name, sorted(parts))
            for topic_id, parts in sorted(target.items(), key=lambda t: t[0].int)
            if (name := h.topics.topic_name(topic_id)) is not None
        ]
        members.append(
            MemberMetadata(
                member_id=member_id,
                group_instance_id=meta.instance_id,
                client_id=CLIENT,
                client_host=HOST,
                rebalance_timeout=REBALANCE,
                session_timeout=classic.session_timeout_ms,
                subscription=classic.supported_protocols[0].metadata,
                assignment=assignment_at(version, assigned),
            )
        )
    records.append(
        (
            GroupMetadataKey(GROUP),
            GroupMetadataValue(
                protocol_type="consumer",
                generation=epoch,
                protocol="range",
                leader=next(iter(remaining)),
                current_state_timestamp=h.now if at_ms is None else at_ms,
                members=tuple(members),
            ),
        )
    )
    return records


def assert_downgraded(h: MigrationHarness, remaining: list[str], generation: int) -> ClassicGroup:
    """The classic group after the downgrade timer ran: PreparingRebalance at
    `generation`, sessions (classic heartbeat timers) and the join timer armed, the
    consumer group and its timers gone; replay rebuilds the same."""
    assert h.shard.consumer_group(GROUP) is None
    group = h.classic()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.generation_id == generation and list(group.members) == remaining
    assert h.timer.deadline(classic_join_key(GROUP)) == h.now + REBALANCE
    for member_id in remaining:
        assert h.timer.deadline(heartbeat_key(GROUP, member_id)) == h.now + SESSION
        for key in (session_timeout_key, rebalance_timeout_key, member_join_key, member_sync_key):
            assert not h.timer.is_scheduled(key(GROUP, member_id))
    assert not h.timer.is_scheduled(downgrade_key(GROUP))
    h.assert_replayed()
    return group


def classic_and_consumer_member(h: MigrationHarness) -> tuple[Client, str, int]:
    """m2 (consumer protocol) and m1 (classic protocol, v1 subscription) share foo; both
    reconciled: m2 foo-0..2, m1 foo-3..5. Returns (m2, m1, m1's generation)."""
    m2 = Client(h, "m2")
    ok(m2.join(["foo"]))
    m1, joined = h.cjoin_new()
    generation = ok(joined.response).generation_id
    ok(h.csync(m1, generation).response)
    ok(m2.ack())
    ok(m2.ack())
    assert h.cheartbeat(m1, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    ok(h.cjoin(m1).response)
    ok(h.csync(m1, generation).response)
    assert h.group().state() is ConsumerGroupState.STABLE
    return m2, m1, generation


def test_s79_downgrade_when_the_last_consumer_protocol_member_leaves() -> None:
    """S79: policy `downgrade`; m2 (consumer protocol) leaves, m1 (classic) remains: the
    consumer group's tombstones then a Stable classic group at generation = group epoch
    with m1's target as its assignment; the timer starts its rebalance (PreparingRebalance,
    m1's session and the join timer armed). m1's heartbeat at its epoch is told to rejoin,
    and it rejoins the classic group. A failed write leaves the consumer group as it was
    (the shard reloads from the log)."""
    h = MigrationHarness(consumer_migration_policy="downgrade")
    m2, m1, generation = classic_and_consumer_member(h)
    epoch = h.group().group_epoch
    before = group_state(h.group())

    # The write fails: nothing is logged, the shard reloads from the log.
    replies: list[Any] = []
    failed = h.shard.consumer.heartbeat(
        ConsumerHeartbeatRequest(GROUP, "m2", -1, client_id=CLIENT, client_host=HOST),
        replies.append,
        h.now,
    )
    assert any(isinstance(key, GroupMetadataKey) for key, _ in failed.records)
    h.reload()
    assert group_state(h.group()) == before and h.shard.classic_group(GROUP) is None

    expected = downgrade_records(h, {m1: 1}, epoch)
    assert ok(m2.leave()).member_epoch == -1
    assert h.last.records == expected
    assert h.classic().state is GroupState.STABLE  # the rebalance starts from the timer
    assert h.timer.is_scheduled(downgrade_key(GROUP))
    h.sleep(0)
    group = assert_downgraded(h, [m1], epoch)
    assert group.leader_id == m1 and group.protocol_name == "range"

    assert h.cheartbeat(m1, epoch) is ErrorCode.REBALANCE_IN_PROGRESS
    rejoined = h.cjoin(m1)
    metadata = subscription(["foo"])
    assert rejoined.response == JoinGroupResponse(
        NONE,
        generation_id=epoch + 1,
        protocol_type="consumer",
        protocol_name="range",
        leader=m1,
        member_id=m1,
        members=[JoinGroupMember(m1, None, metadata)],
    )
    everything = encode_assignment([("foo", [0, 1, 2, 3, 4, 5])])
    synced = h.csync(m1, epoch + 1, {m1: everything})
    assert synced.response == SyncGroupResponse(NONE, "consumer", "range", everything)
    assert h.classic().state is GroupState.STABLE


def test_s80_downgrade_on_session_timeout_of_the_last_consumer_member() -> None:
    h = MigrationHarness()
    m2, m1, generation = classic_and_consumer_member(h)
    epoch = h.group().group_epoch
    deadline = h.timer.deadline(session_timeout_key(GROUP, "m2"))
    assert deadline is not None
    expected = downgrade_records(h, {m1: 1}, epoch, deadline)
    while h.now + 9_000 < deadline:  # m1 keeps its own session
        h.sleep(9_000)
        assert h.cheartbeat(m1, generation) is NONE
    fired = h.sleep(deadline - h.now)
    assert fired.records[: len(expected)] == expected
    assert_downgraded(h, [m1], epoch)


def test_s80_downgrade_on_rebalance_timeout_of_the_last_consumer_member() -> None:
    """The consumer member does not revoke in time: fenced by its rebalance timeout, which
    downgrades the group; m1 gets its target (what m2 had to give up included)."""
    h = MigrationHarness()
    m2 = Client(h, "m2")
    ok(m2.join(["foo"]))
    m1, joined = h.cjoin_new()
    generation = ok(joined.response).generation_id
    ok(h.csync(m1, generation).response)
    ok(m2.ack())  # told to revoke; it never confirms
    assert h.member("m2").state is MemberState.UNREVOKED_PARTITIONS
    deadline = h.timer.deadline(rebalance_timeout_key(GROUP, "m2"))
    assert deadline == h.now + 5_000
    epoch = h.group().group_epoch
    expected = downgrade_records(h, {m1: 1}, epoch, deadline)
    assert h.group().target[m1] == {h.topic_id("foo"): frozenset({3, 4, 5})}
    h.sleep(4_000)
    assert h.cheartbeat(m1, generation) is NONE  # its partitions are still held
    fired = h.sleep(1_000)
    assert fired.records[: len(expected)] == expected
    group = assert_downgraded(h, [m1], epoch)
    assert decode_assignment(group.members[m1].assignment).partitions == [("foo", [3, 4, 5])]


def test_s80_downgrade_on_admin_removal_of_the_last_consumer_member() -> None:
    """Admin removal (LeaveGroup by instance id, MemberId "") of the last
    consumer-protocol member downgrades the group too."""
    h = MigrationHarness()
    m2 = Client(h, "m2", instance_id="i2")
    ok(m2.join(["foo"]))
    m1, joined = h.cjoin_new(topics=("bar",))
    generation = ok(joined.response).generation_id
    ok(h.csync(m1, generation).response)
    epoch = h.group().group_epoch
    expected = downgrade_records(h, {m1: 1}, epoch)
    response = h.cleave(("", "i2"))
    assert response == LeaveGroupResponse(NONE, [LeaveMemberResponse("", "i2", NONE)])
    assert h.last.records == expected
    h.sleep(0)
    group = assert_downgraded(h, [m1], epoch)
    assert decode_assignment(group.members[m1].assignment).partitions == [("bar", [0, 1, 2])]


def test_s81_no_downgrade_when_the_classic_members_exceed_group_max_size() -> None:
    """S81: two classic members would remain but group.max.size is 1: the leaving member
    is simply removed (tombstones and an epoch bump); the group stays a consumer group."""
    h = MigrationHarness(max_size=1)
    a, c1, _ = mixed_group(h)
    c2, joined = h.cjoin_new(topics=("bar",))
    ok(joined.response)
    epoch = h.group().group_epoch
    ok(a.leave())
    assert kinds(h.last.records) == [
        ("current", "A", True),
        ("target", "A", True),
        ("member", "A", True),
        ("group", None, False),
    ]
    assert h.group().group_epoch == epoch + 1
    assert set(h.group().metadata) == {c1, c2}
    assert h.shard.classic_group(GROUP) is None
    assert not h.timer.is_scheduled(downgrade_key(GROUP))
    h.assert_replayed()


# =============================================================================================
# A whole migration, both ways
# =============================================================================================


def assert_exclusive(h: MigrationHarness, clients: dict[str, set[tuple[str, int]]]) -> None:
    """No partition is owned by two members: neither in the coordinator's view (assigned or
    pending revocation) nor in what the clients were told they own."""
    group = h.shard.consumer_group(GROUP)
    if group is not None:
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for member_id, member in group.members.items():
            for partition in member.owned_partitions():
                assert partition not in seen, (partition, seen[partition], member_id)
                seen[partition] = member_id
    held: dict[tuple[str, int], str] = {}
    for name, owned in clients.items():
        for partition in owned:
            assert partition not in held, (partition, held[partition], name)
            held[partition] = name


def test_mixed_group_migrates_both_ways() -> None:
    """A consumer member (A) and a classic member (C, cooperative: v1 subscriptions with its
    owned partitions) share foo(6); a second consumer member (B) comes and goes. Partitions
    move only once released, never owned twice. When the last consumer member leaves, the
    group becomes classic; C rejoins it, leads, and takes every partition."""
    h = MigrationHarness()
    foo = h.topic_id("foo")
    a = Client(h, "A")
    ok(a.join(["foo"]))
    c_owned: set[int] = set()

    def a_owned() -> set[tuple[str, int]]:
        return {("foo", p) for t, ps in a.owned for p in ps if t == foo}

    def check() -> None:
        assert_exclusive(h, {"A": a_owned(), "C": {("foo", p) for p in c_owned}})

    def c_sync(generation: int) -> set[int]:
        response = ok(h.csync("C", generation).response)
        parts = dict(decode_assignment(response.assignment).partitions).get("foo", [])
        return set(parts)

    def c_join() -> int:
        owned = [("foo", sorted(c_owned))] if c_owned else []
        generation: int = ok(h.cjoin("C", owned=owned).response).generation_id
        return generation

    check()
    generation = c_join()
    c_owned = c_sync(generation)
    assert c_owned == set()  # its partitions are still A's
    check()
    ok(a.ack())  # A gives up what C is to get...
    check()
    assert h.cheartbeat("C", generation) is NONE
    ok(a.ack())  # ...and confirms
    check()
    assert h.cheartbeat("C", generation) is ErrorCode.REBALANCE_IN_PROGRESS
    generation = c_join()
    c_owned = c_sync(generation)
    assert len(c_owned) == 3 and a_owned() == {("foo", p) for p in set(range(6)) - c_owned}
    check()
    h.assert_replayed()

    # B joins: both A and C give something up, B gets it once released.
    b = Client(h, "B")
    ok(b.join(["foo"]))
    check()
    for _ in range(6):
        ok(a.ack())
        b_owned = {("foo", p) for t, ps in b.owned for p in ps}
        assert_exclusive(h, {"A": a_owned(), "B": b_owned, "C": {("foo", p) for p in c_owned}})
        error = h.cheartbeat("C", generation)
        if error is ErrorCode.REBALANCE_IN_PROGRESS:
            generation = c_join()
            c_owned = c_sync(generation)
        ok(b.ack())
        b_owned = {("foo", p) for t, ps in b.owned for p in ps}
        assert_exclusive(h, {"A": a_owned(), "B": b_owned, "C": {("foo", p) for p in c_owned}})
    assert h.group().state() is ConsumerGroupState.STABLE
    assert len(c_owned) == 2 and len(a.owned_dict()[foo]) == 2 and len(b.owned_dict()[foo]) == 2

    # B leaves: the group epoch moves, A and C get B's partitions back.
    ok(b.leave())
    assert h.shard.consumer_group(GROUP) is not None
    for _ in range(3):
        ok(a.ack())
        if h.cheartbeat("C", generation) is ErrorCode.REBALANCE_IN_PROGRESS:
            generation = c_join()
            c_owned = c_sync(generation)
        check()
    assert h.group().state() is ConsumerGroupState.STABLE
    assert len(c_owned) == 3
    h.assert_replayed()

    # A leaves: only C remains, a classic member: the group becomes classic.
    epoch = h.group().group_epoch
    c_target = sorted(c_owned)
    ok(a.leave())
    a.owned = []
    h.sleep(0)
    group = assert_downgraded(h, ["C"], epoch)
    assert decode_assignment(group.members["C"].assignment).partitions == [("foo", c_target)]
    check()

    # C rejoins the classic group, leads it and assigns itself everything.
    assert h.cheartbeat("C", generation) is ErrorCode.REBALANCE_IN_PROGRESS
    joined = h.cjoin("C", owned=[("foo", sorted(c_owned))])
    response = ok(joined.response)
    assert response.generation_id == epoch + 1 and response.leader == "C"
    assert [m.member_id for m in response.members] == ["C"]
    assert decode_subscription(response.members[0].metadata).topics == ["foo"]
    everything = encode_assignment([("foo", list(range(6)))])
    synced = ok(h.csync("C", epoch + 1, {"C": everything}).response)
    c_owned = set(dict(decode_assignment(synced.assignment).partitions)["foo"])
    assert c_owned == set(range(6))
    assert h.classic().state is GroupState.STABLE
    assert h.cheartbeat("C", epoch + 1) is NONE
    check()
    h.assert_replayed()


def test_s82_static_classic_member_replaces_the_last_consumer_static_member() -> None:
    """S82: the last consumer-protocol member is static and temporarily gone (-2); a classic
    client with its instance id joins: the group becomes a classic group in which the
    newcomer inherits the replaced member's target, and the join is a classic static
    rejoin, answered at once with that assignment (no rebalance): the classic member m1
    keeps its partitions and generation."""
    h = MigrationHarness()
    s2 = Client(h, "s2", instance_id="i2")
    ok(s2.join(["foo"]))
    m1, joined = h.cjoin_new()
    generation = ok(joined.response).generation_id
    ok(h.csync(m1, generation).response)
    ok(s2.ack())
    ok(s2.ack())
    assert h.cheartbeat(m1, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    generation = ok(h.cjoin(m1).response).generation_id
    ok(h.csync(m1, generation).response)
    assert h.group().state() is ConsumerGroupState.STABLE
    epoch = h.group().group_epoch
    s2_target = sorted(h.group().target["s2"][h.topic_id("foo")])
    ok(s2.leave(-2))

    rejoined = h.cjoin(instance="i2")
    response = ok(rejoined.response)
    assert h.shard.consumer_group(GROUP) is None
    group = h.classic()
    assert group.state is GroupState.STABLE and group.generation_id == epoch
    newcomer = response.member_id
    assert newcomer not in ("", "s2") and sorted(group.members) == sorted([m1, newcomer])
    assert group.static_member_id("i2") == newcomer
    assert response.generation_id == epoch
    # The newcomer's assignment is s2's old target; m1's is unchanged.
    synced = h.csync(newcomer, epoch, instance="i2")
    assert decode_assignment(ok(synced.response).assignment).partitions == [("foo", s2_target)]
    assert h.cheartbeat(m1, epoch) is NONE
    assert not h.timer.is_scheduled(session_timeout_key(GROUP, "s2"))
    h.assert_replayed()


def test_classic_static_member_replaces_an_active_consumer_static_member() -> None:
    """A.5 / B.12: a classic JoinGroup with the instance id of a consumer-protocol member
    replaces it even while that member is active (epoch > 0): Kafka checks for an
    unreleased instance only when both use the consumer protocol, and classic never
    returns UNRELEASED_INSTANCE_ID. A rolling downgrade of static consumers depends on it."""
    h = MigrationHarness()
    ok(Client(h, "A").join(["foo"]))
    s = Client(h, "S", instance_id="i1")
    ok(s.join(["foo"]))
    assert h.member("S").member_epoch > 0  # active, never released

    joined = h.cjoin(instance="i1")

    newcomer = ok(joined.response).member_id
    group = h.group()
    assert newcomer != "S" and group.static_member_id("i1") == newcomer
    assert "S" not in group.metadata and group.metadata[newcomer].classic_member_metadata
    h.assert_replayed()


# =============================================================================================
# A static classic member restarted with group.protocol=consumer (rolling upgrade)
# =============================================================================================


def test_consumer_static_member_replaces_an_unreleased_classic_static_member() -> None:
    """B.4 step 4 / B.12: a consumer-protocol member joining (epoch 0) with the instance id
    of a classic-protocol member replaces it whatever that member's epoch: a classic static
    member sends no LeaveGroup when it restarts, so it never reaches epoch -2, and
    UNRELEASED_INSTANCE_ID would be fatal to the upgraded Java client."""
    h = MigrationHarness({**TOPICS, "baz": 2})
    mixed_group(h, static="i1")
    old = h.group().static_member_id("i1")
    assert old is not None
    old_member = h.member(old)
    assert old_member.member_epoch > 0  # never released
    old_target = h.group().target[old]

    response = ok(Client(h, "new-i1", instance_id="i1").join(["baz"]))

    group = h.group()
    assert response.member_id == "new-i1"
    assert group.static_member_id("i1") == "new-i1" and old not in group.metadata
    # It inherits the classic member's assignment and target, as a consumer member.
    assert group.target["new-i1"] == old_target
    assert group.member("new-i1").assigned_partitions == old_member.assigned_partitions  # type: ignore[union-attr]
    assert group.metadata["new-i1"].classic_member_metadata is None
    for key in (session_timeout_key, member_join_key, member_sync_key):
        assert not h.timer.is_scheduled(key(GROUP, old))
    h.assert_replayed()


def test_rolling_upgrade_replaces_a_static_member_of_a_classic_group() -> None:
    """B.14 then B.4 step 4: the first static classic member restarted with
    group.protocol=consumer upgrades the classic group and takes the place of its own
    former classic member (same instance id), inheriting its partitions; the other classic
    member stays."""
    h = MigrationHarness()
    key, value = classic_group_record(
        5, [("m1", ["foo"], [("foo", [0, 1, 2])]), ("m2", ["foo"], [("foo", [3, 4, 5])])]
    )
    members = (dataclasses.replace(value.members[0], group_instance_id="i1"), value.members[1])
    h.load_classic((key, dataclasses.replace(value, members=members)))

    response = ok(Client(h, "new-i1", instance_id="i1").join(["foo"]))

    assert h.shard.classic_group(GROUP) is None
    group = h.group()
    assert sorted(group.metadata) == ["m2", "new-i1"]
    assert group.static_member_id("i1") == "new-i1"
    assert response.member_epoch == group.assignment_epoch == 5
    assert assignment(response) == {h.topic_id("foo"): [0, 1, 2]}
    assert group.metadata["m2"].classic_member_metadata is not None
    # The replaced member's session does not outlive it (the upgrade moves the others').
    assert not h.timer.is_scheduled(session_timeout_key(GROUP, "m1"))
    assert h.timer.deadline(session_timeout_key(GROUP, "m2")) == h.now + SESSION
    h.assert_replayed()

"""Classic group protocol on a pure GroupShard: scenarios S83-S124 of
shared/reference/scenarios.md, one test each, plus a replay property.

The harness is the shard test context (shard_context.py), which plays the runtime: it
replays each Result's `records` into the shard (classic handlers put theirs in
`applied_records`, which are only logged), keeps every record written in `log` (what a
reload reads back), and captures replies. Time moves only through `sleep`. Timings follow
our ManualTimer, which runs a timer callback at its due time (Kafka's MockTimer runs it when
the test's sleep ends, which shifts the scenario texts' extended delays by a millisecond or
two)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.groups.classic.group import ClassicGroup, ClassicMember, GroupState
from groupcoord.coordinator.groups.classic.messages import (
    AUTHORIZED_OPERATIONS_OMITTED,
    DescribedMember,
    HeartbeatRequest,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupResponse,
    LeaveMemberResponse,
    ListedGroup,
    SyncGroupRequest,
    SyncGroupResponse,
)
from groupcoord.coordinator.groups.classic.rebalance import heartbeat_key, join_key, sync_key
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.result import Record, Result
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from tests.unit.classic_support import (
    CLIENT,
    HOST,
    REBALANCE,
    SESSION,
    join_request,
    leave_request,
    sync_request,
)
from tests.unit.shard_context import Capture, ShardContext

GROUP = "group-id"
DELAY = 100  # group.initial.rebalance.delay.ms in these tests
RANGE = [("range", b"range-metadata")]
RANGE_RR = [("range", b"range-metadata"), ("roundrobin", b"rr-metadata")]


def uuid(n: int) -> str:
    return f"00000000-0000-0000-0000-{n:012x}"


class Harness(ShardContext):
    def __init__(self, **config: Any) -> None:
        settings_: dict[str, Any] = {
            "initial_rebalance_delay_ms": DELAY,
            "min_session_timeout_ms": 10,
        }
        settings_.update(config)
        super().__init__(GroupConfig(**settings_))

    def group(self, group_id: str = GROUP) -> ClassicGroup:
        group = self.shard.classic_group(group_id)
        assert group is not None
        return group

    # -- requests ----------------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        *,
        group: str = GROUP,
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        session: int = SESSION,
        rebalance: int = REBALANCE,
        version: int = 9,
        client_id: str = CLIENT,
    ) -> Capture:
        request = join_request(
            group,
            member_id,
            list(RANGE if protocols is None else protocols),
            protocol_type=protocol_type,
            instance=instance,
            session=session,
            rebalance=rebalance,
            version=version,
            client_id=client_id,
        )
        return self.send_join_group(request)

    def join_dynamic(self, **kwargs: Any) -> tuple[str, Capture]:
        """The v4+ two-step join: MEMBER_ID_REQUIRED, then the parked JoinGroup."""
        first = self.join(**kwargs)
        assert first.response.error_code is ErrorCode.MEMBER_ID_REQUIRED
        member_id = first.response.member_id
        return member_id, self.join(member_id, **kwargs)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance: str | None = None,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
        version: int = 5,
        group: str = GROUP,
    ) -> Capture:
        request = sync_request(
            group,
            member_id,
            generation,
            assignments,
            instance=instance,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            version=version,
        )
        return self.send_sync_group(request)

    def heartbeat(
        self, member_id: str, generation: int, *, instance: str | None = None, group: str = GROUP
    ) -> ErrorCode:
        capture = self.send_heartbeat(HeartbeatRequest(group, member_id, generation, instance))
        assert not self.last.records and not self.last.applied_records
        error: ErrorCode = capture.response.error_code
        return error

    def leave(
        self, *members: tuple[str, str | None], version: int = 5, group: str = GROUP
    ) -> LeaveGroupResponse:
        capture = self.send_leave_group(leave_request(group, members, version))
        response: LeaveGroupResponse = capture.response
        return response

    def make_stable(self, *instances: str | None, **join: Any) -> list[str]:
        """A Stable generation-1 group: members join at t0 (dynamic ones by the two-step
        join, static ones directly), the join completes after the (once extended) initial
        delay, the first member leads and assigns `assignment-<i>`, everyone syncs."""
        group = join.get("group", GROUP)
        ids: list[str] = []
        captures: list[Capture] = []
        for instance in instances:
            if instance is None:
                member_id, capture = self.join_dynamic(**join)
            else:
                capture = self.join(instance=instance, **join)
                member_id = self.group(group).static_member_id(instance) or ""
            ids.append(member_id)
            captures.append(capture)
        self.sleep(2 * DELAY)
        for capture in captures:
            assert capture.response.error_code is ErrorCode.NONE
            assert capture.response.generation_id == 1
            assert capture.response.leader == ids[0]
        assignments = {m: f"assignment-{i}".encode() for i, m in enumerate(ids)}
        sync = self.sync(ids[0], 1, assignments, instance=instances[0], group=group)
        assert sync.response.error_code is ErrorCode.NONE
        for member_id, instance in zip(ids[1:], instances[1:], strict=True):
            follower = self.sync(member_id, 1, instance=instance, group=group)
            assert follower.response.error_code is ErrorCode.NONE
        assert self.group(group).state is GroupState.STABLE
        return ids


def group_records(records: list[Record]) -> list[tuple[str, GroupMetadataValue | None]]:
    out = []
    for key, value in records:
        assert isinstance(key, GroupMetadataKey)
        out.append((key.group, value))
    return out


def empty_record(timestamp: int) -> GroupMetadataValue:
    return GroupMetadataValue(
        protocol_type="",
        generation=0,
        protocol=None,
        leader=None,
        current_state_timestamp=timestamp,
        members=(),
    )


def member_record(
    member_id: str,
    assignment: bytes,
    instance: str | None = None,
    subscription: bytes = b"range-metadata",
) -> MemberMetadata:
    return MemberMetadata(
        member_id=member_id,
        group_instance_id=instance,
        client_id=CLIENT,
        client_host=HOST,
        rebalance_timeout=REBALANCE,
        session_timeout=SESSION,
        subscription=subscription,
        assignment=assignment,
    )


def dynamic_id(n: int) -> str:
    return f"{CLIENT}-{uuid(n)}"


# =============================================================================================
# JoinGroup
# =============================================================================================


def test_s83_unknown_member_id_to_missing_group() -> None:
    h = Harness()
    for instance in (None, "group-instance-id"):
        reply = h.join("member-id", instance=instance)
        assert reply.response == JoinGroupResponse(
            ErrorCode.UNKNOWN_MEMBER_ID, member_id="member-id"
        )
        assert h.last.records == [] and h.last.applied_records == []
    assert h.shard.classic_group(GROUP) is None
    assert h.log == []


def test_s84_member_id_required_round_trip() -> None:
    h = Harness()
    first = h.join(version=4)
    member_id = dynamic_id(1)
    assert first.response == JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
    group = h.group()
    assert group.state is GroupState.EMPTY and not group.members
    assert group.pending_members == {member_id}
    assert h.timer.deadline(heartbeat_key(GROUP, member_id)) == SESSION
    # The JoinGroup created the group, and Kafka commits a new group with an empty record.
    assert group_records(h.last.applied_records) == [(GROUP, empty_record(0))]
    assert h.last.records == []

    bad = h.join(member_id, protocols=[], version=4)
    assert bad.response == JoinGroupResponse(
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id
    )
    assert h.last.applied_records == []

    good = h.join(member_id, version=4)
    assert not good.answered
    assert h.last.applied_records == []
    assert group.state is GroupState.PREPARING_REBALANCE
    assert h.timer.deadline(heartbeat_key(GROUP, member_id)) == 300_000  # new-member timeout
    h.sleep(DELAY)
    assert good.response == JoinGroupResponse(
        ErrorCode.NONE,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=member_id,
        member_id=member_id,
        members=[JoinGroupMember(member_id, None, b"range-metadata")],
    )
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert h.timer.deadline(heartbeat_key(GROUP, member_id)) == DELAY + SESSION
    assert h.timer.deadline(sync_key(GROUP)) == DELAY + REBALANCE
    assert len(h.log) == 1  # completing the join writes nothing


def test_s85_pending_member_expires() -> None:
    h = Harness()
    first = h.join(session=1000)
    member_id = first.response.member_id
    assert h.group().pending_members == {member_id}
    expired = h.sleep(999)
    assert h.group().pending_members == {member_id}
    expired = h.sleep(1)
    assert h.group().pending_members == set() and not h.group().members
    assert expired.replies == [] and expired.applied_records == []
    again = h.join(member_id)
    assert again.response == JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)


def test_s86_inconsistent_protocol_type() -> None:
    h = Harness()
    member_id, parked = h.join_dynamic()
    other = h.join(protocol_type="connect")
    assert other.response == JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id="")
    # Also for the existing member switching type.
    again = h.join(member_id, protocol_type="connect")
    assert again.response.error_code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert again.response.member_id == member_id
    assert not parked.answered


def test_s87_empty_protocol_type_or_list() -> None:
    for instance in (None, "group-instance-id"):
        for protocol_type, protocols in (("", RANGE), ("consumer", [])):
            h = Harness()
            reply = h.join(instance=instance, protocol_type=protocol_type, protocols=protocols)
            assert reply.response == JoinGroupResponse(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=""
            )
            # Kafka still commits the group the request created (an empty record).
            assert group_records(h.last.applied_records) == [(GROUP, empty_record(0))]
            assert h.group().state is GroupState.EMPTY and not h.group().members


def test_s88_no_common_protocol() -> None:
    h = Harness()
    a, a_reply = h.join_dynamic()
    b = h.join(protocols=[("roundrobin", b"rr")])
    assert b.response == JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id="")
    assert list(h.group().members) == [a]
    h.sleep(DELAY)
    assert a_reply.response.error_code is ErrorCode.NONE
    assert a_reply.response.generation_id == 1


def test_s89_session_timeout_bounds() -> None:
    h = Harness(min_session_timeout_ms=6_000, max_session_timeout_ms=300_000)
    for session in (5_999, 300_001):
        reply = h.join("member-id", session=session)
        assert reply.response == JoinGroupResponse(
            ErrorCode.INVALID_SESSION_TIMEOUT, member_id="member-id"
        )
    assert h.shard.classic_group(GROUP) is None and h.log == []
    assert h.join(session=6_000).response.error_code is ErrorCode.MEMBER_ID_REQUIRED


def test_s90_max_size_dynamic() -> None:
    h = Harness(max_size=10)
    # While Empty, ids are handed out freely.
    ids = [h.join().response.member_id for _ in range(12)]
    assert len(h.group().pending_members) == 12
    parked = [h.join(member_id) for member_id in ids[:10]]
    assert all(not p.answered for p in parked)
    assert h.group().awaiting_join_count() == 10
    rejected = h.join(ids[10])
    assert rejected.response == JoinGroupResponse(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
    assert ids[10] not in h.group().pending_members
    h.sleep(2 * DELAY)
    assert all(p.response.error_code is ErrorCode.NONE for p in parked)
    group = h.group()
    assert group.state is GroupState.COMPLETING_REBALANCE and group.size == 10
    # After completion: beyond the limit rejected (the last pending id too), members may rejoin.
    assert h.join().response.error_code is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert h.join(ids[11]).response.error_code is ErrorCode.GROUP_MAX_SIZE_REACHED
    rejoin = h.join(ids[3])
    assert rejoin.response.error_code is ErrorCode.NONE
    assert rejoin.response.generation_id == 1 and rejoin.response.members == []


def test_s91_max_size_static() -> None:
    h = Harness(max_size=10)
    parked = [h.join(instance=f"instance-{i}") for i in range(10)]
    rejected = h.join(instance="instance-10")
    assert rejected.response == JoinGroupResponse(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
    assert "instance-10" not in h.group().static_members
    h.sleep(2 * DELAY)
    responses = [p.response for p in parked]
    assert all(r.error_code is ErrorCode.NONE and r.generation_id == 1 for r in responses)
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    for i, r in enumerate(responses):
        again = h.join(r.member_id, instance=f"instance-{i}")
        assert again.response.error_code is ErrorCode.NONE
        assert again.response.generation_id == 1
    assert h.join(instance="instance-10").response.error_code is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_s92_last_joiners_kicked_out_when_over_capacity() -> None:
    h = Harness(max_size=3)
    ids = [f"member-{i}" for i in range(5)]
    h.shard.replay(
        GroupMetadataKey(GROUP),
        GroupMetadataValue(
            protocol_type="consumer",
            generation=1,
            protocol="range",
            leader=ids[0],
            current_state_timestamp=0,
            members=tuple(member_record(m, b"") for m in ids),
        ),
        0,
    )
    assert h.group().state is GroupState.STABLE
    h.shard.on_loaded(0)  # over the (lowered) max size: rebalance
    group = h.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert h.timer.deadline(join_key(GROUP)) == REBALANCE
    assert h.timer.deadline(heartbeat_key(GROUP, ids[4])) == SESSION
    accepted = [h.join(m) for m in ids[:3]]
    kicked = [h.join(m) for m in ids[3:]]
    for reply in kicked:
        assert reply.response == JoinGroupResponse(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
    assert list(group.members) == ids[:3]
    assert not any(a.answered for a in accepted)
    h.sleep(REBALANCE)
    assert [a.response.generation_id for a in accepted] == [2, 2, 2]
    assert accepted[0].response.leader == ids[0]
    assert group.state is GroupState.COMPLETING_REBALANCE and group.size == 3


def test_s93_initial_delay() -> None:
    h = Harness()
    member_id, reply = h.join_dynamic()
    assert h.timer.deadline(join_key(GROUP)) == DELAY
    h.sleep(DELAY // 2)
    assert not reply.answered
    h.sleep(DELAY // 2)
    assert reply.response.error_code is ErrorCode.NONE
    assert reply.response.generation_id == 1 and reply.response.leader == member_id


def test_s94_initial_delay_extension() -> None:
    # Kafka answers both at 2D (a whole second window because m2 joined in the first);
    # we answer one delay after the last join, at 2D - 1: within the scenario's bounds
    # (nothing at 1.5D + 2, both answered by 2D + 2).
    h = Harness()
    m1, r1 = h.join_dynamic(rebalance=3 * DELAY)
    h.sleep(DELAY - 1)
    m2, r2 = h.join_dynamic(rebalance=3 * DELAY)
    h.sleep(DELAY // 2 + 2 + 1)  # 1.5 D + 2
    assert h.timer.deadline(join_key(GROUP)) == 2 * DELAY - 1
    assert not r1.answered and not r2.answered
    h.sleep(2 * DELAY - 1 - h.now)
    for reply in (r1, r2):
        assert reply.response.error_code is ErrorCode.NONE
        assert reply.response.generation_id == 1 and reply.response.leader == m1
    assert [m.member_id for m in r1.response.members] == [m1, m2]
    assert r2.response.members == []


def test_s95_initial_delay_capped_by_rebalance_timeout() -> None:
    # Members keep arriving within one delay of each other: the debounce would wait until
    # 3D - 2, but the join never outlasts the rebalance timeout (2D), as in Kafka.
    h = Harness()
    _, r1 = h.join_dynamic(rebalance=2 * DELAY)
    h.sleep(DELAY - 1)
    _, r2 = h.join_dynamic(rebalance=2 * DELAY)
    h.sleep(DELAY - 1)  # 2D - 2
    _, r3 = h.join_dynamic(rebalance=2 * DELAY)
    h.sleep(1)  # 2D - 1
    assert not (r1.answered or r2.answered or r3.answered)
    h.sleep(1)  # 2D: capped although the last member joined 2 ms ago
    assert [r.response.error_code for r in (r1, r2, r3)] == [ErrorCode.NONE] * 3
    assert len(r1.response.members) == 3
    assert not h.timer.is_scheduled(join_key(GROUP))


def test_initial_delay_burst_is_answered_one_delay_after_the_last_join() -> None:
    # 20 members starting together (within 100 ms): Kafka would answer at 2D because members
    # joined during the first window; we answer at last join + D.
    h = Harness()
    replies = []
    for _ in range(20):
        replies.append(h.join_dynamic(rebalance=10 * DELAY)[1])
        h.sleep(5)
    last_join = h.now - 5
    h.sleep(last_join + DELAY - 1 - h.now)
    assert not any(r.answered for r in replies)
    h.sleep(1)
    assert all(r.response.error_code is ErrorCode.NONE for r in replies)
    assert {r.response.generation_id for r in replies} == {1}


def test_s96_new_member_join_timeout() -> None:
    h = Harness()
    [m1] = h.make_stable(None, session=1_000_000, rebalance=10_000_000)
    start = h.now
    m2, r2 = h.join_dynamic(session=1_000_000, rebalance=10_000_000)
    assert h.group().state is GroupState.PREPARING_REBALANCE
    h.sleep(299_999)
    assert not r2.answered
    h.sleep(1)
    assert r2.response == JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id="")
    assert list(h.group().members) == [m1]
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.now == start + 300_000


def test_s97_unknown_member_in_existing_group() -> None:
    h = Harness()
    h.join_dynamic()
    reply = h.join("other-member-id")
    assert reply.response == JoinGroupResponse(
        ErrorCode.UNKNOWN_MEMBER_ID, member_id="other-member-id"
    )


def test_s98_dead_group() -> None:
    h = Harness()
    member_id, _ = h.join_dynamic()
    h.group().transition(GroupState.DEAD, h.now)
    assert h.join().response == JoinGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id="")
    assert h.join(member_id).response == JoinGroupResponse(
        ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id
    )


def test_s99_rejoin_while_empty() -> None:
    h = Harness()
    h.join(version=4)  # creates the Empty group
    group = h.group()
    group.add(ClassicMember("member-id", None, CLIENT, HOST, REBALANCE, SESSION, "consumer", RANGE))
    reply = h.join("member-id")
    assert reply.response == JoinGroupResponse(
        ErrorCode.UNKNOWN_MEMBER_ID, member_id="member-id", generation_id=-1
    )


def test_s100_leader_rejoin_in_stable_forces_rebalance() -> None:
    h = Harness()
    [leader] = h.make_stable(None)
    reply = h.join(leader)
    assert reply.response.error_code is ErrorCode.NONE
    assert reply.response.generation_id == 2 and reply.response.leader == leader
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert h.last.applied_records == []


def test_s101_unchanged_follower_rejoin_in_stable() -> None:
    h = Harness()
    leader, follower = h.make_stable(None, None)
    reply = h.join(follower)
    assert reply.response == JoinGroupResponse(
        ErrorCode.NONE,
        generation_id=1,
        protocol_type="consumer",
        protocol_name="range",
        leader=leader,
        member_id=follower,
        members=[],
    )
    assert h.group().state is GroupState.STABLE
    assert h.last.applied_records == []


def test_s102_follower_with_changed_metadata() -> None:
    h = Harness()
    leader, follower = h.make_stable(None, None)
    changed = h.join(follower, protocols=[("range", b"new-metadata")])
    assert not changed.answered
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.timer.deadline(join_key(GROUP)) == h.now + REBALANCE
    lead = h.join(leader)
    assert changed.response.generation_id == 2 and lead.response.generation_id == 2
    assert {m.member_id: m.metadata for m in lead.response.members} == {
        leader: b"range-metadata",
        follower: b"new-metadata",
    }
    assert h.group().state is GroupState.COMPLETING_REBALANCE


def test_s103_non_rejoined_dynamic_members_removed() -> None:
    h = Harness()
    [leader] = h.make_stable(None, rebalance=1000)
    newcomer, reply = h.join_dynamic(rebalance=1000)
    assert h.group().state is GroupState.PREPARING_REBALANCE
    h.sleep(999)
    assert not reply.answered
    h.sleep(1)
    assert reply.response.error_code is ErrorCode.NONE
    assert reply.response.generation_id == 2 and reply.response.leader == newcomer
    assert list(h.group().members) == [newcomer]
    assert not h.timer.is_scheduled(heartbeat_key(GROUP, leader))
    assert h.heartbeat(leader, 1) is ErrorCode.UNKNOWN_MEMBER_ID


def test_s104_static_member_as_first_member() -> None:
    h = Harness()
    reply = h.join(instance="group-instance-id", version=5)
    assert not reply.answered
    member_id = f"group-instance-id-{uuid(1)}"
    assert h.group().static_members == {"group-instance-id": member_id}
    h.sleep(DELAY)
    assert reply.response.error_code is ErrorCode.NONE
    assert reply.response.member_id == member_id and reply.response.leader == member_id
    assert reply.response.members == [
        JoinGroupMember(member_id, "group-instance-id", b"range-metadata")
    ]


def test_s105_static_rejoin_with_stale_member_id() -> None:
    h = Harness()
    h.make_stable("group-instance-id")
    reply = h.join("unknown-member-id", instance="group-instance-id")
    assert reply.response == JoinGroupResponse(
        ErrorCode.FENCED_INSTANCE_ID, member_id="unknown-member-id"
    )


def test_s106_unknown_instance_with_known_member_id() -> None:
    h = Harness()
    [leader] = h.make_stable("group-instance-id")
    reply = h.join(leader, instance="unknown-instance-id")
    assert reply.response == JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=leader)


def test_s107_kip814_static_leader_replacement_in_stable() -> None:
    for version in (9, 8):
        h = Harness()
        leader, follower = h.make_stable("leader-instance-id", "follower-instance-id")
        sync_timestamp = h.now
        reply = h.join(instance="leader-instance-id", version=version)
        new_leader = f"leader-instance-id-{uuid(3)}"
        group = h.group()
        assert group.state is GroupState.STABLE and group.generation_id == 1
        assert group.leader_id == new_leader
        # One record: the new member id with the current generation and assignments, and
        # the answer travels with it (released once it is durable).
        assert group_records(h.last.applied_records) == [
            (
                GROUP,
                GroupMetadataValue(
                    protocol_type="consumer",
                    generation=1,
                    protocol="range",
                    leader=new_leader,
                    current_state_timestamp=sync_timestamp,
                    members=(
                        member_record(new_leader, b"assignment-0", "leader-instance-id"),
                        member_record(follower, b"assignment-1", "follower-instance-id"),
                    ),
                ),
            )
        ]
        assert [callback for callback, _ in h.last.replies] == [reply]
        if version >= 9:
            assert reply.response == JoinGroupResponse(
                ErrorCode.NONE,
                generation_id=1,
                protocol_type="consumer",
                protocol_name="range",
                leader=new_leader,
                skip_assignment=True,
                member_id=new_leader,
                members=[
                    JoinGroupMember(new_leader, "leader-instance-id", b"range-metadata"),
                    JoinGroupMember(follower, "follower-instance-id", b"range-metadata"),
                ],
            )
        else:
            assert reply.response == JoinGroupResponse(
                ErrorCode.NONE,
                generation_id=1,
                protocol_type="consumer",
                protocol_name="range",
                leader=leader,  # the old id: an old client must not think it leads
                skip_assignment=False,
                member_id=new_leader,
                members=[],
            )
        # The new instance syncs and gets the assignment it inherited.
        sync = h.sync(new_leader, 1, instance="leader-instance-id")
        assert sync.response.assignment == b"assignment-0"
        # The old instance is fenced.
        old_join = h.join(leader, instance="leader-instance-id")
        assert old_join.response.error_code is ErrorCode.FENCED_INSTANCE_ID
        old_sync = h.sync(leader, 1, instance="leader-instance-id")
        assert old_sync.response.error_code is ErrorCode.FENCED_INSTANCE_ID
        assert h.sync(leader, 1).response.error_code is ErrorCode.UNKNOWN_MEMBER_ID
        assert h.heartbeat(leader, 1, instance="leader-instance-id") is ErrorCode.FENCED_INSTANCE_ID
        assert not h.timer.is_scheduled(heartbeat_key(GROUP, leader))
        assert h.timer.is_scheduled(heartbeat_key(GROUP, new_leader))


def test_s108_static_replacement_with_protocol_change() -> None:
    h = Harness()
    leader, follower = h.make_stable("leader-instance-id", None, protocols=RANGE_RR)
    assert h.group().protocol_name == "range"
    reply = h.join(instance="leader-instance-id", protocols=[("roundrobin", b"rr-metadata")])
    assert h.last.applied_records == []
    assert not reply.answered
    group = h.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    new_leader = group.static_member_id("leader-instance-id")
    assert new_leader != leader and group.leader_id == new_leader
    rejoin = h.join(follower, protocols=RANGE_RR)
    assert reply.response.generation_id == 2 and rejoin.response.generation_id == 2
    assert reply.response.protocol_name == "roundrobin"
    assert reply.response.leader == new_leader


def test_s109_static_replacement_persistence_failure() -> None:
    h = Harness()
    leader, follower = h.make_stable("leader-instance-id", "follower-instance-id")
    h.append_fails = True
    reply = h.join(instance="follower-instance-id")
    assert len(h.last.applied_records) == 1 and len(h.last.replies) == 1
    # The append fails: the runtime answers the reply NOT_COORDINATOR itself and reloads
    # the shard from what is durable, i.e. without this record.
    h.reload()
    group = h.group()
    assert group.state is GroupState.STABLE and list(group.members) == [leader, follower]
    assert group.static_members == {
        "leader-instance-id": leader,
        "follower-instance-id": follower,
    }
    assert group.members[follower].protocols == [("range", b"range-metadata")]
    assert group.members[follower].assignment == b"assignment-1"
    assert h.timer.deadline(heartbeat_key(GROUP, follower)) == h.now + SESSION
    assert h.heartbeat(follower, 1, instance="follower-instance-id") is ErrorCode.NONE
    assert not reply.answered  # the shard's answer was never released


def test_s110_static_replacement_in_completing_rebalance() -> None:
    h = Harness()
    first = h.join(instance="group-instance-id")
    h.sleep(DELAY)
    old_id = first.response.member_id
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    reply = h.join(instance="group-instance-id")
    group = h.group()
    assert reply.response.error_code is ErrorCode.NONE
    assert reply.response.generation_id == 2
    assert reply.response.member_id != old_id
    assert group.state is GroupState.COMPLETING_REBALANCE and group.size == 1
    assert h.last.applied_records == []


def test_s111_duplicate_static_follower_fenced() -> None:
    # A parked JoinGroup of the old instance (PreparingRebalance).
    h = Harness()
    leader, follower = h.make_stable("leader-instance-id", "follower-instance-id")
    unchanged = h.join(follower, instance="follower-instance-id")  # answered at once
    assert unchanged.response.generation_id == 1
    changed = h.join(follower, instance="follower-instance-id", protocols=[("range", b"y")])
    assert not changed.answered and h.group().state is GroupState.PREPARING_REBALANCE
    newcomer = h.join(instance="follower-instance-id")
    assert changed.response == JoinGroupResponse(
        ErrorCode.FENCED_INSTANCE_ID, member_id=follower, leader=""
    )
    new_follower = h.group().static_member_id("follower-instance-id")
    assert new_follower is not None and new_follower != follower
    assert not newcomer.answered
    leader_join = h.join(leader, instance="leader-instance-id")
    assert newcomer.response.generation_id == 2 and newcomer.response.member_id == new_follower
    assert [m.member_id for m in leader_join.response.members] == [leader, new_follower]

    # A parked SyncGroup of the old instance (CompletingRebalance).
    h4 = Harness()
    first_leader = h4.join(instance="leader-instance-id")
    first_follower = h4.join(instance="follower-instance-id")
    h4.sleep(2 * DELAY)
    follower = first_follower.response.member_id
    parked_sync = h4.sync(follower, 1, instance="follower-instance-id")
    assert not parked_sync.answered
    newcomer = h4.join(instance="follower-instance-id")
    assert parked_sync.response == SyncGroupResponse(ErrorCode.FENCED_INSTANCE_ID)
    assert h4.group().state is GroupState.PREPARING_REBALANCE
    assert not newcomer.answered
    leader_again = h4.join(first_leader.response.member_id, instance="leader-instance-id")
    assert newcomer.response.generation_id == 2 and leader_again.response.generation_id == 2


def test_s112_static_members_not_removed_for_not_rejoining() -> None:
    h = Harness()
    a, b, c, d = h.make_stable("instance-a", "instance-b", "instance-c", None)
    reply = h.join(b, instance="instance-b", protocols=[("range", b"changed")])
    assert h.group().state is GroupState.PREPARING_REBALANCE
    h.sleep(REBALANCE)
    group = h.group()
    assert list(group.members) == [a, b, c]  # the dynamic d is gone, statics stay
    assert reply.response.generation_id == 2 and reply.response.leader == b
    assert [m.member_id for m in reply.response.members] == [a, b, c]
    assert group.state is GroupState.COMPLETING_REBALANCE

    # Only a non-rejoining static member left: the join phase keeps being rescheduled.
    h = Harness()
    [static] = h.make_stable("instance-a")
    newcomer, _ = h.join_dynamic()
    left = h.leave((newcomer, None))
    assert left.members[0].error_code is ErrorCode.NONE
    assert h.group().state is GroupState.PREPARING_REBALANCE
    deadline = h.timer.deadline(join_key(GROUP))
    assert deadline is not None
    h.sleep(deadline - h.now)
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.timer.deadline(join_key(GROUP)) == h.now + REBALANCE
    # Its session then ends it: the group empties and writes that.
    fired = h.sleep(SESSION)
    assert h.group().state is GroupState.EMPTY and h.group().generation_id == 2
    assert len(fired.applied_records) == 1


# =============================================================================================
# SyncGroup
# =============================================================================================


def test_s113_sync_unknown_group_or_member() -> None:
    h = Harness()
    assert h.sync("member-id", 1).response == SyncGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID)
    h.make_stable(None)
    reply = h.sync("unknown-member-id", 1)
    assert reply.response == SyncGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, assignment=b"")


def test_s114_sync_illegal_generation() -> None:
    h = Harness()
    [leader] = h.make_stable(None)
    assert h.sync(leader, 2).response == SyncGroupResponse(ErrorCode.ILLEGAL_GENERATION)


def test_s115_sync_protocol_checks() -> None:
    h = Harness()
    leader, follower = h.make_stable(None, None)
    inconsistent = [
        h.sync(follower, 1, protocol_type="connect"),
        h.sync(follower, 1, protocol_name="roundrobin"),
        h.sync(follower, 1, protocol_type=None, protocol_name="range"),  # v5 needs both
    ]
    for reply in inconsistent:
        assert reply.response == SyncGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    ok = [
        h.sync(follower, 1, protocol_type=None, protocol_name=None, version=4),
        h.sync(follower, 1),
    ]
    for reply in ok:
        assert reply.response == SyncGroupResponse(
            ErrorCode.NONE,
            protocol_type="consumer",
            protocol_name="range",
            assignment=b"assignment-1",
        )


def test_s116_leader_sync_write_failure() -> None:
    h = Harness()
    (leader, _), (follower, _) = h.join_dynamic(), h.join_dynamic()
    h.sleep(2 * DELAY)
    follower_sync = h.sync(follower, 1)
    h.append_fails = True
    leader_sync = h.sync(leader, 1, {leader: b"a", follower: b"b"})
    # Record and both answers travel in one Result: the runtime releases the answers only
    # once the record is durable, and fails them all (NOT_COORDINATOR) if it is not.
    assert len(h.last.applied_records) == 1
    assert {id(callback) for callback, _ in h.last.replies} == {id(leader_sync), id(follower_sync)}
    assert not leader_sync.answered and not follower_sync.answered
    h.reload()
    group = h.group()
    assert group.state is GroupState.EMPTY and group.generation_id == 0 and not group.members
    # The members find their ids unknown and join again from scratch.
    assert h.heartbeat(follower, 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.join(leader).response.error_code is ErrorCode.UNKNOWN_MEMBER_ID


def test_s117_follower_before_and_after_leader() -> None:
    h = Harness()
    (leader, _), (f1, _), (f2, _) = h.join_dynamic(), h.join_dynamic(), h.join_dynamic()
    h.sleep(2 * DELAY)
    early = h.sync(f1, 1)
    assert not early.answered and h.last.applied_records == []
    completing_at = h.group().state_timestamp_ms
    h.sleep(10)
    leader_sync = h.sync(leader, 1, {leader: b"a", f1: b"b"})  # f2 gets an empty assignment
    assert early.response == SyncGroupResponse(
        ErrorCode.NONE, protocol_type="consumer", protocol_name="range", assignment=b"b"
    )
    assert leader_sync.response.assignment == b"a"
    assert group_records(h.last.applied_records) == [
        (
            GROUP,
            GroupMetadataValue(
                protocol_type="consumer",
                generation=1,
                protocol="range",
                leader=leader,
                current_state_timestamp=completing_at,
                members=(
                    member_record(leader, b"a"),
                    member_record(f1, b"b"),
                    member_record(f2, b""),
                ),
            ),
        )
    ]
    assert h.group().state is GroupState.STABLE
    assert h.timer.is_scheduled(sync_key(GROUP))  # f2 has not synced yet
    late = h.sync(f2, 1)
    assert late.response.assignment == b"" and h.last.applied_records == []
    assert not h.timer.is_scheduled(sync_key(GROUP))


def test_s118_pending_sync_timeout() -> None:
    # Nobody syncs: everyone is removed, the group goes Empty and writes that.
    h = Harness()
    (leader, _), (follower, _) = h.join_dynamic(), h.join_dynamic()
    h.sleep(DELAY)  # both joined at 0: the join completes one delay later
    for _ in range(4):
        h.sleep(REBALANCE // 5)
        assert h.heartbeat(leader, 1) is ErrorCode.NONE  # heartbeats do not help
        assert h.heartbeat(follower, 1) is ErrorCode.NONE
    fired = h.sleep(REBALANCE // 5)
    group = h.group()
    assert group.state is GroupState.EMPTY and group.generation_id == 2 and not group.members
    assert group_records(fired.applied_records) == [
        (
            GROUP,
            GroupMetadataValue(
                protocol_type="consumer",
                generation=2,
                protocol=None,
                leader=None,
                current_state_timestamp=h.now,
                members=(),
            ),
        )
    ]
    assert h.heartbeat(leader, 1) is ErrorCode.UNKNOWN_MEMBER_ID

    # The followers sync, the leader does not: the leader goes, followers must rejoin.
    h = Harness()
    (leader, _), (f1, _), (f2, _) = h.join_dynamic(), h.join_dynamic(), h.join_dynamic()
    h.sleep(2 * DELAY)
    parked = [h.sync(f1, 1), h.sync(f2, 1)]
    fired = h.sleep(REBALANCE)
    for reply in parked:
        assert reply.response == SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS)
    assert fired.applied_records == []
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert list(h.group().members) == [f1, f2]
    assert h.heartbeat(f1, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.heartbeat(leader, 1) is ErrorCode.UNKNOWN_MEMBER_ID

    # The leader syncs (Stable), the followers do not: they go.
    h = Harness()
    (leader, _), (f1, _), (f2, _) = h.join_dynamic(), h.join_dynamic(), h.join_dynamic()
    h.sleep(2 * DELAY)
    h.sync(leader, 1, {leader: b"a"})
    assert h.group().state is GroupState.STABLE
    h.sleep(REBALANCE)
    assert list(h.group().members) == [leader]
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(leader, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.heartbeat(f2, 1) is ErrorCode.UNKNOWN_MEMBER_ID


# =============================================================================================
# Heartbeat
# =============================================================================================


def test_s119_heartbeat_matrix() -> None:
    h = Harness()
    assert h.heartbeat("member-id", 0) is ErrorCode.UNKNOWN_MEMBER_ID  # unknown group

    member_id, _ = h.join_dynamic()
    assert h.heartbeat(member_id, 0) is ErrorCode.REBALANCE_IN_PROGRESS  # initial, gen 0
    assert h.heartbeat("unknown-member-id", 0) is ErrorCode.UNKNOWN_MEMBER_ID
    h.sleep(DELAY)
    assert h.heartbeat(member_id, 1) is ErrorCode.NONE  # CompletingRebalance
    assert h.heartbeat(member_id, 2) is ErrorCode.ILLEGAL_GENERATION
    h.sync(member_id, 1, {member_id: b"a"})
    assert h.heartbeat(member_id, 1) is ErrorCode.NONE  # Stable
    assert h.timer.deadline(heartbeat_key(GROUP, member_id)) == h.now + SESSION

    # Empty group with a member (built directly, as Kafka's test does).
    h = Harness()
    h.join()
    h.group().add(
        ClassicMember("member-id", None, CLIENT, HOST, REBALANCE, SESSION, "consumer", RANGE)
    )
    assert h.heartbeat("member-id", 0) is ErrorCode.UNKNOWN_MEMBER_ID

    # Dead group.
    h.group().transition(GroupState.DEAD, h.now)
    assert h.heartbeat("member-id", 0) is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_s120_session_timeout() -> None:
    # No heartbeat: removed after the session timeout.
    h = Harness()
    [member_id] = h.make_stable(None)
    h.sleep(SESSION - 1)
    assert member_id in h.group().members
    fired = h.sleep(1)
    assert not h.group().members and h.group().state is GroupState.EMPTY
    assert len(fired.applied_records) == 1  # emptied: generation 2 written

    # Heartbeats keep it.
    h = Harness()
    [member_id] = h.make_stable(None)
    for _ in range(10):
        h.sleep(SESSION // 2)
        assert h.heartbeat(member_id, 1) is ErrorCode.NONE
    assert member_id in h.group().members

    # During a rebalance, heartbeating without rejoining ends one session after the last
    # heartbeat; the join then completes for whoever rejoined.
    h = Harness()
    a, b = h.make_stable(None, None, rebalance=60_000)
    rejoin = h.join(b, protocols=[("range", b"changed")], rebalance=60_000)
    h.sleep(5_000)
    assert h.heartbeat(a, 1) is ErrorCode.REBALANCE_IN_PROGRESS
    h.sleep(SESSION - 1)
    assert not rejoin.answered
    h.sleep(1)
    assert rejoin.response.error_code is ErrorCode.NONE
    assert rejoin.response.generation_id == 2 and rejoin.response.leader == b
    assert h.heartbeat(a, 1) is ErrorCode.UNKNOWN_MEMBER_ID

    # A parked (not new) member satisfies the heartbeat check: its session expiry is ignored.
    h = Harness()
    a, b = h.make_stable(None, None, rebalance=60_000)
    parked = h.join(b, protocols=[("range", b"changed")], rebalance=60_000)
    h.sleep(SESSION)  # both sessions end: a has not rejoined, b is parked
    assert list(h.group().members) == [b]
    assert parked.response.generation_id == 2


# =============================================================================================
# LeaveGroup
# =============================================================================================


def test_s121_leave_matrix() -> None:
    h = Harness()
    # Unknown group.
    assert h.leave(("member-id", None)) == LeaveGroupResponse(
        ErrorCode.NONE, [LeaveMemberResponse("member-id", None, ErrorCode.UNKNOWN_MEMBER_ID)]
    )
    assert h.leave(("member-id", None), version=2) == LeaveGroupResponse(
        ErrorCode.UNKNOWN_MEMBER_ID, []
    )
    [member_id] = h.make_stable(None)
    records_before = len(h.log)
    # Unknown member.
    assert h.leave(("unknown-member-id", None)).members == [
        LeaveMemberResponse("unknown-member-id", None, ErrorCode.UNKNOWN_MEMBER_ID)
    ]
    assert len(h.log) == records_before
    # The last member leaves: Empty, generation 2, written.
    assert h.leave((member_id, None), version=0) == LeaveGroupResponse(ErrorCode.NONE, [])
    group = h.group()
    assert group.state is GroupState.EMPTY and group.generation_id == 2
    assert group_records(h.last.applied_records) == [
        (
            GROUP,
            GroupMetadataValue(
                protocol_type="consumer",
                generation=2,
                protocol=None,
                leader=None,
                current_state_timestamp=h.now,
                members=(),
            ),
        )
    ]
    assert not h.timer.is_scheduled(heartbeat_key(GROUP, member_id))

    # Static members: fenced by another member id, removed by instance id alone.
    h = Harness()
    a, b = h.make_stable("instance-a", "instance-b")
    assert h.leave(("other-member-id", "instance-a")).members == [
        LeaveMemberResponse("other-member-id", "instance-a", ErrorCode.FENCED_INSTANCE_ID)
    ]
    assert h.leave(("", "instance-a")).members == [
        LeaveMemberResponse("", "instance-a", ErrorCode.NONE)
    ]
    assert list(h.group().members) == [b]
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.leave(("", "instance-a")).members[0].error_code is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.leave(("", None)).members[0].error_code is ErrorCode.UNKNOWN_MEMBER_ID

    # A pending member leaves: removed, nothing written.
    h = Harness()
    pending = h.join().response.member_id
    before = len(h.log)
    assert h.leave((pending, None)).members == [LeaveMemberResponse(pending, None)]
    assert h.group().pending_members == set() and len(h.log) == before
    assert not h.timer.is_scheduled(heartbeat_key(GROUP, pending))

    # Dead group.
    h.group().transition(GroupState.DEAD, h.now)
    assert h.leave(("member-id", None)) == LeaveGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE)


def test_s122_batch_leave() -> None:
    h = Harness()
    a, b, c = h.make_stable("instance-a", "instance-b", "instance-c")
    response = h.leave(
        (a, "instance-a"),
        ("wrong-member-id", "instance-b"),
        ("", "unknown-instance"),
        (c, None),
    )
    assert response == LeaveGroupResponse(
        ErrorCode.NONE,
        [
            LeaveMemberResponse(a, "instance-a", ErrorCode.NONE),
            LeaveMemberResponse("wrong-member-id", "instance-b", ErrorCode.FENCED_INSTANCE_ID),
            LeaveMemberResponse("", "unknown-instance", ErrorCode.UNKNOWN_MEMBER_ID),
            LeaveMemberResponse(c, None, ErrorCode.NONE),
        ],
    )
    assert list(h.group().members) == [b]
    assert h.group().state is GroupState.PREPARING_REBALANCE

    # A joined member, a pending member and an unknown one, during the initial rebalance.
    h = Harness()
    joined, joined_reply = h.join_dynamic()
    pending = h.join().response.member_id
    response = h.leave((joined, None), (pending, None), ("unknown", None))
    assert [m.error_code for m in response.members] == [
        ErrorCode.NONE,
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    assert joined_reply.response == JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id="")
    fired = h.sleep(DELAY)  # the initial delay ends with nobody: Empty, generation 1
    assert h.group().state is GroupState.EMPTY and h.group().generation_id == 1
    assert len(fired.applied_records) == 1


def test_leave_answers_a_parked_sync_of_the_leaving_member() -> None:
    h = Harness()
    _, (follower, _) = h.join_dynamic(), h.join_dynamic()
    h.sleep(2 * DELAY)
    parked = h.sync(follower, 1)
    h.leave((follower, None))
    assert parked.response == SyncGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID)


# =============================================================================================
# DescribeGroups / ListGroups / DeleteGroups
# =============================================================================================


def test_s123_describe_groups() -> None:
    h = Harness()
    a, b = h.make_stable(None, "instance-b")
    [stable, missing] = h.shard.classic.describe_groups([GROUP, "unknown"])
    assert stable.group_state == "Stable" and stable.error_code is ErrorCode.NONE
    assert stable.protocol_type == "consumer" and stable.protocol_data == "range"
    assert stable.authorized_operations == AUTHORIZED_OPERATIONS_OMITTED
    assert stable.members == [
        DescribedMember(a, None, CLIENT, HOST, b"range-metadata", b"assignment-0"),
        DescribedMember(b, "instance-b", CLIENT, HOST, b"range-metadata", b"assignment-1"),
    ]
    assert missing.group_state == "Dead" and missing.error_code is ErrorCode.GROUP_ID_NOT_FOUND
    assert missing.error_message == "Group unknown not found."
    [old] = h.shard.classic.describe_groups(["unknown"], api_version=5)
    assert old.group_state == "Dead" and old.error_code is ErrorCode.NONE

    h.join(a)  # the leader rejoins: PreparingRebalance
    [rebalancing] = h.shard.classic.describe_groups([GROUP])
    assert rebalancing.group_state == "PreparingRebalance"
    assert rebalancing.protocol_type == "consumer" and rebalancing.protocol_data == ""
    assert rebalancing.members == [
        DescribedMember(a, None, CLIENT, HOST, b"", b"assignment-0"),
        DescribedMember(b, "instance-b", CLIENT, HOST, b"", b"assignment-1"),
    ]


def test_s124_list_groups_filters() -> None:
    h = Harness()
    h.make_stable(None, group="stable-group")
    h.join(group="empty-group")  # MEMBER_ID_REQUIRED: created, stays Empty
    h.join_dynamic(group="rebalancing-group")
    h.shard.get_or_create_classic_group("simple-group", h.now)  # e.g. by an offset commit

    def listed(states: list[str], types: list[str]) -> list[ListedGroup]:
        return sorted(h.shard.classic.list_groups(states, types), key=lambda g: g.group_id)

    everything = listed([], [])
    assert everything == [
        ListedGroup("empty-group", "", "Empty"),
        ListedGroup("rebalancing-group", "consumer", "PreparingRebalance"),
        ListedGroup("simple-group", "", "Empty"),
        ListedGroup("stable-group", "consumer", "Stable"),
    ]
    assert [g.group_id for g in listed(["stable"], [])] == ["stable-group"]
    assert [g.group_id for g in listed(["Stable", "PREPARINGREBALANCE"], [])] == [
        "rebalancing-group",
        "stable-group",
    ]
    assert [g.group_id for g in listed(["Empty"], ["Classic"])] == ["empty-group", "simple-group"]
    assert listed([], ["classic"]) == everything
    assert listed([], ["consumer"]) == []
    assert listed([], ["unknown"]) == []
    assert listed(["Stable"], ["consumer"]) == []
    assert listed(["Dead"], []) == []


# =============================================================================================
# Loading and offset-commit sessions
# =============================================================================================


def test_on_loaded_restarts_sessions_and_replay_rebuilds_stable_group() -> None:
    h = Harness()
    a, b = h.make_stable(None, "instance-b")
    live = h.group()
    h.sleep(1_000)
    shard = h.reload()
    group = shard.classic_group(GROUP)
    assert group is not None and group is not live
    assert group.state is GroupState.STABLE and group.generation_id == 1
    assert list(group.members) == [a, b] and group.leader_id == a
    assert group.static_members == {"instance-b": b}
    assert group.members[b].assignment == b"assignment-1"
    assert h.timer.deadline(heartbeat_key(GROUP, a)) == h.now + SESSION
    # The old shard's timers are gone with it; the new one's work.
    h.sleep(SESSION)
    assert group.state is GroupState.EMPTY


def test_touch_member_refreshes_session_in_stable_and_preparing() -> None:
    h = Harness()
    a, b = h.make_stable(None, None)
    h.sleep(SESSION - 10)
    h.shard.classic.touch_member(h.group(), a, h.now)
    h.shard.classic.touch_member(GROUP, "unknown", h.now)  # ignored
    assert h.timer.deadline(heartbeat_key(GROUP, a)) == h.now + SESSION
    h.sleep(10)
    assert list(h.group().members) == [a]  # b expired, a did not
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_timers_of_a_deleted_group_do_nothing() -> None:
    h = Harness()
    h.join()  # pending member id, Empty group
    h.shard.replay(GroupMetadataKey(GROUP), None, h.now)
    assert h.sleep(SESSION) == Result()


def test_superseded_join_is_answered() -> None:
    h = Harness()
    member_id, first = h.join_dynamic()
    second = h.join(member_id)
    assert first.response == JoinGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member_id)
    h.sleep(DELAY)
    assert second.response.error_code is ErrorCode.NONE


def test_join_v3_adds_member_without_round_trip_and_v0_uses_session_timeout() -> None:
    h = Harness()
    reply = h.join(version=3)
    assert not reply.answered and h.group().size == 1
    h2 = Harness()
    h2.join(version=0, rebalance=-1, session=7_000)
    [member] = h2.group().members.values()
    assert member.rebalance_timeout_ms == 7_000


# =============================================================================================
# Property: the log rebuilds what the live group persisted
# =============================================================================================

# (instance id, client id, JoinGroup version): KIP-814 and older static clients, a v4+
# dynamic client and a v3 one (no member-id round trip).
SLOTS = [("instance-0", "c0", 9), ("instance-1", "c1", 5), (None, "c2", 9), (None, "c3", 3)]


class Client:
    """A client that takes the next natural step of the protocol when told to (join, then
    sync, then heartbeat), and remembers what the coordinator told it."""

    def __init__(self, h: Harness, instance: str | None, client_id: str, version: int) -> None:
        self.h = h
        self.instance = instance
        self.client_id = client_id
        self.version = version
        self.member_id = ""
        self.generation = -1
        self.members: list[str] = []
        self.joined = False  # has a generation it has not synced yet / is in
        self.synced = False
        self.parked = 0  # requests awaiting an answer
        self.captures: list[Capture] = []

    def forget(self) -> None:
        self.member_id, self.generation, self.joined, self.synced = "", -1, False, False

    def _on_join(self, response: JoinGroupResponse) -> None:
        self.parked -= 1
        error = response.error_code
        if error is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
        elif error is ErrorCode.NONE:
            self.member_id = response.member_id
            self.generation = response.generation_id
            self.members = [m.member_id for m in response.members]
            self.joined, self.synced = True, False
            if response.skip_assignment:
                self.members = []  # KIP-814: sync without assigning
        elif error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.forget()
        else:
            self.joined = False

    def _on_sync(self, response: SyncGroupResponse) -> None:
        self.parked -= 1
        if response.error_code is ErrorCode.NONE:
            self.synced = True
        elif response.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.forget()
        else:
            self.joined = False

    def join(self, protocols: list[tuple[str, bytes]]) -> None:
        capture = Capture(self._on_join)
        self.captures.append(capture)
        self.parked += 1
        request = JoinGroupRequest(
            group_id=GROUP,
            member_id=self.member_id,
            protocol_type="consumer",
            protocols=protocols,
            session_timeout_ms=SESSION,
            rebalance_timeout_ms=REBALANCE,
            group_instance_id=self.instance,
            client_id=self.client_id,
            client_host=HOST,
            api_version=self.version,
        )
        self.h.send_join_group(request, capture)

    def sync(self) -> None:
        capture = Capture(self._on_sync)
        self.captures.append(capture)
        self.parked += 1
        request = SyncGroupRequest(
            GROUP,
            self.member_id,
            self.generation,
            [(m, m.encode()) for m in self.members],
            self.instance,
            protocol_type="consumer",
            protocol_name=None,
            api_version=3,
        )
        self.h.send_sync_group(request, capture)

    def step(self, protocols: list[tuple[str, bytes]]) -> None:
        if self.parked:
            return
        if not self.joined:
            self.join(protocols)
        elif not self.synced:
            self.sync()
        else:
            error = self.h.heartbeat(self.member_id, self.generation, instance=self.instance)
            if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                self.forget()
            elif error is not ErrorCode.NONE:
                self.joined = False


PROTOCOL_CHOICES = [RANGE_RR, [("roundrobin", b"rr-metadata"), *RANGE], RANGE]
slot = st.integers(0, len(SLOTS) - 1)
step = st.tuples(st.just("step"), slot, st.just(0), st.just(0))
small_sleep = st.tuples(st.just("sleep"), st.just(0), st.integers(0, 300), st.just(0))
op = st.one_of(
    step,
    step,
    step,
    step,
    small_sleep,
    small_sleep,
    st.tuples(st.just("step"), slot, st.just(0), st.integers(0, 2)),
    st.tuples(st.just("rejoin"), slot, st.just(0), st.integers(0, 2)),
    st.tuples(st.just("restart"), slot, st.just(0), st.just(0)),  # lost its member id
    st.tuples(st.just("leave"), slot, st.sampled_from([2, 5]), st.integers(0, 1)),
    st.tuples(st.just("sleep"), st.just(0), st.integers(0, 12_000), st.just(0)),
)


def check_replay(h: Harness) -> None:
    for live in h.shard.groups.values():
        # Structural invariants of the live group.
        assert not live.pending_members & live.members.keys()
        assert (live.leader_id in live.members) if live.members else live.leader_id is None
        assert set(live.static_members.values()) <= live.members.keys()
        joins = [m for m in live.members.values() if m.awaiting_join is not None]
        syncs = [m for m in live.members.values() if m.awaiting_sync is not None]
        if live.state is not GroupState.PREPARING_REBALANCE:
            assert not joins
        if live.state is not GroupState.COMPLETING_REBALANCE:
            assert not syncs
        if live.state is GroupState.EMPTY:
            assert not live.members
    rebuilt = h.replayed()
    for group_id, live in h.shard.groups.items():
        persisted = h.shard.classic.persisted_view(live)
        rebuilt_group = rebuilt.classic_group(group_id)
        if persisted is None:
            assert rebuilt_group is None
            continue
        assert rebuilt_group is not None
        assert rebuilt_group.to_record()[1] == persisted
        if live.state in (GroupState.STABLE, GroupState.EMPTY):
            # At rest the log is not behind the live group (timestamps aside: Kafka writes
            # the leader's record before the group turns Stable).
            assert replace(live.to_record()[1], current_state_timestamp=0) == replace(
                persisted, current_state_timestamp=0
            )
            assert rebuilt_group.state is live.state


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=10, max_size=100))
def test_replaying_the_log_rebuilds_the_persisted_group(
    ops: list[tuple[str, int, int, int]],
) -> None:
    h = Harness(max_size=3)
    clients = [Client(h, *spec) for spec in SLOTS]
    for kind, index, arg, choice in ops:
        client = clients[index]
        if kind == "step":
            client.step(PROTOCOL_CHOICES[choice])
        elif kind == "rejoin":
            client.join(PROTOCOL_CHOICES[choice])
        elif kind == "restart":
            client.forget()
        elif kind == "leave":
            instance = client.instance if arg >= 3 else None
            member_id = "" if (choice and instance is not None) else client.member_id
            h.leave((member_id, instance), version=arg)
        else:
            h.sleep(arg)
        check_replay(h)
    # Every request is answered at most once.
    assert all(len(c.responses) <= 1 for client in clients for c in client.captures)

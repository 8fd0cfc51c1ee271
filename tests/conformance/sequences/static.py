"""Static membership (KIP-345) and a returning static leader (KIP-814): replacement without a
rebalance, fencing of the replaced member id, leaving by instance id."""

from __future__ import annotations

from tests.conformance.ops import (
    TOPIC,
    TOPIC2,
    assignment,
    commit,
    describe,
    heartbeat,
    join,
    leave,
    sync,
)
from tests.conformance.runner import Session, sequence
from tests.integration.raw_groups import subscription

STATIC_VERSIONS = range(5, 10)


def _static_leader(s: Session, group: str, version: int, conn: str = "a") -> tuple[str, int]:
    joined = join(s, conn, group, instance_id="i1", version=version, label="join i1 (static)")
    member = joined.member_id
    sync(
        s,
        conn,
        group,
        joined.generation_id,
        member,
        {member: assignment({TOPIC: [0, 1, 2]})},
        instance_id="i1",
        version=min(version, 5),
    )
    return member, joined.generation_id


for _v in STATIC_VERSIONS:

    @sequence(f"static/join-v{_v}-cycle")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        member, generation = _static_leader(s, group, version)
        heartbeat(s, "a", group, generation, member, instance_id="i1", version=min(version, 4))
        describe(s, "a", [group], label="describe")
        leave(s, "a", group, [(member, "i1")], version=min(version, 5))
        describe(s, "a", [group], label="describe after leaving")

    @sequence(f"static/join-v{_v}-leader-replaced-no-rebalance")
    def _(s: Session, version: int = _v) -> None:
        """A new instance of the static leader: new member id, same generation, KIP-814's
        skip_assignment from v9; the old member id is fenced."""
        group = s.group()
        old, generation = _static_leader(s, group, version)
        again = join(s, "a2", group, instance_id="i1", version=version, label="join i1 again")
        heartbeat(s, "a", group, generation, old, instance_id="i1", label="old id: fenced")
        sync(
            s,
            "a2",
            group,
            again.generation_id,
            again.member_id,
            instance_id="i1",
            version=min(version, 5),
            label="sync new instance (no assignments)",
        )
        heartbeat(
            s, "a2", group, again.generation_id, again.member_id, instance_id="i1", label="new"
        )
        describe(s, "a", [group], label="describe")

    @sequence(f"static/join-v{_v}-follower-replaced-no-rebalance")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        a = join(s, "a", group, instance_id="i1", version=version, label="join i1", wait=False)
        s.sleep(0.3)
        b = join(s, "b", group, instance_id="i2", version=version, label="join i2", wait=False)
        a_joined, b_joined = a.result(30), b.result(30)
        leader = a_joined if a_joined.leader == a_joined.member_id else b_joined
        follower = b_joined if leader is a_joined else a_joined
        follower_conn, follower_instance = ("b", "i2") if follower is b_joined else ("a", "i1")
        leader_conn, leader_instance = ("a", "i1") if leader is a_joined else ("b", "i2")
        sync(
            s,
            leader_conn,
            group,
            leader.generation_id,
            leader.member_id,
            {
                leader.member_id: assignment({TOPIC: [0, 1]}),
                follower.member_id: assignment({TOPIC: [2]}),
            },
            instance_id=leader_instance,
            label="sync leader",
        )
        sync(
            s,
            follower_conn,
            group,
            follower.generation_id,
            follower.member_id,
            instance_id=follower_instance,
            label="sync follower",
        )
        again = join(
            s, "c", group, instance_id=follower_instance, version=version, label="follower again"
        )
        sync(
            s,
            "c",
            group,
            again.generation_id,
            again.member_id,
            instance_id=follower_instance,
            label="sync replaced follower",
        )
        heartbeat(
            s,
            follower_conn,
            group,
            follower.generation_id,
            follower.member_id,
            instance_id=follower_instance,
            label="old follower id: fenced",
        )
        heartbeat(
            s,
            leader_conn,
            group,
            leader.generation_id,
            leader.member_id,
            instance_id=leader_instance,
            label="leader unaffected",
        )


@sequence("static/fenced-instance-on-every-api")
def _(s: Session) -> None:
    group = s.group()
    member, generation = _static_leader(s, group, 9)
    heartbeat(s, "a", group, generation, "wrong-id", instance_id="i1", label="heartbeat")
    sync(s, "a", group, generation, "wrong-id", instance_id="i1", label="sync")
    commit(
        s,
        "a",
        group,
        {(TOPIC, 0): 1},
        generation=generation,
        member_id="wrong-id",
        instance_id="i1",
        label="commit",
    )
    join(s, "a", group, "wrong-id", instance_id="i1", label="join with a wrong member id")
    leave(s, "a", group, [("wrong-id", "i1")], label="leave")
    heartbeat(s, "a", group, generation, member, instance_id="i1", label="the real one: ok")


@sequence("static/leave-by-instance-id-only")
def _(s: Session) -> None:
    group = s.group()
    _static_leader(s, group, 9)
    leave(s, "a", group, [("", "i1"), ("", "i-unknown")], label="leave by instance ids")
    describe(s, "a", [group], label="describe after leaving")


@sequence("static/leave-v3-by-instance-id")
def _(s: Session) -> None:
    group = s.group()
    _static_leader(s, group, 5)
    leave(s, "a", group, [("", "i1")], version=3, label="leave v3 by instance id")


@sequence("static/replaced-leader-with-changed-subscription")
def _(s: Session) -> None:
    """The returning leader subscribes to more topics: Kafka rebalances instead of keeping
    the assignment."""
    group = s.group()
    _old, generation = _static_leader(s, group, 9)
    again = join(
        s,
        "a2",
        group,
        instance_id="i1",
        protocols=(("range", subscription([TOPIC, TOPIC2])),),
        label="join i1 with a new subscription",
    )
    sync(
        s,
        "a2",
        group,
        again.generation_id,
        again.member_id,
        {again.member_id: assignment({TOPIC: [0, 1, 2], TOPIC2: [0]})},
        instance_id="i1",
        label="sync",
    )
    describe(s, "a", [group], label="describe")
    assert again.generation_id >= generation


@sequence("static/replaced-leader-with-other-protocol-name")
def _(s: Session) -> None:
    group = s.group()
    _static_leader(s, group, 9)
    join(
        s,
        "a2",
        group,
        instance_id="i1",
        protocols=(("roundrobin", subscription([TOPIC])),),
        label="join i1 with another assignor only",
    )
    describe(s, "a", [group], label="describe")


@sequence("static/dynamic-and-static-members")
def _(s: Session) -> None:
    group = s.group()
    a_static = join(s, "a", group, instance_id="i1", label="join i1", wait=False)
    s.sleep(0.3)
    b_id = join(s, "b", group, label="join b: id required").member_id
    b = join(s, "b", group, b_id, label="join b", wait=False)
    a_joined, b_joined = a_static.result(30), b.result(30)
    describe(s, "c", [group], label="describe")
    leave(s, "c", group, [(b_joined.member_id, None), ("", "i1")], label="leave both")
    describe(s, "c", [group], label="describe after leaving")
    assert a_joined.generation_id == b_joined.generation_id

"""Classic groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their error paths."""

from __future__ import annotations

from tests.conformance.ops import TOPIC, assignment, heartbeat, join, leave, sync
from tests.conformance.runner import Session, sequence

SYNC_FOR_JOIN = {v: min(v, 5) for v in range(10)}  # the versions a client pairs
HEARTBEAT_FOR_JOIN = {v: min(v, 4) for v in range(10)}
LEAVE_FOR_JOIN = {v: min(v, 5) for v in range(10)}


def _member_id_required(version: int) -> None:
    @sequence(f"classic/join-v{version}-empty-member-id-gets-member-id-required")
    def _(s: Session) -> None:
        join(s, "a", s.group(), version=version)


for _v in range(4, 10):
    _member_id_required(_v)


def _single_member_cycle(version: int) -> None:
    @sequence(f"classic/join-v{version}-single-member-cycle")
    def _(s: Session) -> None:
        """Join (with MEMBER_ID_REQUIRED from v4), sync as leader, heartbeat, leave."""
        group = s.group()
        member = ""
        if version >= 4:
            member = join(s, "a", group, version=version, label="join: id required").member_id
        joined = join(s, "a", group, member, version=version, label="join: leader")
        member = joined.member_id
        sync(
            s,
            "a",
            group,
            joined.generation_id,
            member,
            {member: assignment({TOPIC: [0, 1, 2]})},
            version=SYNC_FOR_JOIN[version],
        )
        heartbeat(s, "a", group, joined.generation_id, member, version=HEARTBEAT_FOR_JOIN[version])
        leave(s, "a", group, [(member, None)], version=LEAVE_FOR_JOIN[version])
        heartbeat(
            s,
            "a",
            group,
            joined.generation_id,
            member,
            version=HEARTBEAT_FOR_JOIN[version],
            label="heartbeat after leaving",
        )


for _v in range(10):
    _single_member_cycle(_v)


def _stable_group(s: Session, group: str, conn: str = "a", version: int = 9) -> tuple[str, int]:
    """One member joined and synced: (member id, generation)."""
    member = join(s, conn, group, version=version, label="join: id required").member_id
    joined = join(s, conn, group, member, version=version, label="join: leader")
    sync(s, conn, group, joined.generation_id, member, {member: assignment({TOPIC: [0, 1, 2]})})
    return member, joined.generation_id


def _unknown_group(api: str, versions: range) -> None:
    for version in versions:

        @sequence(f"classic/{api}-v{version}-unknown-group")
        def _(s: Session, version: int = version) -> None:
            group = s.group()
            if api == "heartbeat":
                heartbeat(s, "a", group, 1, "no-such-member", version=version)
            elif api == "sync":
                sync(s, "a", group, 1, "no-such-member", version=version)
            elif api == "leave":
                leave(s, "a", group, [("no-such-member", None)], version=version)
            elif api == "join-with-member-id":
                join(s, "a", group, "no-such-member", version=version)


_unknown_group("heartbeat", range(0, 5))
_unknown_group("sync", range(0, 6))
_unknown_group("leave", range(0, 6))
_unknown_group("join-with-member-id", range(0, 10))


@sequence("classic/heartbeat-illegal-generation")
def _(s: Session) -> None:
    group = s.group()
    member, generation = _stable_group(s, group)
    heartbeat(s, "a", group, generation + 1, member, label="heartbeat: next generation")
    heartbeat(s, "a", group, generation - 1, member, label="heartbeat: previous generation")
    heartbeat(s, "a", group, generation, "no-such-member", label="heartbeat: unknown member")
    heartbeat(s, "a", group, generation, member, label="heartbeat: ok")


@sequence("classic/sync-illegal-generation-and-unknown-member")
def _(s: Session) -> None:
    group = s.group()
    member, generation = _stable_group(s, group)
    sync(s, "a", group, generation + 1, member, label="sync: next generation")
    sync(s, "a", group, generation, "no-such-member", label="sync: unknown member")
    sync(s, "a", group, generation, member, label="sync: again, same generation")


@sequence("classic/sync-inconsistent-protocol")
def _(s: Session) -> None:
    group = s.group()
    member, generation = _stable_group(s, group)
    sync(s, "a", group, generation, member, protocol_type="connect", label="sync: other type")
    sync(s, "a", group, generation, member, protocol_name="roundrobin", label="sync: other name")
    sync(s, "a", group, generation, member, protocol_type=None, protocol_name=None, label="null")


@sequence("classic/join-inconsistent-protocol-type")
def _(s: Session) -> None:
    group = s.group()
    _stable_group(s, group)
    join(s, "b", group, protocol_type="connect", label="join: other protocol type")


@sequence("classic/join-no-common-protocol")
def _(s: Session) -> None:
    group = s.group()
    _stable_group(s, group)
    b = join(s, "b", group, protocols=(("roundrobin", b"\x00"),), label="join b: id required")
    join(s, "b", group, b.member_id, protocols=(("roundrobin", b"\x00"),), label="join b")


@sequence("classic/join-empty-protocol-type")
def _(s: Session) -> None:
    join(s, "a", s.group(), protocol_type="", label="join: empty protocol type")


@sequence("classic/join-no-protocols")
def _(s: Session) -> None:
    join(s, "a", s.group(), protocols=(), label="join: no protocols")


@sequence("classic/join-empty-group-id")
def _(s: Session) -> None:
    join(s, "a", "", label="join: empty group id")


def _session_timeout(name: str, session_ms: int) -> None:
    for version in (0, 5, 9):

        @sequence(f"classic/join-v{version}-session-timeout-{name}")
        def _(s: Session, version: int = version) -> None:
            join(s, "a", s.group(), version=version, session_ms=session_ms)


_session_timeout("below-min", 5_999)
_session_timeout("above-max", 1_800_001)
_session_timeout("at-min", 6_000)


@sequence("classic/heartbeat-during-rebalance-then-rejoin")
def _(s: Session) -> None:
    """A stable leader; a second member joins: the leader's heartbeat says
    REBALANCE_IN_PROGRESS, it rejoins, both get generation 2, follower syncs after leader."""
    group = s.group()
    a, generation = _stable_group(s, group)
    b = join(s, "b", group, label="join b: id required").member_id
    b_join = join(s, "b", group, b, label="join b (parks)", wait=False)
    s.sleep(0.5)
    heartbeat(s, "a", group, generation, a, label="heartbeat a: rebalancing")
    a_rejoined = join(s, "a", group, a, label="rejoin a")
    b_joined = b_join.result(30)
    b_sync = sync(s, "b", group, b_joined.generation_id, b, label="sync b (parks)", wait=False)
    s.sleep(0.3)
    sync(
        s,
        "a",
        group,
        a_rejoined.generation_id,
        a,
        {a: assignment({TOPIC: [0, 1]}), b: assignment({TOPIC: [2]})},
        label="sync a (leader)",
    )
    b_sync.result(30)
    heartbeat(s, "a", group, a_rejoined.generation_id, a, label="heartbeat a")
    heartbeat(s, "b", group, b_joined.generation_id, b, label="heartbeat b")
    heartbeat(s, "b", group, generation, b, label="heartbeat b: old generation")


@sequence("classic/leave-one-of-two-then-rebalance")
def _(s: Session) -> None:
    group = s.group()
    a, generation = _stable_group(s, group)
    b = join(s, "b", group, label="join b: id required").member_id
    b_join = join(s, "b", group, b, label="join b (parks)", wait=False)
    s.sleep(0.5)
    a_rejoined = join(s, "a", group, a, label="rejoin a")
    b_joined = b_join.result(30)
    sync(
        s,
        "a",
        group,
        a_rejoined.generation_id,
        a,
        {a: assignment({TOPIC: [0, 1]}), b: assignment({TOPIC: [2]})},
        label="sync a (leader)",
    )
    sync(s, "b", group, b_joined.generation_id, b, label="sync b")
    leave(s, "b", group, [(b, None)], label="leave b")
    heartbeat(s, "a", group, a_rejoined.generation_id, a, label="heartbeat a: rebalancing")
    again = join(s, "a", group, a, label="rejoin a alone")
    sync(s, "a", group, again.generation_id, a, {a: assignment({TOPIC: [0, 1, 2]})})
    heartbeat(s, "a", group, again.generation_id, a, label="heartbeat a")


@sequence("classic/leave-v3-batch-known-and-unknown")
def _(s: Session) -> None:
    group = s.group()
    a, _generation = _stable_group(s, group)
    leave(s, "a", group, [("no-such-member", None), (a, None)], version=3, label="leave batch")


@sequence("classic/leave-v5-empty-members")
def _(s: Session) -> None:
    group = s.group()
    _stable_group(s, group)
    leave(s, "a", group, [], version=5, label="leave: no members")


@sequence("classic/rejoin-with-new-metadata-triggers-rebalance")
def _(s: Session) -> None:
    from tests.conformance.ops import SUBSCRIPTION, TOPIC2
    from tests.integration.raw_groups import subscription

    group = s.group()
    a, generation = _stable_group(s, group)
    same = join(s, "a", group, a, label="rejoin a: same metadata")
    sync(s, "a", group, same.generation_id, a, {a: assignment({TOPIC: [0, 1, 2]})})
    new_md = subscription([TOPIC, TOPIC2])
    assert new_md != SUBSCRIPTION
    changed = join(s, "a", group, a, protocols=(("range", new_md),), label="rejoin: new md")
    sync(s, "a", group, changed.generation_id, a, {a: assignment({TOPIC: [0, 1, 2]})})
    heartbeat(s, "a", group, changed.generation_id, a, label="heartbeat")
    assert generation <= changed.generation_id

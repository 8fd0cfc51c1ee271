"""Reads and admin operations on groups: DescribeGroups, ListGroups (state and type filters),
FindCoordinator and DeleteGroups, at every version both servers serve."""

from __future__ import annotations

from tests.conformance.ops import (
    DELETE_GROUPS,
    FIND_COORDINATOR,
    TOPIC,
    assignment,
    commit,
    describe,
    join,
    leave,
    list_groups,
    sync,
)
from tests.conformance.runner import Session, sequence


def _stable(s: Session, group: str, conn: str = "a") -> tuple[str, int]:
    member = join(s, conn, group, label="join: id required").member_id
    joined = join(s, conn, group, member, label="join: leader")
    sync(s, conn, group, joined.generation_id, member, {member: assignment({TOPIC: [0, 1, 2]})})
    return member, joined.generation_id


for _v in range(7):

    @sequence(f"admin/describe-groups-v{_v}-stable-empty-and-unknown")
    def _(s: Session, version: int = _v) -> None:
        stable, empty, unknown = s.group("stable"), s.group("empty"), s.group("unknown")
        _stable(s, stable)
        commit(s, "a", empty, {(TOPIC, 0): 1})
        describe(s, "a", [stable], version=version, label="describe stable")
        describe(s, "a", [empty], version=version, label="describe empty")
        describe(s, "a", [unknown], version=version, label="describe unknown")
        describe(s, "a", [stable, unknown, empty], version=version, label="describe three")

    @sequence(f"admin/describe-groups-v{_v}-completing-rebalance")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        member = join(s, "a", group, label="join: id required").member_id
        join(s, "a", group, member, label="join: leader, no sync yet")
        describe(s, "a", [group], version=version, label="describe awaiting sync")


@sequence("admin/describe-groups-preparing-rebalance")
def _(s: Session) -> None:
    group = s.group()
    a, _ = _stable(s, group)
    b = join(s, "b", group, label="join b: id required").member_id
    parked = join(s, "b", group, b, label="join b (parks)", wait=False)
    s.sleep(0.5)
    describe(s, "c", [group], label="describe while preparing")
    join(s, "a", group, a, label="rejoin a")
    parked.result(30)
    describe(s, "c", [group], label="describe awaiting sync")


@sequence("admin/describe-groups-include-authorized-operations")
def _(s: Session) -> None:
    group = s.group()
    _stable(s, group)
    s.call(
        "a", 15, 5, "describe with operations", groups=[group], include_authorized_operations=True
    )


@sequence("admin/describe-groups-after-leave")
def _(s: Session) -> None:
    group = s.group()
    member, generation = _stable(s, group)
    commit(s, "a", group, {(TOPIC, 0): 1}, generation=generation, member_id=member)
    leave(s, "a", group, [(member, None)])
    describe(s, "a", [group], label="describe after the last member left")


def _listing(s: Session) -> tuple[str, str]:
    stable, empty = s.group("stable"), s.group("empty")
    _stable(s, stable)
    commit(s, "a", empty, {(TOPIC, 0): 1})
    return stable, empty


for _v in range(6):

    @sequence(f"admin/list-groups-v{_v}-unfiltered")
    def _(s: Session, version: int = _v) -> None:
        _listing(s)
        list_groups(s, "a", version=version)


for _v in (4, 5):
    for _states in (["Stable"], ["Empty"], ["stable", "EMPTY"], ["Dead"], ["CompletingRebalance"]):

        @sequence(f"admin/list-groups-v{_v}-states-{'-'.join(_states)}")
        def _(s: Session, version: int = _v, states: list[str] = _states) -> None:
            _listing(s)
            list_groups(s, "a", version=version, states=states)


for _types in (["classic"], ["Classic"], ["consumer"], ["Consumer", "Classic"], ["share"]):

    @sequence(f"admin/list-groups-v5-types-{'-'.join(_types)}")
    def _(s: Session, types: list[str] = _types) -> None:
        _listing(s)
        list_groups(s, "a", version=5, types=types)


@sequence("admin/list-groups-v5-states-and-types")
def _(s: Session) -> None:
    _listing(s)
    list_groups(s, "a", version=5, states=["Empty"], types=["Classic"])


for _v in range(7):

    @sequence(f"admin/find-coordinator-v{_v}-group")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        s.call(
            "a",
            FIND_COORDINATOR,
            version,
            "find coordinator",
            key=group,
            key_type=0,
            coordinator_keys=[group, s.group("other")],
        )


for _v in (1, 3, 4, 6):

    @sequence(f"admin/find-coordinator-v{_v}-unknown-key-type")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        s.call(
            "a",
            FIND_COORDINATOR,
            version,
            "key type 7",
            key=group,
            key_type=7,
            coordinator_keys=[group],
        )


for _v in range(3):

    @sequence(f"admin/delete-groups-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        empty, stable, unknown = s.group("empty"), s.group("stable"), s.group("unknown")
        commit(s, "a", empty, {(TOPIC, 0): 1})
        _stable(s, stable)
        s.call("a", DELETE_GROUPS, version, "delete", groups_names=[empty, stable, unknown])
        describe(s, "a", [empty, stable], label="describe after delete")
        s.call("a", DELETE_GROUPS, version, "delete again", groups_names=[empty])


@sequence("admin/delete-group-then-reuse")
def _(s: Session) -> None:
    group = s.group()
    member, _generation = _stable(s, group)
    leave(s, "a", group, [(member, None)])
    s.call("a", DELETE_GROUPS, 2, "delete the empty group", groups_names=[group])
    _stable(s, group)
    describe(s, "a", [group], label="describe the new incarnation")

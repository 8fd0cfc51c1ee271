"""OffsetCommit, OffsetFetch and OffsetDelete: simple groups (generation -1), members of
classic groups, unknown topics and partitions, and every served version."""

from __future__ import annotations

from tests.conformance.ops import (
    OFFSET_DELETE,
    TOPIC,
    TOPIC2,
    UNKNOWN_TOPIC,
    assignment,
    commit,
    fetch_offsets,
    heartbeat,
    join,
    sync,
)
from tests.conformance.runner import Session, sequence

# OffsetCommit v2-v9 and OffsetFetch v1-v9: what both servers serve and the codec knows.
COMMIT_VERSIONS = range(2, 10)
FETCH_VERSIONS = range(1, 10)


def _stable_member(s: Session, group: str) -> tuple[str, int]:
    member = join(s, "a", group, label="join: id required").member_id
    joined = join(s, "a", group, member, label="join: leader")
    sync(s, "a", group, joined.generation_id, member, {member: assignment({TOPIC: [0, 1, 2]})})
    return member, joined.generation_id


for _v in COMMIT_VERSIONS:

    @sequence(f"offsets/commit-v{_v}-simple-group-then-fetch")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        commit(s, "a", group, {(TOPIC, 0): 5, (TOPIC, 1): 7}, version=version, metadata="m")
        fetch_offsets(s, "a", group, {TOPIC: [0, 1, 2]}, version=8)
        commit(s, "a", group, {(TOPIC, 0): 6}, version=version, label="commit again")
        fetch_offsets(s, "a", group, {TOPIC: [0, 1]}, version=8, label="fetch again")

    @sequence(f"offsets/commit-v{_v}-unknown-topic-and-partition")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        commit(s, "a", group, {(UNKNOWN_TOPIC, 0): 1}, version=version, label="unknown topic")
        commit(s, "a", group, {(TOPIC, 99): 1}, version=version, label="unknown partition")
        fetch_offsets(s, "a", group, {TOPIC: [0], UNKNOWN_TOPIC: [0]}, version=8)


for _v in (2, 9):

    @sequence(f"offsets/commit-v{_v}-known-then-unknown-topic")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        commit(
            s, "a", group, {(TOPIC, 0): 1, (UNKNOWN_TOPIC, 0): 1}, version=version, label="mixed"
        )
        fetch_offsets(s, "a", group, {TOPIC: [0], UNKNOWN_TOPIC: [0]}, version=8)

    @sequence(f"offsets/commit-v{_v}-member-of-classic-group")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        member, generation = _stable_member(s, group)
        commit(
            s,
            "a",
            group,
            {(TOPIC, 0): 3},
            generation=generation,
            member_id=member,
            version=version,
            label="commit: member, generation",
        )
        commit(
            s,
            "a",
            group,
            {(TOPIC, 0): 4},
            generation=generation + 1,
            member_id=member,
            version=version,
            label="commit: illegal generation",
        )
        commit(
            s,
            "a",
            group,
            {(TOPIC, 0): 4},
            generation=generation,
            member_id="no-such-member",
            version=version,
            label="commit: unknown member",
        )
        commit(s, "a", group, {(TOPIC, 0): 4}, version=version, label="commit: generation -1")
        fetch_offsets(s, "a", group, {TOPIC: [0]}, version=8)


for _v in FETCH_VERSIONS:

    @sequence(f"offsets/fetch-v{_v}-committed-unknown-and-missing")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        commit(s, "a", group, {(TOPIC, 1): 11, (TOPIC2, 0): 12}, metadata="meta")
        fetch_offsets(
            s, "a", group, {TOPIC: [0, 1], TOPIC2: [0], UNKNOWN_TOPIC: [0]}, version=version
        )
        fetch_offsets(
            s, "a", s.group("never-used"), {TOPIC: [0]}, version=version, label="unknown group"
        )

    if _v >= 2:

        @sequence(f"offsets/fetch-v{_v}-all-partitions")
        def _(s: Session, version: int = _v) -> None:
            group = s.group()
            commit(s, "a", group, {(TOPIC, 2): 1, (TOPIC2, 0): 2})
            fetch_offsets(s, "a", group, None, version=version, label="fetch all")
            fetch_offsets(s, "a", s.group("none"), None, version=version, label="unknown group")


@sequence("offsets/commit-during-rebalance")
def _(s: Session) -> None:
    group = s.group()
    a, generation = _stable_member(s, group)
    b = join(s, "b", group, label="join b: id required").member_id
    b_join = join(s, "b", group, b, label="join b (parks)", wait=False)
    s.sleep(0.5)
    commit(s, "a", group, {(TOPIC, 0): 9}, generation=generation, member_id=a, label="rebal")
    heartbeat(s, "a", group, generation, a, label="heartbeat a: rebalancing")
    rejoined = join(s, "a", group, a, label="rejoin a")
    b_join.result(30)
    commit(
        s,
        "a",
        group,
        {(TOPIC, 0): 10},
        generation=rejoined.generation_id,
        member_id=a,
        label="commit: awaiting sync",
    )
    fetch_offsets(s, "a", group, {TOPIC: [0]})


@sequence("offsets/commit-v9-empty-member-id-with-generation")
def _(s: Session) -> None:
    group = s.group()
    _stable_member(s, group)
    commit(s, "a", group, {(TOPIC, 0): 1}, generation=1, member_id="", label="empty member")


@sequence("offsets/commit-to-empty-group-with-generation")
def _(s: Session) -> None:
    group = s.group()
    commit(s, "a", group, {(TOPIC, 0): 1}, generation=1, member_id="m", label="unknown group")
    fetch_offsets(s, "a", group, {TOPIC: [0]})


@sequence("offsets/fetch-v8-several-groups")
def _(s: Session) -> None:
    g1, g2, g3 = s.group("one"), s.group("two"), s.group("unknown")
    commit(s, "a", g1, {(TOPIC, 0): 1})
    commit(s, "a", g2, {(TOPIC2, 0): 2})
    s.call(
        "a",
        9,
        8,
        "fetch three groups",
        groups=[
            {"group_id": g1, "topics": [{"name": TOPIC, "partition_indexes": [0, 1]}]},
            {"group_id": g2, "topics": None},
            {"group_id": g3, "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        ],
        require_stable=False,
    )


def _offset_delete(s: Session, group: str, partitions: dict[str, list[int]], label: str) -> None:
    s.call(
        "a",
        OFFSET_DELETE,
        0,
        label,
        group_id=group,
        topics=[
            {"name": t, "partitions": [{"partition_index": p} for p in ps]}
            for t, ps in partitions.items()
        ],
    )


@sequence("offsets/delete-simple-group")
def _(s: Session) -> None:
    group = s.group()
    commit(s, "a", group, {(TOPIC, 0): 1, (TOPIC, 1): 2, (TOPIC2, 0): 3})
    _offset_delete(s, group, {TOPIC: [0], TOPIC2: [0]}, "delete two")
    fetch_offsets(s, "a", group, None)
    _offset_delete(s, group, {TOPIC: [0]}, "delete again")
    _offset_delete(s, group, {UNKNOWN_TOPIC: [0]}, "delete unknown topic")
    _offset_delete(s, group, {TOPIC: [99]}, "delete unknown partition")


@sequence("offsets/delete-unknown-group")
def _(s: Session) -> None:
    _offset_delete(s, s.group(), {TOPIC: [0]}, "delete: no such group")


@sequence("offsets/delete-subscribed-topic-of-live-group")
def _(s: Session) -> None:
    group = s.group()
    member, generation = _stable_member(s, group)
    commit(s, "a", group, {(TOPIC, 0): 1, (TOPIC2, 0): 1}, generation=generation, member_id=member)
    _offset_delete(s, group, {TOPIC: [0]}, "delete: subscribed topic")
    _offset_delete(s, group, {TOPIC2: [0]}, "delete: topic not subscribed")
    fetch_offsets(s, "a", group, None)

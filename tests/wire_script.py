"""The requests of the recorded wire session (tests/wire_session.py), in order.

Three connections: "a" and "b" are group members, "c" an admin/observer. Each step's label
names what it shows; labels are unique, and the recording is compared label by label.
Every step either gets its answer at once or parks until another step in the script
releases it (send, then recv after the releasing step), so nothing waits on a timer.
Consumer groups subscribe to one topic each: a member's assignment lists topics in topic id
order, and topic ids are random per run.
"""

from __future__ import annotations

from typing import Any

from tests.wire_requests import (
    API_VERSIONS,
    CG_REBALANCE_MS,
    CREATE_TOPICS,
    DELETE,
    DESCRIBE_CLUSTER,
    FIND_COORDINATOR,
    SET,
    alter_configs,
    assigned,
    assignment,
    cg_describe,
    cg_heartbeat,
    cg_join,
    commit,
    delete_groups,
    describe_configs,
    describe_groups,
    fetch,
    group_state,
    heartbeat,
    join,
    leave,
    list_groups,
    millis,
    offset_delete,
    sync,
)
from tests.wire_session import Session, entity, request

TOPICS = {"wire-a": 3, "wire-b": 2, "wire-c": 1}


def script(s: Session) -> None:
    setup(s)
    find_coordinator(s)
    simple_group_offsets(s)
    classic_every_version(s)
    classic_rebalance(s)
    static_members(s)
    classic_errors(s)
    consumer_group(s)
    consumer_group_v0_static_regex(s)
    consumer_group_errors(s)
    group_configs(s)
    listing(s)
    leaving_and_deleting(s)


def setup(s: Session) -> None:
    cluster = s.quiet(
        "c", request(DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=False)
    )
    s.normalize.cluster_id = cluster.cluster_id.encode()
    for v in range(5):
        s.call(
            "c",
            f"ApiVersions v{v}",
            request(API_VERSIONS, v, client_software_name="wire", client_software_version="1"),
        )

    def create(names: dict[str, int]) -> Any:
        k, v = CREATE_TOPICS, 7
        return request(
            k,
            v,
            timeout=millis(10_000),
            validate_only=False,
            topics=tuple(
                entity(
                    k,
                    v,
                    "CreatableTopic",
                    name=name,
                    num_partitions=n,
                    replication_factor=1,
                    assignments=(),
                    configs=(),
                )
                for name, n in names.items()
            ),
        )

    created = s.call("c", "CreateTopics v7 the session's topics", create(TOPICS))
    s.topic_ids = {t.name: t.topic_id for t in created.topics}
    s.call("c", "CreateTopics v7 an existing topic", create({"wire-a": 3}))


def find_coordinator(s: Session) -> None:
    for v in range(7):
        if v < 4:
            body = request(FIND_COORDINATOR, v, key="wire-offsets", key_type=0)
        else:
            body = request(
                FIND_COORDINATOR, v, key_type=0, coordinator_keys=("wire-offsets", "wire-cg")
            )
        s.call("c", f"FindCoordinator v{v} group", body)
    s.call(
        "c",
        "FindCoordinator v3 transaction",
        request(FIND_COORDINATOR, 3, key="txn", key_type=1),
    )
    s.call(
        "c",
        "FindCoordinator v6 transaction",
        request(FIND_COORDINATOR, 6, key_type=1, coordinator_keys=("txn",)),
    )
    s.call(
        "c",
        "FindCoordinator v4 unknown key type",
        request(FIND_COORDINATOR, 4, key_type=7, coordinator_keys=("x",)),
    )


def simple_group_offsets(s: Session) -> None:
    """Commits of a group with no members (generation -1), every version and shape."""
    g = "wire-offsets"
    for v in range(2, 10):
        s.call(
            "a",
            f"OffsetCommit v{v} simple group",
            commit(v, g, {"wire-a": [(0, 100 + v, f"m{v}"), (1, 200 + v, "")]}),
        )
    s.call(
        "a",
        "OffsetCommit v3 retention time",
        commit(3, g, {"wire-b": [(0, 30, "kept a day")]}, retention_ms=86_400_000),
    )
    # v8-v9 of the fast path's shape: short strings, small arrays, no tagged fields.
    s.call(
        "a",
        "OffsetCommit v8 fast path two topics, null metadata",
        commit(8, g, {"wire-a": [(2, 302, None)], "wire-b": [(1, 31, "")]}),
    )
    s.call("a", "OffsetCommit v9 fast path one partition", commit(9, g, {"wire-a": [(2, 303, "")]}))
    s.call(
        "a",
        "OffsetCommit v9 fast path unknown topic and partition",
        commit(9, g, {"wire-missing": [(0, 1, "")], "wire-b": [(7, 1, ""), (0, 32, "x")]}),
    )
    s.call(
        "a",
        "OffsetCommit v9 fast path empty group id (allowed, as in Kafka)",
        commit(9, "", {"wire-a": [(0, 1, "")]}),
    )
    s.call("a", "OffsetCommit v2 empty group id", commit(2, "", {"wire-a": [(0, 1, "")]}))
    s.call("a", "OffsetCommit v2 unknown topic", commit(2, g, {"wire-missing": [(0, 1, "")]}))
    # Past the fast path's limits: the codec's path answers.
    long_group = "wire-long-" + "x" * 130
    s.call("a", "OffsetCommit v9 long group id", commit(9, long_group, {"wire-a": [(0, 5, "")]}))
    s.call(
        "a",
        "OffsetCommit v9 130 partitions",
        commit(9, g, {"wire-a": [(p, 1000 + p, "") for p in range(130)]}),
    )
    s.call(
        "a",
        "OffsetCommit v9 metadata too large",
        commit(9, g, {"wire-a": [(0, 7, "m" * 5000)], "wire-b": [(0, 33, "")]}),
    )
    s.call(
        "a",
        "OffsetCommit v9 generation for a group that does not exist",
        commit(9, "wire-nogroup-commit", {"wire-a": [(0, 1, "")]}, generation=3, member="ghost"),
    )
    s.call(
        "a",
        "OffsetCommit v8 instance id without a member",
        commit(8, g, {"wire-a": [(0, 1, "")]}, instance="lonely"),
    )

    wanted = {"wire-a": [0, 1, 2], "wire-b": [0, 1], "wire-missing": [0]}
    for v in range(1, 10):
        s.call("a", f"OffsetFetch v{v} partitions", fetch(v, [(g, wanted)]))
    for v in range(2, 10):
        s.call("a", f"OffsetFetch v{v} all topics", fetch(v, [(g, None)]))
    s.call("a", "OffsetFetch v7 require stable", fetch(7, [(g, {"wire-a": [0]})], True))
    s.call("a", "OffsetFetch v1 empty group id", fetch(1, [("", {"wire-a": [0]})]))
    s.call("a", "OffsetFetch v5 missing group", fetch(5, [("wire-nogroup", {"wire-a": [0]})]))
    s.call(
        "a",
        "OffsetFetch v8 three groups",
        fetch(
            8,
            [(g, {"wire-a": [0, 2]}), ("wire-nogroup", None), ("", {"wire-a": [0]})],
        ),
    )
    s.call("a", "OffsetFetch v9 long group id", fetch(9, [(long_group, None)]))

    s.call(
        "a",
        "OffsetDelete v0 a partition and an unknown topic",
        offset_delete(g, {"wire-a": [1], "wire-missing": [0]}),
    )
    s.call("a", "OffsetDelete v0 missing group", offset_delete("wire-nogroup", {"wire-a": [0]}))
    s.call("a", "OffsetDelete v0 invalid group id", offset_delete("", {"wire-a": [0]}))
    s.call("a", "OffsetFetch v6 after the delete", fetch(6, [(g, None)]))


def classic_every_version(s: Session) -> None:
    """One member per JoinGroup version: join, sync, heartbeat, commit, leave."""
    for v in range(10):
        g = f"wire-join-v{v}"
        sv, hv, lv, cv = min(v, 5), min(v, 4), min(v, 5), min(v + 2, 9)
        joined = s.call("a", f"JoinGroup v{v} new member", join(v, g))
        if v >= 4:  # MEMBER_ID_REQUIRED: join again with the id handed out
            joined = s.call(
                "a", f"JoinGroup v{v} with the id handed out", join(v, g, joined.member_id)
            )
        member, generation = joined.member_id, joined.generation_id
        s.call(
            "a",
            f"SyncGroup v{sv} leader of {g}",
            sync(sv, g, generation, member, {member: assignment({"wire-a": [0, 1, 2]})}),
        )
        s.call("a", f"Heartbeat v{hv} member of {g}", heartbeat(hv, g, generation, member))
        s.call(
            "a",
            f"Heartbeat v{hv} illegal generation in {g}",
            heartbeat(hv, g, generation + 1, member),
        )
        s.call("a", f"Heartbeat v{hv} unknown member in {g}", heartbeat(hv, g, generation, "ghost"))
        s.call(
            "a",
            f"OffsetCommit v{cv} member of {g}",
            commit(cv, g, {"wire-a": [(0, v, "")]}, generation, member),
        )
        s.call(
            "a",
            f"OffsetCommit v{cv} illegal generation in {g}",
            commit(cv, g, {"wire-a": [(0, v, "")]}, generation + 1, member),
        )
        if lv < 3:
            body = leave(lv, g, member=member)
        else:
            body = leave(lv, g, members=[(member, None, "done" if lv >= 5 else None)])
        s.call("a", f"LeaveGroup v{lv} member of {g}", body)


def classic_rebalance(s: Session) -> None:
    """Two members (a: JoinGroup v9, b: v7): a second member's join parks until the first
    rejoins; heartbeats and commits during each phase; describe while it is in flight."""
    g = "wire-rebalance"
    a = s.call("a", "rebalance: A joins (member id required)", join(9, g))
    a = s.call("a", "rebalance: A joins with its id", join(9, g, a.member_id, reason="start"))
    first = a.member_id
    s.call(
        "a",
        "rebalance: A syncs generation 1",
        sync(5, g, 1, first, {first: assignment({"wire-a": [0, 1, 2]})}),
    )
    s.call(
        "a",
        "rebalance: A commits at generation 1",
        commit(9, g, {"wire-a": [(0, 10, "")]}, 1, first),
    )
    b = s.call("b", "rebalance: B joins (member id required)", join(7, g))
    second = b.member_id
    s.send("b", "rebalance: B joins with its id (parks)", join(7, g, second))
    s.wait_for("B's join to start a rebalance", lambda: group_state(s, g) == "PreparingRebalance")
    s.call("a", "rebalance: A heartbeat while preparing", heartbeat(4, g, 1, first))
    s.call(
        "a",
        "rebalance: A commits while preparing",
        commit(9, g, {"wire-a": [(0, 11, "")]}, 1, first),
    )
    for v in range(7):
        s.call(
            "c",
            f"DescribeGroups v{v} while preparing",
            describe_groups(v, (g, "wire-nogroup"), include_ops=v >= 3),
        )
    s.send("a", "rebalance: A rejoins, which completes the join", join(9, g, first))
    s.recv("a")
    s.recv("b")
    s.send("b", "rebalance: B syncs generation 2 (parks)", sync(3, g, 2, second))
    s.call("a", "rebalance: A heartbeat while completing", heartbeat(3, g, 2, first))
    s.call(
        "a",
        "rebalance: A commits while completing",
        commit(9, g, {"wire-a": [(0, 12, "")]}, 2, first),
    )
    s.call(
        "a",
        "rebalance: A syncs generation 2 with the assignment",
        sync(
            5,
            g,
            2,
            first,
            {
                first: assignment({"wire-a": [0, 1]}),
                second: assignment({"wire-a": [2]}),
            },
        ),
    )
    s.recv("b")
    s.call("b", "rebalance: B heartbeat when stable", heartbeat(1, g, 2, second))
    s.call(
        "b",
        "rebalance: B commits at generation 2",
        commit(8, g, {"wire-a": [(2, 20, "b")]}, 2, second),
    )
    s.call(
        "b",
        "rebalance: B commits with the old generation",
        commit(8, g, {"wire-a": [(2, 21, "")]}, 1, second),
    )
    s.call(
        "b",
        "rebalance: unknown member commits",
        commit(6, g, {"wire-a": [(2, 22, "")]}, 2, "ghost"),
    )
    s.call(
        "c",
        "DescribeGroups v5 when stable",
        describe_groups(5, (g, "wire-offsets", "wire-join-v3")),
    )
    s.call(
        "c",
        "OffsetDelete v0 of a subscribed and an unsubscribed topic",
        offset_delete(g, {"wire-a": [0], "wire-b": [0]}),
    )
    s.call("c", "DeleteGroups v2 of a group with members", delete_groups(2, (g,)))


def static_members(s: Session) -> None:
    g = "wire-static"
    joined = s.call("a", "static: S1 joins (no member id required)", join(9, g, instance="s1"))
    old = joined.member_id
    s.call(
        "a",
        "static: S1 syncs",
        sync(5, g, 1, old, {old: assignment({"wire-a": [0, 1, 2]})}, instance="s1"),
    )
    s.call("a", "static: S1 heartbeat", heartbeat(4, g, 1, old, instance="s1"))
    rejoined = s.call(
        "a",
        "static: S1 rejoins after a restart (leader: skip assignment)",
        join(9, g, instance="s1"),
    )
    new, generation = rejoined.member_id, rejoined.generation_id
    s.call("a", "static: S1's old id is fenced", heartbeat(4, g, 1, old, instance="s1"))
    s.call("a", "static: S1's new id heartbeat", heartbeat(4, g, generation, new, instance="s1"))
    s.call(
        "a",
        "static: S1's old id commits",
        commit(9, g, {"wire-a": [(0, 1, "")]}, 1, old, instance="s1"),
    )
    s.call(
        "a",
        "static: S1 commits with its new id",
        commit(9, g, {"wire-a": [(0, 2, "")]}, generation, new, instance="s1"),
    )
    s.call("a", "static: S1 syncs after the rejoin", sync(5, g, generation, new, instance="s1"))
    s.call(
        "a",
        "static: S1 joins with its old id",
        join(9, g, old, instance="s1"),
    )

    g5 = "wire-static-v5"
    joined = s.call("b", "static v5: joins", join(5, g5, instance="s5"))
    s.call(
        "b",
        "static v5: syncs",
        sync(5, g5, joined.generation_id, joined.member_id, instance="s5"),
    )
    s.call(
        "b",
        "static v5: leaves by instance id",
        leave(4, g5, members=[("", "s5", None), ("", "nobody-static", None)]),
    )
    s.call("c", "DescribeGroups v4 static groups", describe_groups(4, (g, g5)))


def classic_errors(s: Session) -> None:
    g = "wire-rebalance"  # stable at generation 2 with A and B
    s.call("a", "JoinGroup v0 invalid group id", join(0, ""))
    s.call("a", "JoinGroup v9 invalid group id", join(9, ""))
    s.call("a", "JoinGroup v5 session timeout too small", join(5, "wire-errors", session_ms=1000))
    s.call("a", "JoinGroup v9 unknown member id", join(9, g, "ghost"))
    s.call(
        "a",
        "JoinGroup v9 inconsistent protocol type",
        join(9, g, protocol_type="connect"),
    )
    s.call("a", "SyncGroup v5 unknown member", sync(5, g, 2, "ghost"))
    first = s.quiet("c", describe_groups(5, (g,))).groups[0].members[0].member_id
    s.call("a", "SyncGroup v4 illegal generation", sync(4, g, 9, first))
    s.call("a", "Heartbeat v3 illegal generation", heartbeat(3, g, 1, first))
    s.call("a", "SyncGroup v0 invalid group id", sync(0, "", 1, "x"))
    s.call("a", "SyncGroup v2 unknown group", sync(2, "wire-nogroup", 1, "x"))
    s.call("a", "Heartbeat v0 unknown group", heartbeat(0, "wire-nogroup", 1, "x"))
    s.call("a", "Heartbeat v4 invalid group id", heartbeat(4, "", 1, "x"))
    s.call("a", "LeaveGroup v0 unknown member", leave(0, g, member="ghost"))
    s.call("a", "LeaveGroup v1 invalid group id", leave(1, "", member="x"))
    s.call(
        "a",
        "LeaveGroup v5 unknown group",
        leave(5, "wire-nogroup", members=[("x", None, None)]),
    )
    s.call("c", "DescribeGroups v6 empty group id", describe_groups(6, ("",)))


def consumer_group(s: Session) -> None:
    """KIP-848 (v1, client-chosen member ids): join, acknowledge, steady heartbeats (the
    fast path), commits fenced by epochs, a second member (revoke, then assign), leave."""
    g = "wire-cg"
    joined = s.call("a", "CG v1: m1 joins", cg_join(s, 1, g, "cg-m1", "wire-a"))
    epoch = joined.member_epoch
    s.call(
        "a",
        "CG v1: m1 acknowledges its assignment",
        cg_heartbeat(s, 1, g, "cg-m1", epoch, owned=assigned(s, joined)),
    )
    for i in range(3):
        s.call("a", f"CG v1: m1 steady heartbeat {i + 1}", cg_heartbeat(s, 1, g, "cg-m1", epoch))
    for v in range(2):
        s.call(
            "c",
            f"ConsumerGroupDescribe v{v} one member",
            cg_describe(v, (g, "wire-nogroup", "", "wire-offsets"), include_ops=v == 1),
        )
    s.call(
        "a",
        "CG: m1 commits at its epoch",
        commit(9, g, {"wire-a": [(0, 7, ""), (1, 8, "")]}, epoch, "cg-m1"),
    )
    s.call(
        "a",
        "CG: m1 commits at an older epoch",
        commit(9, g, {"wire-a": [(0, 7, "")]}, epoch - 1, "cg-m1"),
    )
    s.call(
        "a",
        "CG: m1 commits at a newer epoch",
        commit(9, g, {"wire-a": [(0, 7, "")]}, epoch + 5, "cg-m1"),
    )
    s.call(
        "a",
        "CG: unknown member commits",
        commit(9, g, {"wire-a": [(0, 7, "")]}, epoch, "cg-ghost"),
    )
    s.call(
        "a",
        "CG: m1 commits with OffsetCommit v7",
        commit(7, g, {"wire-a": [(0, 7, "")]}, epoch, "cg-m1"),
    )
    s.call(
        "a",
        "CG: a commit without member (generation -1)",
        commit(9, g, {"wire-a": [(0, 7, "")]}),
    )
    wanted = {"wire-a": [0, 1, 2]}
    s.call("a", "CG: OffsetFetch v9 at m1's epoch", fetch(9, [(g, wanted)], False, "cg-m1", epoch))
    s.call(
        "a",
        "CG: OffsetFetch v9 at a stale epoch",
        fetch(9, [(g, wanted)], True, "cg-m1", epoch - 1),
    )
    s.call("a", "CG: OffsetFetch v9 unknown member", fetch(9, [(g, wanted)], False, "cg-ghost", 1))
    s.call("a", "CG: OffsetFetch v8 of a consumer group", fetch(8, [(g, wanted)], True))

    m2 = s.call("b", "CG v1: m2 joins", cg_join(s, 1, g, "cg-m2", "wire-a"))
    revoking = s.call(
        "a", "CG v1: m1 heartbeat learns its new assignment", cg_heartbeat(s, 1, g, "cg-m1", epoch)
    )
    kept = assigned(s, revoking)
    s.call(
        "a",
        "CG: m1 commits a revoked partition",
        commit(9, g, {"wire-a": [(p, 9, "") for p in range(3)]}, epoch, "cg-m1"),
    )
    acked = s.call(
        "a",
        "CG v1: m1 acknowledges the revocation",
        cg_heartbeat(s, 1, g, "cg-m1", revoking.member_epoch, owned=kept),
    )
    s.call(
        "a",
        "CG: m1 commits the revoked partition at its new epoch",
        commit(9, g, {"wire-a": [(p, 10, "") for p in range(3)]}, acked.member_epoch, "cg-m1"),
    )
    m2 = s.call(
        "b",
        "CG v1: m2 heartbeat gets the released partitions",
        cg_heartbeat(s, 1, g, "cg-m2", m2.member_epoch),
    )
    s.call(
        "b",
        "CG v1: m2 acknowledges",
        cg_heartbeat(s, 1, g, "cg-m2", m2.member_epoch, owned=assigned(s, m2)),
    )
    s.call("b", "CG v1: m2 steady heartbeat", cg_heartbeat(s, 1, g, "cg-m2", m2.member_epoch))
    s.call("a", "CG v1: m1 steady heartbeat", cg_heartbeat(s, 1, g, "cg-m1", acked.member_epoch))
    s.call("c", "ConsumerGroupDescribe v1 two members", cg_describe(1, (g,)))
    s.call("c", "DescribeGroups v6 of a consumer group", describe_groups(6, (g,)))
    s.call(
        "c",
        "OffsetDelete v0 of a consumer group's subscribed topic",
        offset_delete(g, {"wire-a": [0]}),
    )
    s.call("c", "DeleteGroups v2 of a consumer group with members", delete_groups(2, (g,)))


def consumer_group_v0_static_regex(s: Session) -> None:
    g0 = "wire-cg0"
    joined = s.call(
        "a", "CG v0: joins (the coordinator names the member)", cg_join(s, 0, g0, "", "wire-b")
    )
    member, epoch = joined.member_id, joined.member_epoch
    s.call(
        "a",
        "CG v0: acknowledges",
        cg_heartbeat(s, 0, g0, member, epoch, owned=assigned(s, joined)),
    )
    s.call("a", "CG v0: steady heartbeat", cg_heartbeat(s, 0, g0, member, epoch))
    s.call("c", "ConsumerGroupDescribe v0 named by the coordinator", cg_describe(0, (g0,)))
    s.call("a", "CG v0: leaves", cg_heartbeat(s, 0, g0, member, -1))

    gs = "wire-cg-static"
    joined = s.call(
        "a", "CG static: joins", cg_join(s, 1, gs, "cg-s1", "wire-b", instance="cg-static")
    )
    epoch = joined.member_epoch
    owned = assigned(s, joined)
    s.call(
        "a",
        "CG static: acknowledges",
        cg_heartbeat(s, 1, gs, "cg-s1", epoch, owned=owned, instance="cg-static"),
    )
    s.call(
        "a",
        "CG static: steady heartbeat with its instance id",
        cg_heartbeat(s, 1, gs, "cg-s1", epoch, instance="cg-static"),
    )
    s.call(
        "a",
        "CG static: leaves for a restart (epoch -2)",
        cg_heartbeat(s, 1, gs, "cg-s1", -2, instance="cg-static"),
    )
    s.call(
        "b",
        "CG static: rejoins with a new member id",
        cg_join(s, 1, gs, "cg-s1-new", "wire-b", instance="cg-static"),
    )
    s.call(
        "a",
        "CG static: another member id takes the instance id in use",
        cg_join(s, 1, gs, "cg-s1-other", "wire-b", instance="cg-static"),
    )
    s.call("c", "ConsumerGroupDescribe v1 static member", cg_describe(1, (gs,)))

    gr = "wire-cg-regex"
    joined = s.call(
        "a",
        "CG regex: joins with a regex",
        cg_heartbeat(
            s, 1, gr, "cg-r1", 0, regex="wire-[c]", owned={}, rebalance_ms=CG_REBALANCE_MS
        ),
    )
    s.call(
        "a",
        "CG regex: acknowledges",
        cg_heartbeat(s, 1, gr, "cg-r1", joined.member_epoch, owned=assigned(s, joined)),
    )
    s.call("c", "ConsumerGroupDescribe v1 regex member", cg_describe(1, (gr,)))
    s.call("a", "CG regex: leaves", cg_heartbeat(s, 1, gr, "cg-r1", -1))


def consumer_group_errors(s: Session) -> None:
    g = "wire-cg"
    s.call("c", "CG v1: unknown member", cg_heartbeat(s, 1, g, "cg-ghost", 3))
    s.call("c", "CG v1: fenced epoch", cg_heartbeat(s, 1, g, "cg-m1", 99))
    s.call("c", "CG v1: empty group id", cg_join(s, 1, "", "cg-x", "wire-a"))
    s.call("c", "CG v1: empty member id", cg_join(s, 1, "wire-cg-bad", "", "wire-a"))
    s.call(
        "c",
        "CG v1: unknown assignor",
        cg_join(s, 1, "wire-cg-bad", "cg-x", "wire-a", assignor="nope"),
    )
    s.call(
        "c",
        "CG v1: invalid regex",
        cg_heartbeat(s, 1, "wire-cg-bad", "cg-x", 0, regex="(", owned={}, rebalance_ms=1000),
    )
    s.call(
        "c",
        "CG v1: join without a subscription",
        cg_heartbeat(s, 1, "wire-cg-bad", "cg-x", 0, owned={}, rebalance_ms=1000),
    )
    s.call(
        "c",
        "CG v0: empty member id with a non-zero epoch",
        cg_heartbeat(s, 0, "wire-cg-bad", "", 1, topics=("wire-a",)),
    )
    s.call(
        "c",
        "CG v1: a classic group's id",
        cg_heartbeat(s, 1, "wire-static", "cg-x", 1),
    )
    s.call(
        "c",
        "CG v1: unknown topic subscription",
        cg_join(s, 1, "wire-cg-unknown-topic", "cg-u1", "wire-missing"),
    )


def group_configs(s: Session) -> None:
    g = "wire-cg-conf"
    hb, session = "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms"
    for v in range(1, 5):
        s.call(
            "c",
            f"DescribeConfigs v{v} group defaults",
            describe_configs(v, [(g, None)], docs=v >= 3),
        )
    s.call(
        "c",
        "IncrementalAlterConfigs v0 set two group configs",
        alter_configs(0, g, [(hb, SET, "7000"), (session, SET, "50000")]),
    )
    s.call(
        "c",
        "DescribeConfigs v4 group overrides and a named key",
        describe_configs(4, [(g, (hb, session)), ("wire-cg", (hb,))], docs=True),
    )
    s.call(
        "c",
        "IncrementalAlterConfigs v1 out of bounds",
        alter_configs(1, g, [(session, SET, "1000")]),
    )
    s.call(
        "c",
        "IncrementalAlterConfigs v1 unknown config",
        alter_configs(1, g, [("no.such.config", SET, "1")]),
    )
    s.call(
        "c",
        "IncrementalAlterConfigs v1 validate only",
        alter_configs(1, g, [(hb, SET, "8000")], validate_only=True),
    )
    joined = s.call(
        "a", "CG conf: a member of the configured group", cg_join(s, 1, g, "cg-c1", "wire-c")
    )
    s.call(
        "a",
        "CG conf: acknowledges (the group's heartbeat interval)",
        cg_heartbeat(s, 1, g, "cg-c1", joined.member_epoch, owned=assigned(s, joined)),
    )
    s.call(
        "c",
        "IncrementalAlterConfigs v1 delete an override",
        alter_configs(1, g, [(hb, DELETE, None)]),
    )
    s.call("c", "DescribeConfigs v2 after the delete", describe_configs(2, [(g, None)]))
    s.call("a", "CG conf: leaves", cg_heartbeat(s, 1, g, "cg-c1", -1))


def listing(s: Session) -> None:
    for v in range(6):
        s.call("c", f"ListGroups v{v}", list_groups(v))
    s.call("c", "ListGroups v4 states Stable and Empty", list_groups(4, ("Stable", "Empty")))
    s.call("c", "ListGroups v5 type classic", list_groups(5, (), ("classic",)))
    s.call(
        "c", "ListGroups v5 state STABLE, type Consumer", list_groups(5, ("STABLE",), ("Consumer",))
    )
    s.call("c", "ListGroups v5 unknown type", list_groups(5, (), ("share",)))


def leaving_and_deleting(s: Session) -> None:
    for v in range(3):
        g = f"wire-delete-v{v}"
        s.call(
            "c", f"OffsetCommit v9 before DeleteGroups v{v}", commit(9, g, {"wire-b": [(0, 1, "")]})
        )
        s.call(
            "c",
            f"DeleteGroups v{v}",
            delete_groups(v, (g, "wire-nogroup", "", "wire-static")),
        )
    described = s.quiet("c", describe_groups(5, ("wire-rebalance",))).groups[0]
    members = [m.member_id for m in described.members]
    s.call(
        "a",
        "LeaveGroup v5 both members of wire-rebalance and a ghost",
        leave(
            5,
            "wire-rebalance",
            members=[(m, None, "bye") for m in members] + [("ghost", None, None)],
        ),
    )
    s.call("b", "CG v1: m2 leaves", cg_heartbeat(s, 1, "wire-cg", "cg-m2", -1))
    s.call("a", "CG v1: m1 leaves", cg_heartbeat(s, 1, "wire-cg", "cg-m1", -1))
    s.call(
        "c",
        "DeleteGroups v2 of emptied groups",
        delete_groups(2, ("wire-rebalance", "wire-cg", "wire-offsets")),
    )
    s.call("c", "ListGroups v5 at the end", list_groups(5))

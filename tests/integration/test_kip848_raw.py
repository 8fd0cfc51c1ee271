"""The consumer rebalance protocol (KIP-848) over the wire with a raw client: exact
ConsumerGroupHeartbeat steps (join, revoke-then-assign, acknowledge), KIP-1251 offset-commit
fencing by per-partition assignment epochs, the heartbeat's error paths, a SIGKILL while a
member is still revoking, and a subscribed topic growing.

The server runs with group.consumer.assignment.interval.ms=0 so every epoch bump computes
the new target in the heartbeat that causes it: each step below is deterministic."""

from __future__ import annotations

import datetime
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from groupcoord.protocol.api import build
from groupcoord.protocol.errors import ErrorCode
from tests.integration.raw_groups import commit, join
from tests.integration.test_clients import create_topic
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving

HEARTBEAT = 68
DESCRIBE = 69
REBALANCE_TIMEOUT_MS = 30_000

Owned = dict[uuid.UUID, set[int]]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(
        tmp_path / "data",
        group_consumer_assignment_interval_ms=0,
        group_consumer_session_timeout_ms=20000,
        group_initial_rebalance_delay_ms=0,
    ) as proc:
        yield proc


# -- requests --------------------------------------------------------------------------------


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def cg_heartbeat(
    client: RawClient,
    group: str,
    member_id: str,
    epoch: int,
    *,
    version: int = 1,
    topics: list[str] | None = None,
    regex: str | None = None,
    owned: Owned | None = None,
    instance_id: str | None = None,
    rebalance_timeout_ms: int = -1,
    assignor: str | None = None,
) -> Any:
    m = _m(HEARTBEAT, version)
    return client.request(
        HEARTBEAT,
        version,
        build(
            m.ConsumerGroupHeartbeatRequest,
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance_id,
            rack_id=None,
            rebalance_timeout=datetime.timedelta(milliseconds=rebalance_timeout_ms),
            subscribed_topic_names=None if topics is None else tuple(topics),
            subscribed_topic_regex=regex,
            server_assignor=assignor,
            topic_partitions=None
            if owned is None
            else tuple(
                build(m.TopicPartitions, topic_id=t, partitions=tuple(sorted(ps)))
                for t, ps in owned.items()
                if ps
            ),
        ),
    )


def describe(client: RawClient, group: str) -> Any:
    m = _m(DESCRIBE, 1)
    resp = client.request(
        DESCRIBE,
        1,
        build(
            m.ConsumerGroupDescribeRequest, group_ids=(group,), include_authorized_operations=False
        ),
    )
    assert len(resp.groups) == 1
    return resp.groups[0]


def holdings(described: Any) -> dict[str, set[tuple[str, int]]]:
    """member id -> (topic, partition) it holds (assigned or pending revocation)."""
    return {
        m.member_id: {
            (tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions
        }
        for m in described.members
    }


def commit_errors(
    client: RawClient,
    group: str,
    topic: str,
    offsets: dict[int, int],
    epoch: int,
    member_id: str,
    version: int = 9,
) -> dict[int, ErrorCode]:
    resp = commit(
        client, group, {(topic, p): o for p, o in offsets.items()}, epoch, member_id, version
    )
    return {p.partition_index: ErrorCode(p.error_code) for t in resp.topics for p in t.partitions}


def fetch(
    client: RawClient,
    group: str,
    topic: str,
    partitions: list[int],
    member_id: str | None,
    epoch: int,
) -> tuple[ErrorCode, dict[int, int]]:
    m = _m(9, 9)
    resp = client.request(
        9,
        9,
        build(
            m.OffsetFetchRequest,
            groups=(
                build(
                    m.OffsetFetchRequestGroup,
                    group_id=group,
                    member_id=member_id,
                    member_epoch=epoch,
                    topics=(
                        build(
                            m.OffsetFetchRequestTopics,
                            name=topic,
                            partition_indexes=tuple(partitions),
                        ),
                    ),
                ),
            ),
            require_stable=False,
        ),
    )
    g = resp.groups[0]
    return ErrorCode(g.error_code), {
        p.partition_index: p.committed_offset for t in g.topics for p in t.partitions
    }


def list_groups(client: RawClient) -> list[tuple[str, str, str]]:
    m = _m(16, 5)
    resp = client.request(16, 5, build(m.ListGroupsRequest, states_filter=(), types_filter=()))
    assert resp.error_code == 0
    return [(g.group_id, g.group_type, g.group_state) for g in resp.groups]


class RawMember:
    """One consumer-protocol member driven step by step: it remembers its id, its epoch and
    the last assignment the coordinator sent, and reports whatever the test says it owns."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: list[str] | None = None,
        regex: str | None = None,
        assignor: str | None = None,
    ) -> None:
        self.client = RawClient(bootstrap)
        self.group = group
        self.topics = topics
        self.regex = regex
        self.assignor = assignor
        self.member_id = str(uuid.uuid4())  # v1: the client names itself (KIP-1082)
        self.epoch = 0
        self.assigned: Owned = {}

    def close(self) -> None:
        self.client.close()

    def reconnect(self, bootstrap: str) -> None:
        self.client.close()
        self.client = RawClient(bootstrap)

    def _update(self, resp: Any) -> Any:
        if resp.error_code == 0:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                self.assigned = {
                    tp.topic_id: set(tp.partitions) for tp in resp.assignment.topic_partitions
                }
        return resp

    def join(self) -> Any:
        resp = cg_heartbeat(
            self.client,
            self.group,
            self.member_id,
            0,
            topics=self.topics,
            regex=self.regex,
            owned={},
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            assignor=self.assignor,
        )
        assert resp.error_code == 0, resp
        assert resp.member_id == self.member_id
        return self._update(resp)

    def beat(self, owned: Owned | None) -> Any:
        """A heartbeat at the member's epoch reporting `owned` (None: unchanged)."""
        return self._update(
            cg_heartbeat(self.client, self.group, self.member_id, self.epoch, owned=owned)
        )

    def ack(self) -> Any:
        """Report exactly what the coordinator last assigned (revocations done)."""
        return self.beat({t: set(ps) for t, ps in self.assigned.items()})

    def leave(self) -> Any:
        resp = cg_heartbeat(self.client, self.group, self.member_id, -1)
        assert resp.error_code == 0 and resp.member_epoch == -1, resp
        return resp

    def partitions(self) -> set[int]:
        return {p for ps in self.assigned.values() for p in ps}

    def count(self) -> int:
        return sum(len(ps) for ps in self.assigned.values())

    def ack_until(self, condition: Any, what: str, timeout_s: float = 10) -> None:
        """Heartbeat (acknowledging each assignment) until condition() holds."""
        deadline = time.monotonic() + timeout_s
        while True:
            resp = self.ack()
            assert resp.error_code == 0, resp
            if condition():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)


def until_loaded(fn: Any, timeout_s: float = 10) -> Any:
    """Call fn() until its answer is not COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = fn()
        if resp.error_code not in (14, 15) or time.monotonic() > deadline:
            return resp
        time.sleep(0.05)


def owned_of(topic_id: uuid.UUID, partitions: set[int]) -> Owned:
    return {topic_id: set(partitions)}


# -- a. KIP-1251 -----------------------------------------------------------------------------


def test_kip1251_commit_fencing_by_assignment_epochs(server: ServerProcess) -> None:
    topic, group = "k1251", "g-1251"
    create_topic(server.bootstrap, topic, 4)
    a = RawMember(server.bootstrap, group, [topic])
    b = RawMember(server.bootstrap, group, [topic])
    try:
        a.join()
        e1 = a.epoch
        assert e1 > 0
        assert a.partitions() == {0, 1, 2, 3}
        (topic_id,) = a.assigned
        assert a.ack().member_epoch == e1  # steady: nothing changes

        # B joins: the group epoch moves and a new target splits the partitions 2/2, but B
        # gets nothing yet: every partition is still A's (B is UNRELEASED_PARTITIONS).
        b.join()
        e2 = b.epoch
        assert e2 > e1
        assert b.partitions() == set()

        # A is asked to revoke: it stays at E1 and is sent the partitions it keeps.
        resp = a.beat(owned_of(topic_id, {0, 1, 2, 3}))
        assert resp.error_code == 0 and resp.member_epoch == e1
        kept = a.partitions()
        moved = {0, 1, 2, 3} - kept
        assert len(kept) == 2 and len(moved) == 2
        keep_p, move_p = min(kept), min(moved)
        # While revoking, its epoch is still current: any of its partitions may commit.
        assert commit_errors(a.client, group, topic, {move_p: 5}, e1, a.member_id) == {
            move_p: ErrorCode.NONE
        }
        # B still may not have them.
        assert b.ack().member_epoch == e2 and b.partitions() == set()

        # A acknowledges (omits the revoked partitions) and moves to E2; B then gets them.
        resp = a.ack()
        assert resp.error_code == 0 and a.epoch == e2 and a.partitions() == kept
        resp = b.ack()
        assert resp.error_code == 0 and b.epoch == e2 and b.partitions() == moved
        # A lost response: the previous epoch with partitions A still has is tolerated ...
        resp = cg_heartbeat(a.client, group, a.member_id, e1, owned=owned_of(topic_id, kept))
        assert (resp.error_code, resp.member_epoch) == (0, e2)
        # ... but not while claiming a partition that moved on.
        resp = cg_heartbeat(
            a.client, group, a.member_id, e1, owned=owned_of(topic_id, kept | {move_p})
        )
        assert resp.error_code == ErrorCode.FENCED_MEMBER_EPOCH

        # A commit at the previous epoch for a partition A held since E1: accepted.
        assert commit_errors(a.client, group, topic, {keep_p: 10}, e1, a.member_id) == {
            keep_p: ErrorCode.NONE
        }
        # A zombie commit at E1 for a partition that moved to B: rejected.
        assert commit_errors(a.client, group, topic, {move_p: 11}, e1, a.member_id) == {
            move_p: ErrorCode.STALE_MEMBER_EPOCH
        }
        # An epoch ahead of the member's: rejected.
        assert commit_errors(a.client, group, topic, {keep_p: 12}, e2 + 1, a.member_id) == {
            keep_p: ErrorCode.STALE_MEMBER_EPOCH
        }
        # One bad partition fails the whole request and nothing is written.
        assert commit_errors(a.client, group, topic, {keep_p: 13, move_p: 13}, e1, a.member_id) == {
            keep_p: ErrorCode.STALE_MEMBER_EPOCH,
            move_p: ErrorCode.STALE_MEMBER_EPOCH,
        }
        # A consumer-protocol member must commit with v9+.
        assert commit_errors(a.client, group, topic, {keep_p: 14}, e2, a.member_id, 8) == {
            keep_p: ErrorCode.UNSUPPORTED_VERSION
        }
        # B, at its own epoch, commits the moved partition.
        assert commit_errors(b.client, group, topic, {move_p: 20}, e2, b.member_id) == {
            move_p: ErrorCode.NONE
        }

        # OffsetFetch is strict: the current epoch reads, the previous one is stale.
        error, offsets = fetch(a.client, group, topic, [keep_p, move_p], a.member_id, e2)
        assert error == ErrorCode.NONE
        assert offsets == {keep_p: 10, move_p: 20}
        error, _ = fetch(a.client, group, topic, [keep_p], a.member_id, e1)
        assert error == ErrorCode.STALE_MEMBER_EPOCH
        error, _ = fetch(a.client, group, topic, [keep_p], "no-such-member", e2)
        assert error == ErrorCode.UNKNOWN_MEMBER_ID

        # B leaves: A gets B's partitions at E3, so they carry assignment epoch E3.
        b.leave()
        resp = a.ack()
        e3 = a.epoch
        assert resp.error_code == 0 and e3 > e2 and a.partitions() == {0, 1, 2, 3}
        # Client epoch E2 < assignment epoch E3 for a partition A only just got: rejected...
        assert commit_errors(a.client, group, topic, {move_p: 30}, e2, a.member_id) == {
            move_p: ErrorCode.STALE_MEMBER_EPOCH
        }
        # ... but E2 for a partition A has held since E1 is fine (E1 <= E2 <= E3).
        assert commit_errors(a.client, group, topic, {keep_p: 31}, e2, a.member_id) == {
            keep_p: ErrorCode.NONE
        }
        assert commit_errors(a.client, group, topic, {move_p: 32}, e3, a.member_id) == {
            move_p: ErrorCode.NONE
        }
        error, offsets = fetch(a.client, group, topic, [keep_p, move_p], a.member_id, e3)
        assert (error, offsets) == (ErrorCode.NONE, {keep_p: 31, move_p: 32})
    finally:
        a.close()
        b.close()


# -- b. error paths --------------------------------------------------------------------------


def test_heartbeat_request_validation_errors(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "val", 2)
    with RawClient(server.bootstrap) as c:
        # v1: the client must name itself.
        resp = cg_heartbeat(
            c, "g-val", "", 0, topics=["val"], owned={}, rebalance_timeout_ms=10_000
        )
        assert (resp.error_code, resp.error_message) == (
            ErrorCode.INVALID_REQUEST,
            "MemberId can't be empty.",
        )
        # Joining needs a rebalance timeout, no owned partitions, and a subscription.
        resp = cg_heartbeat(c, "g-val", "m1", 0, topics=["val"], owned={})
        assert resp.error_code == ErrorCode.INVALID_REQUEST
        assert resp.error_message == "RebalanceTimeoutMs must be provided in first request."
        resp = cg_heartbeat(c, "g-val", "m1", 0, topics=["val"], rebalance_timeout_ms=10_000)
        assert resp.error_code == ErrorCode.INVALID_REQUEST
        assert resp.error_message == "TopicPartitions must be empty when (re-)joining."
        resp = cg_heartbeat(c, "g-val", "m1", 0, owned={}, rebalance_timeout_ms=10_000)
        assert resp.error_code == ErrorCode.INVALID_REQUEST
        assert resp.error_message == (
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
            "(re-)joining."
        )
        # A member epoch for a group that does not exist.
        resp = cg_heartbeat(c, "g-missing", "m1", 5, owned={})
        assert resp.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        # An assignor the server does not have.
        resp = cg_heartbeat(
            c,
            "g-val",
            "m1",
            0,
            topics=["val"],
            owned={},
            rebalance_timeout_ms=10_000,
            assignor="bar",
        )
        assert resp.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
        assert resp.error_message.startswith("ServerAssignor bar is not supported.")
        # A regular expression that does not compile.
        resp = cg_heartbeat(c, "g-val", "m1", 0, regex="[", owned={}, rebalance_timeout_ms=10_000)
        assert (resp.error_code, resp.error_message) == (
            ErrorCode.INVALID_REGULAR_EXPRESSION,
            "SubscribedTopicRegex `[` is not a valid regular expression: missing closing ].",
        )
        # None of these created the group.
        assert describe(c, "g-val").error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_member_epochs_generated_ids_and_leaving(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "ep", 2)
    group = "g-ep"
    with RawClient(server.bootstrap) as c:
        # v0: an empty member id at epoch 0 gets one from the coordinator.
        resp = cg_heartbeat(
            c, group, "", 0, version=0, topics=["ep"], owned={}, rebalance_timeout_ms=10_000
        )
        assert resp.error_code == 0, resp
        member_id, epoch = resp.member_id, resp.member_epoch
        assert member_id and epoch > 0
        assert sorted(p for tp in resp.assignment.topic_partitions for p in tp.partitions) == [0, 1]
        owned = {tp.topic_id: set(tp.partitions) for tp in resp.assignment.topic_partitions}
        # The generated id is the member's from then on (v0 and v1 alike).
        resp = cg_heartbeat(c, group, member_id, epoch, version=0, owned=owned)
        assert (resp.error_code, resp.member_epoch) == (0, epoch)
        # An epoch ahead of the coordinator's is fenced ...
        resp = cg_heartbeat(c, group, member_id, epoch + 1, owned=owned)
        assert resp.error_code == ErrorCode.FENCED_MEMBER_EPOCH
        # ... as is an older one that is not the previous epoch.
        resp = cg_heartbeat(c, group, member_id, epoch - 1, owned=owned)
        assert resp.error_code == ErrorCode.FENCED_MEMBER_EPOCH
        # A fenced request changed nothing: the member carries on at its epoch.
        resp = cg_heartbeat(c, group, member_id, epoch, owned=owned)
        assert (resp.error_code, resp.member_epoch) == (0, epoch)
        # An unknown member id at a non-zero epoch.
        resp = cg_heartbeat(c, group, "stranger", epoch, owned={})
        assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # v0 leave and v1 leave need the id; leaving, then heartbeating, is unknown.
        resp = cg_heartbeat(c, group, member_id, -1)
        assert (resp.error_code, resp.member_id, resp.member_epoch) == (0, member_id, -1)
        resp = cg_heartbeat(c, group, member_id, epoch, owned=owned)
        assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        resp = cg_heartbeat(c, group, member_id, -1)
        assert resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        described = describe(c, group)
        assert described.error_code == 0
        assert described.group_state == "Empty" and described.members == ()
        assert described.group_epoch > epoch


def test_regex_subscription_gets_matching_topics(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "rx-a", 2)
    create_topic(server.bootstrap, "rx-b", 1)
    create_topic(server.bootstrap, "other-rx-a", 3)  # contains a match: a full match is needed
    group = "g-rx"
    m = RawMember(server.bootstrap, group, regex="rx-.*")
    try:
        m.join()
        # Kafka resolves regexes in the background: allow a few heartbeats for it.
        m.ack_until(lambda: m.count() == 3, "the matching topics' partitions")
        first_epoch = m.epoch
        with RawClient(server.bootstrap) as c:
            d = describe(c, group)
            assert d.members[0].subscribed_topic_regex == "rx-.*"
            assert d.members[0].subscribed_topic_names == ()
            assert holdings(d) == {m.member_id: {("rx-a", 0), ("rx-a", 1), ("rx-b", 0)}}
            # A matching topic created later is picked up at a later heartbeat.
            create_topic(server.bootstrap, "rx-c", 2)
            create_topic(server.bootstrap, "no-rx-d", 2)
            m.ack_until(lambda: m.count() == 5, "the new matching topic's partitions")
            assert m.epoch > first_epoch
            d = describe(c, group)
            assert holdings(d)[m.member_id] == {
                ("rx-a", 0),
                ("rx-a", 1),
                ("rx-b", 0),
                ("rx-c", 0),
                ("rx-c", 1),
            }
            assert d.group_state == "Stable"
    finally:
        m.close()


def test_classic_join_to_a_consumer_group_does_not_corrupt_it(server: ServerProcess) -> None:
    """Kafka answers a classic JoinGroup for a consumer group's id inside that group (online
    migration: the classic member joins the consumer group) or with
    INCONSISTENT_GROUP_PROTOCOL; either way there is only ever one group of an id."""
    topic, group = "mixed", "g-mixed"
    create_topic(server.bootstrap, topic, 2)
    m = RawMember(server.bootstrap, group, [topic])
    try:
        m.join()
        m.ack()
        epoch = m.epoch
        with RawClient(server.bootstrap) as c:
            # Whatever the coordinator answers a classic JoinGroup (and its retry with the
            # member id it may hand out) for this id ...
            resp = join(c, group, version=9, session_timeout_ms=6000, rebalance_timeout_ms=3000)
            if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                join(
                    c,
                    group,
                    member_id=resp.member_id,
                    version=9,
                    session_timeout_ms=6000,
                    rebalance_timeout_ms=3000,
                )
            # ... the consumer member carries on ...
            resp = m.ack()
            assert resp.error_code == 0 and m.epoch >= epoch
            d = describe(c, group)
            assert d.error_code == 0
            assert m.member_id in {x.member_id for x in d.members}
            assert commit_errors(c, group, topic, {0: 7}, m.epoch, m.member_id) == {
                0: ErrorCode.NONE
            }
            listed_before = [g for g in list_groups(c) if g[0] == group]
        # ... also once the log is replayed ...
        server.restart()
        m.reconnect(server.bootstrap)
        with RawClient(server.bootstrap) as c:
            resp = until_loaded(lambda: m.beat(None))
            assert resp.error_code == 0 and m.epoch >= epoch
            assert describe(c, group).error_code == 0
            error, offsets = fetch(c, group, topic, [0], m.member_id, m.epoch)
            assert (error, offsets) == (ErrorCode.NONE, {0: 7})
            listed_after = [g for g in list_groups(c) if g[0] == group]
        # ... and the consumer group is the only group of that id.
        assert [(g, t) for g, t, _ in listed_before] == [(group, "consumer")], listed_before
        assert [(g, t) for g, t, _ in listed_after] == [(group, "consumer")], listed_after
    finally:
        m.close()


# -- c. SIGKILL while a member is revoking -----------------------------------------------------


def test_sigkill_during_reconciliation_keeps_epochs_and_disjoint_ownership(
    server: ServerProcess,
) -> None:
    topic, group = "crash", "g-crash"
    create_topic(server.bootstrap, topic, 4)
    a = RawMember(server.bootstrap, group, [topic])
    b = RawMember(server.bootstrap, group, [topic])
    a.join()
    (topic_id,) = a.assigned
    a.ack()
    e1 = a.epoch
    b.join()
    e2 = b.epoch
    resp = a.beat(owned_of(topic_id, {0, 1, 2, 3}))
    assert resp.member_epoch == e1
    kept = a.partitions()
    released = {0, 1, 2, 3} - kept
    assert len(kept) == 2
    # A is UNREVOKED_PARTITIONS: it still holds (assigned + pending revocation) everything.
    with RawClient(server.bootstrap) as c:
        d = describe(c, group)
        assert holdings(d) == {
            a.member_id: {(topic, p) for p in range(4)},
            b.member_id: set(),
        }
        assert d.group_state == "Reconciling"
    a.close()
    b.close()

    server.restart()  # SIGKILL + start on the same data dir

    a.client = RawClient(server.bootstrap)
    b.client = RawClient(server.bootstrap)
    try:
        # Both carry on at their epochs: nobody is fenced by the coordinator's crash.
        resp = until_loaded(lambda: b.beat({}))
        assert (resp.error_code, resp.member_epoch) == (0, e2), resp
        assert b.partitions() == set()  # still not released
        resp = a.beat(owned_of(topic_id, {0, 1, 2, 3}))
        assert (resp.error_code, resp.member_epoch) == (0, e1), resp
        with RawClient(server.bootstrap) as c:
            d = describe(c, group)
            held = holdings(d)
            assert held[a.member_id] == {(topic, p) for p in range(4)}
            assert held[b.member_id] == set()
            assert {x.member_id: x.member_epoch for x in d.members} == {
                a.member_id: e1,
                b.member_id: e2,
            }
            # The target survived too.
            targets = {
                x.member_id: {
                    p for tp in x.target_assignment.topic_partitions for p in tp.partitions
                }
                for x in d.members
            }
            assert targets == {a.member_id: kept, b.member_id: released}

        # A acknowledges the revocation; B then gets the released partitions.
        resp = a.beat(owned_of(topic_id, kept))
        assert (resp.error_code, resp.member_epoch) == (0, e2)
        resp = b.beat({})
        assert (resp.error_code, resp.member_epoch) == (0, e2)
        assert b.partitions() == released
        b.ack()
        with RawClient(server.bootstrap) as c:
            d = describe(c, group)
            held = holdings(d)
            assert held == {
                a.member_id: {(topic, p) for p in kept},
                b.member_id: {(topic, p) for p in released},
            }
            assert d.group_state == "Stable"
            assert d.group_epoch == d.assignment_epoch == e2
    finally:
        a.close()
        b.close()


# -- d. topic changes ------------------------------------------------------------------------


def test_partition_increase_bumps_the_epoch_and_assigns_new_partitions(
    server: ServerProcess,
) -> None:
    topic, group = "grow", "g-grow"
    create_topic(server.bootstrap, topic, 2)
    a = RawMember(server.bootstrap, group, [topic])
    b = RawMember(server.bootstrap, group, [topic])
    try:
        a.join()
        b.join()
        a.ack()
        b.ack()
        a.ack()
        b.ack()
        with RawClient(server.bootstrap) as c:
            before = describe(c, group)
        assert before.group_state == "Stable"
        assert a.partitions() | b.partitions() == {0, 1}
        had_a, had_b = a.partitions(), b.partitions()

        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(10)

        # The next heartbeat sees the new metadata: one epoch bump, a new target.
        resp = a.ack()
        assert resp.error_code == 0
        with RawClient(server.bootstrap) as c:
            after = describe(c, group)
        assert after.group_epoch == before.group_epoch + 1
        assert after.assignment_epoch == after.group_epoch
        # The new partitions are free: each member gets its share at once, at the new
        # epoch, keeping what it had (uniform is sticky).
        assert a.epoch == after.group_epoch and len(a.partitions()) == 2
        assert b.ack().error_code == 0
        assert b.epoch == after.group_epoch and len(b.partitions()) == 2
        assert had_a <= a.partitions() and had_b <= b.partitions()
        assert a.partitions() | b.partitions() == {0, 1, 2, 3}
        assert not a.partitions() & b.partitions()
        assert len(a.partitions()) == len(b.partitions()) == 2
        with RawClient(server.bootstrap) as c:
            final = describe(c, group)
        assert final.group_state == "Stable"
        assert final.group_epoch == after.group_epoch
        held = holdings(final)
        assert held[a.member_id] | held[b.member_id] == {(topic, p) for p in range(4)}
    finally:
        a.close()
        b.close()

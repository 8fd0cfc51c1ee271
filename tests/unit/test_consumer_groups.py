"""Consumer groups (KIP-848) on a pure GroupShard: scenarios S1-S7, S10-S47 and S49-S51 of
shared/reference/scenarios.md, one test each (named after it), plus replay checks. S8 and S9
(coordinator not started, storage errors) belong to the server; S48 (topic ACLs) has no
counterpart here; S52-S63 are reconcile.py's (test_reconcile.py).

The harness (consumer_support.py) plays the runtime: it replays each Result's records into
the shard, keeps every record in `log`, and captures the reply. Time moves only through
`sleep`; the clock starts at START_MS. Unless a test says otherwise the assignment interval
is 0 (every bump computes its target at once) and the reconciling heartbeat interval is off,
so responses carry the plain 5000 ms interval as Kafka's do.

Epochs. Scenarios that start "at epoch 10" are built with real heartbeats here, so their
epochs are smaller (a new group is at 1, the first join makes it 2); such tests assert the
relative behaviour (E, E+1) and say so. Layouts that Kafka's tests get from a mock assignor
come from a ScriptedAssignor installed as "range".

Where we differ from Kafka on purpose (manager.py's module docstring): regular expressions
are resolved inside the heartbeat (S10, S22, S47: the epoch moves in the same heartbeat,
not after a background resolution), and a target held back by the assignment interval is
computed by the `assignment-<group>` timer when the interval ends (S46).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from groupcoord.coordinator.groups.assignors import uniform
from groupcoord.coordinator.groups.consumer.group import ConsumerGroupState
from groupcoord.coordinator.groups.consumer.keys import (
    assignment_key,
    rebalance_timeout_key,
    session_timeout_key,
)
from groupcoord.coordinator.groups.consumer.member import MemberState
from groupcoord.coordinator.groups.result import Record, Result
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicPartitions,
    TopicPartitionsWithEpochs,
)
from tests.unit.consumer_support import (
    GROUP,
    START_MS,
    Client,
    Harness,
    ScriptedAssignor,
    assignment,
    settle,
)

TOPICS = {"foo": 6, "bar": 3}
SESSION = 45_000
INTERVAL = 5_000

KINDS = {
    ConsumerGroupMemberMetadataKey: "member",
    ConsumerGroupMetadataKey: "group",
    ConsumerGroupTargetAssignmentMemberKey: "target",
    ConsumerGroupTargetAssignmentMetadataKey: "target-meta",
    ConsumerGroupCurrentMemberAssignmentKey: "current",
    ConsumerGroupRegularExpressionKey: "regex",
    ConsumerGroupPartitionMetadataKey: "partition-metadata",
}


def harness(topics: dict[str, int] | None = None, **config: Any) -> Harness:
    config.setdefault("consumer_assignment_interval_ms", 0)
    return Harness(dict(TOPICS) if topics is None else topics, **config)


def summary(records: list[Record]) -> list[tuple[str, str | None, bool]]:
    """(kind, member id or regex, is tombstone) per record."""
    out = []
    for key, value in records:
        kind = KINDS[type(key)]
        name = getattr(key, "member_id", None) or getattr(key, "regular_expression", None)
        out.append((kind, name, value is None))
    return out


def values(records: list[Record], key_type: type) -> list[Any]:
    return [value for key, value in records if isinstance(key, key_type)]


def parts(h: Harness, **topics: list[int]) -> dict[uuid.UUID, list[int]]:
    """{topic id: partitions} as `assignment()` gives a response's assignment."""
    return {h.topic_id(name): sorted(ps) for name, ps in topics.items() if ps}


def owned(h: Harness, **topics: list[int]) -> list[tuple[uuid.UUID, list[int]]]:
    """A heartbeat's TopicPartitions."""
    return [(h.topic_id(name), ps) for name, ps in topics.items()]


def error(response: Any) -> tuple[ErrorCode, str | None]:
    return response.error_code, response.error_message


def ok(response: Any) -> Any:
    assert response.error_code is ErrorCode.NONE, response
    return response


def current_of(h: Harness, member_id: str) -> Any:
    member = h.group().member(member_id)
    assert member is not None
    return member


def assert_nothing_written(h: Harness, before: int) -> None:
    assert len(h.log) == before
    assert h.last.records == []


# =============================================================================================
# 1. Request validation
# =============================================================================================


def test_s1_empty_member_id_in_v1() -> None:
    """S1: v1 requires a client-generated member id; nothing is written, no group made."""
    h = harness()
    for member_id in ("", "   "):
        response = h.join(member_id, ["foo"])
        assert error(response) == (ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        # Kafka's error responses are a fresh ResponseData: MemberId null, MemberEpoch 0.
        assert response.member_id is None and response.member_epoch == 0
        assert response.assignment is None
    # v0 at epoch 0 may leave it empty (S12), but not when leaving or heartbeating.
    for epoch in (1, -1):
        response = h.heartbeat(member_id="", member_epoch=epoch, api_version=0)
        assert error(response) == (ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    assert h.log == [] and h.shard.consumer_group(GROUP) is None


def test_s2_empty_or_blank_group_id() -> None:
    """S2."""
    h = harness()
    for group_id in ("", "   "):
        response = h.join("m", ["foo"], group_id=group_id)
        assert error(response) == (ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    assert h.log == []


def test_s3_first_heartbeat_without_rebalance_timeout() -> None:
    """S3."""
    h = harness()
    response = h.join("m", ["foo"], rebalance_timeout_ms=-1)
    assert error(response) == (
        ErrorCode.INVALID_REQUEST,
        "RebalanceTimeoutMs must be provided in first request.",
    )
    assert h.log == []


def test_s4_first_heartbeat_with_owned_partitions() -> None:
    """S4: TopicPartitions null or non-empty at epoch 0."""
    h = harness()
    for topic_partitions in (None, owned(h, foo=[0])):
        response = h.join("m", ["foo"], topic_partitions=topic_partitions)
        assert error(response) == (
            ErrorCode.INVALID_REQUEST,
            "TopicPartitions must be empty when (re-)joining.",
        )
    assert h.log == []


def test_s5_first_heartbeat_without_subscription() -> None:
    """S5. An empty list or an empty regex is a subscription to nothing and is accepted. It
    changes no subscription, so by B.4.6's rule (names, a resolved regex, the assignor or
    the hash) nothing bumps: the members sit at the new group's epoch 1."""
    h = harness()
    response = h.join("m", None)
    assert error(response) == (
        ErrorCode.INVALID_REQUEST,
        "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
    )
    assert h.log == []
    assert ok(h.join("m1", [])).member_epoch == 1
    assert ok(h.join("m2", None, subscribed_topic_regex="")).member_epoch == 1
    assert h.group().group_epoch == 1 and h.group().resolved_regexes == {}


def test_s6_empty_instance_id_or_rack_id() -> None:
    """S6, and the other epoch rules of B.3: -2 needs an InstanceId, < -2 is invalid."""
    h = harness()
    response = h.heartbeat(member_id="m", member_epoch=1, instance_id="")
    assert error(response) == (ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
    response = h.heartbeat(member_id="m", member_epoch=1, rack_id=" ")
    assert error(response) == (ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
    response = h.heartbeat(member_id="m", member_epoch=-2)
    assert error(response) == (ErrorCode.INVALID_REQUEST, "InstanceId can't be null.")
    response = h.heartbeat(member_id="m", member_epoch=-3)
    assert error(response) == (ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")
    assert h.log == []


def test_s7_unknown_server_assignor() -> None:
    """S7: validated before the group is looked up."""
    h = harness(consumer_assignors=("range",))
    response = h.heartbeat(member_id="m", member_epoch=1, server_assignor="bar")
    assert error(response) == (
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor bar is not supported. Supported assignors: range.",
    )
    h2 = harness()
    response = h2.join("m", ["foo"], server_assignor="bar")
    assert error(response) == (
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor bar is not supported. Supported assignors: uniform, range.",
    )
    assert h.log == [] and h2.log == []


def test_s10_invalid_regex() -> None:
    """S10, as Kafka: the regex join answers MemberEpoch 1 with nothing assigned (a new regex
    waits for its resolution, a shard event of its own after the heartbeat, and does not
    bump); the resolution writes the regex and bumps to 2, and the next heartbeat gets the
    matched topics; the switch to names bumps to 3. The invalid regex is rejected
    identically, on join and on change, with nothing written."""
    h = harness()
    response = h.heartbeat(
        member_id="m",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_regex="[",
        topic_partitions=[],
    )
    message = "SubscribedTopicRegex `[` is not a valid regular expression: missing closing ]."
    assert error(response) == (ErrorCode.INVALID_REGULAR_EXPRESSION, message)
    assert h.log == []

    response = ok(
        h.heartbeat(
            member_id="m",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_regex=".*",
            topic_partitions=[],
        )
    )
    assert response.member_epoch == 1
    assert assignment(response) == {}
    assert values(h.last.records, ConsumerGroupRegularExpressionKey) == []

    fired = h.sleep(0)
    assert summary(fired.records) == [("regex", ".*", False), ("group", None, False)]
    assert values(fired.records, ConsumerGroupRegularExpressionKey) == [
        ConsumerGroupRegularExpressionValue(("bar", "foo"), h.topics.version, START_MS)
    ]
    assert h.group().group_epoch == 2
    response = ok(h.heartbeat(member_id="m", member_epoch=1))
    assert response.member_epoch == 2
    assert assignment(response) == parts(h, foo=list(range(6)), bar=[0, 1, 2])

    before = len(h.log)
    response = h.heartbeat(member_id="m", member_epoch=2, subscribed_topic_regex="[")
    assert error(response) == (ErrorCode.INVALID_REGULAR_EXPRESSION, message)
    assert_nothing_written(h, before)

    response = ok(h.heartbeat(member_id="m", member_epoch=2, subscribed_topic_names=["foo"]))
    assert response.member_epoch == 3
    h.assert_replayed()


def test_s48_regex_resolution_keeps_only_topics_the_member_may_describe() -> None:
    """S48: with an authorizer the heartbeat carries the member's DESCRIBE check
    (topic_visible); the regex resolution it schedules keeps only the topics that pass, with
    no error; a later heartbeat's check applies to the next resolution."""
    h = harness()
    response = ok(
        h.heartbeat(
            member_id="m",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_regex=".*",
            topic_partitions=[],
            topic_visible=lambda name: name != "foo",
        )
    )
    assert response.member_epoch == 1
    fired = h.sleep(0)
    assert values(fired.records, ConsumerGroupRegularExpressionKey) == [
        ConsumerGroupRegularExpressionValue(("bar",), h.topics.version, START_MS)
    ]
    response = ok(h.heartbeat(member_id="m", member_epoch=1))
    assert assignment(response) == parts(h, bar=[0, 1, 2])
    h.assert_replayed()


def test_regex_is_not_resolved_without_a_members_check_when_an_authorizer_is_on() -> None:
    """With an authorizer (regex_needs_member_check) a resolution that has no member's
    DESCRIBE check (as after a restart) writes nothing; the next heartbeat with one
    resolves, filtered."""
    h = harness(regex_needs_member_check=True)
    ok(
        h.heartbeat(
            member_id="m",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_regex=".*",
            topic_partitions=[],
        )
    )
    assert values(h.sleep(0).records, ConsumerGroupRegularExpressionKey) == []
    ok(
        h.heartbeat(
            member_id="m",
            member_epoch=1,
            topic_visible=lambda name: name == "foo",
            subscribed_topic_regex=".*",
        )
    )
    assert values(h.sleep(0).records, ConsumerGroupRegularExpressionKey) == [
        ConsumerGroupRegularExpressionValue(("foo",), h.topics.version, START_MS)
    ]
    h.assert_replayed()


# =============================================================================================
# 2. Membership and epochs
# =============================================================================================


def test_s11_first_member_joins_empty_group() -> None:
    """S11: records in Kafka's order; every assignment epoch is the member epoch (2)."""
    h = harness()
    response = ok(
        h.heartbeat(
            member_id="m",
            member_epoch=0,
            server_assignor="range",
            rebalance_timeout_ms=5000,
            subscribed_topic_names=["foo", "bar"],
            topic_partitions=[],
        )
    )
    assert response.member_id == "m"
    assert response.member_epoch == 2
    assert response.heartbeat_interval_ms == INTERVAL
    foo, bar = h.topic_id("foo"), h.topic_id("bar")
    expected = sorted([(foo, [0, 1, 2, 3, 4, 5]), (bar, [0, 1, 2])], key=lambda t: t[0].int)
    assert response.assignment == expected
    assert summary(h.log) == [
        ("member", "m", False),
        ("group", None, False),
        ("target", "m", False),
        ("target-meta", None, False),
        ("current", "m", False),
    ]
    meta = h.log[0][1]
    assert meta == ConsumerGroupMemberMetadataValue(
        instance_id=None,
        rack_id=None,
        client_id="client",
        client_host="/127.0.0.1",
        subscribed_topic_names=("bar", "foo"),
        subscribed_topic_regex=None,
        rebalance_timeout_ms=5000,
        server_assignor="range",
    )
    group_meta = h.log[1][1]
    assert group_meta.epoch == 2 and group_meta.metadata_hash != 0
    assert h.log[2][1] == ConsumerGroupTargetAssignmentMemberValue(
        tuple(TopicPartitions(t, tuple(ps)) for t, ps in expected)
    )
    assert h.log[3][1] == ConsumerGroupTargetAssignmentMetadataValue(2, START_MS)
    assert h.log[4][1] == ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=2,
        previous_member_epoch=0,
        state=MemberState.STABLE,
        assigned_partitions=tuple(
            TopicPartitionsWithEpochs(t, tuple(ps), (2,) * len(ps)) for t, ps in expected
        ),
        partitions_pending_revocation=(),
    )
    assert h.group().state() is ConsumerGroupState.STABLE
    assert h.timer.deadline(session_timeout_key(GROUP, "m")) == START_MS + SESSION
    h.assert_replayed()


def test_s12_v0_server_generated_member_id() -> None:
    """S12: no topics exist; the member still moves to epoch 2 (its subscription changed)."""
    h = harness(topics={})
    response = ok(
        h.heartbeat(
            member_id="",
            member_epoch=0,
            api_version=0,
            server_assignor="range",
            rebalance_timeout_ms=5000,
            subscribed_topic_names=["foo", "bar"],
            topic_partitions=[],
        )
    )
    assert response.member_id  # generated by the coordinator
    assert response.member_epoch == 2
    assert response.heartbeat_interval_ms == INTERVAL
    assert response.assignment == []
    assert response.member_id in h.group().metadata
    assert h.group().metadata_hash == 0  # none of the subscribed topics exists
    h.assert_replayed()


def test_s13_unknown_group_with_nonzero_epoch() -> None:
    """S13, also for a leave."""
    h = harness()
    response = h.heartbeat(member_id="m", member_epoch=100, rebalance_timeout_ms=5000)
    assert error(response) == (ErrorCode.GROUP_ID_NOT_FOUND, "Consumer group fooup not found.")
    assert h.heartbeat(member_id="m", member_epoch=-1).error_code is ErrorCode.GROUP_ID_NOT_FOUND
    assert h.log == [] and h.shard.consumer_group(GROUP) is None


def test_s14_unknown_member_with_nonzero_epoch() -> None:
    """S14, also for a leave."""
    h = harness()
    ok(h.join("m1", ["foo"]))
    before = len(h.log)
    for epoch in (1, -1):
        response = h.heartbeat(member_id="m2", member_epoch=epoch)
        assert error(response) == (
            ErrorCode.UNKNOWN_MEMBER_ID,
            "Member m2 is not a member of group fooup.",
        )
    assert_nothing_written(h, before)


def _member_with_previous_epoch(h: Harness, instance_id: str | None = None) -> Client:
    """m at epoch E=3 (previous 2), owning foo[0,1,2]: it joins (2), then a member of another
    topic joins, and m moves to 3 without a change of its own partitions."""
    m = Client(h, "m", instance_id)
    ok(m.join(["foo"]))
    ok(Client(h, "other").join(["bar"]))
    assert ok(m.ack()).member_epoch == 3
    member = current_of(h, "m")
    assert (member.member_epoch, member.previous_member_epoch) == (3, 2)
    return m


def test_s15_member_epoch_fencing_and_lost_response_tolerance() -> None:
    """S15 with E=3 (Kafka's 100), previous 2 (Kafka's 99), and foo(3); dynamic and static."""
    for instance_id in (None, "m"):
        h = harness(topics={"foo": 3, "bar": 1})
        _member_with_previous_epoch(h, instance_id)
        before = len(h.log)
        fields: dict[str, Any] = {"member_id": "m", "instance_id": instance_id}
        for epoch in (4, 1):
            response = h.heartbeat(member_epoch=epoch, **fields)
            assert response.error_code is ErrorCode.FENCED_MEMBER_EPOCH
            assert response.error_message and "member epoch" in response.error_message
        response = h.heartbeat(member_epoch=2, **fields)  # previous epoch, owned unknown
        assert response.error_code is ErrorCode.FENCED_MEMBER_EPOCH
        # Previous epoch with a partition it does not hold, or a topic it is not assigned
        # (even without partitions, as Kafka's isSubset): fenced.
        for topic_partitions in (owned(h, foo=[1, 5]), owned(h, foo=[1], bar=[])):
            response = h.heartbeat(member_epoch=2, topic_partitions=topic_partitions, **fields)
            assert response.error_code is ErrorCode.FENCED_MEMBER_EPOCH
        assert_nothing_written(h, before)
        response = ok(h.heartbeat(member_epoch=2, topic_partitions=owned(h, foo=[1, 2]), **fields))
        assert response.member_epoch == 3
        h.assert_replayed()


def test_s16_rejoin_with_epoch_zero_while_stable() -> None:
    """S16 (E=2): the member gets its epoch and assignment back; nothing is written."""
    h = harness(topics={"foo": 3})
    m = Client(h, "m")
    ok(m.join(["foo"]))
    before = len(h.log)
    response = ok(m.join(["foo"]))
    assert response.member_epoch == 2
    assert assignment(response) == parts(h, foo=[0, 1, 2])
    assert_nothing_written(h, before)
    assert h.group().group_epoch == 2


def _unrevoked(h: Harness) -> tuple[Client, Client]:
    """m1 UNREVOKED at E=2 (assigned foo[0,1], revoking foo[2]), group and target at 3
    (range: m1 foo[0,1], m2 foo[2])."""
    m1, m2 = Client(h, "m1"), Client(h, "m2")
    ok(m1.join(["foo"], server_assignor="range"))
    ok(m2.join(["foo"], server_assignor="range"))
    response = ok(m1.poll())
    assert (response.member_epoch, assignment(response)) == (2, parts(h, foo=[0, 1]))
    member = current_of(h, "m1")
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert member.partitions_pending_revocation == {h.topic_id("foo"): {2: 2}}
    return m1, m2


def test_s17_rejoin_with_epoch_zero_while_unrevoked() -> None:
    """S17 (E=2, target 3): an empty owned list counts as revoked."""
    h = harness(topics={"foo": 3})
    _unrevoked(h)
    response = ok(h.join("m1", ["foo"]))
    assert response.member_epoch == 3
    assert assignment(response) == parts(h, foo=[0, 1])
    assert current_of(h, "m1").state is MemberState.STABLE
    h.assert_replayed()


def _unreleased(h: Harness) -> tuple[Client, Client]:
    """m1 UNRELEASED at E=4 owning foo[0,1] with target foo[0,1,2], and foo[2] still held
    (revoking) by m2, which moved its subscription to bar. Range assignor, foo(3), bar(1)."""
    m1, m2 = Client(h, "m1"), Client(h, "m2")
    ok(m1.join(["foo"], server_assignor="range"))
    ok(m2.join(["foo"], server_assignor="range"))
    settle(h, m1, m2)
    assert m1.owned_dict() == parts(h, foo=[0, 1]) and m2.owned_dict() == parts(h, foo=[2])
    # m2 switches to bar, still owning foo[2]: it must revoke it first.
    response = ok(m2.ack(subscribed_topic_names=["bar"]))
    assert response.member_epoch == 3
    assert current_of(h, "m2").state is MemberState.UNREVOKED_PARTITIONS
    response = ok(m1.ack())
    assert response.member_epoch == 4 and response.assignment is None
    assert current_of(h, "m1").state is MemberState.UNRELEASED_PARTITIONS
    assert h.group().target["m1"] == {h.topic_id("foo"): frozenset({0, 1, 2})}
    return m1, m2


def test_s18_rejoin_with_epoch_zero_while_unreleased() -> None:
    """S18 (E=4): once the awaited partition is free, the rejoin gets it at the same epoch."""
    h = harness(topics={"foo": 3, "bar": 1})
    m1, m2 = _unreleased(h)
    m2.owned = []
    response = ok(m2.ack())  # releases foo[2], takes bar[0]
    assert (response.member_epoch, assignment(response)) == (4, parts(h, bar=[0]))
    response = ok(h.join("m1", ["foo"]))
    assert response.member_epoch == 4
    assert assignment(response) == parts(h, foo=[0, 1, 2])
    assert current_of(h, "m1").state is MemberState.STABLE
    h.assert_replayed()


def test_s19_duplicate_full_heartbeat_while_stable() -> None:
    """S19 (E=2): both answers carry the assignment; neither writes."""
    h = harness(topics={"foo": 3})
    m = Client(h, "m")
    ok(m.join(["foo"]))
    before = len(h.log)
    for _ in range(2):
        response = ok(
            h.heartbeat(
                member_id="m",
                member_epoch=2,
                rebalance_timeout_ms=5000,
                subscribed_topic_names=["foo"],
                topic_partitions=owned(h, foo=[0, 1, 2]),
            )
        )
        assert response.member_epoch == 2
        assert response.heartbeat_interval_ms == INTERVAL
        assert assignment(response) == parts(h, foo=[0, 1, 2])
        assert_nothing_written(h, before)


def test_s20_duplicate_full_heartbeat_while_unrevoked() -> None:
    """S20 (E=2, target 3): the member still reports foo[2]; it stays UNREVOKED."""
    h = harness(topics={"foo": 3})
    m1, m2 = Client(h, "m1"), Client(h, "m2")
    ok(m1.join(["foo"], server_assignor="range"))
    ok(m2.join(["foo"], server_assignor="range"))
    for i in range(2):
        before = len(h.log)
        response = ok(
            h.heartbeat(
                member_id="m1",
                member_epoch=2,
                rebalance_timeout_ms=5000,
                subscribed_topic_names=["foo"],
                topic_partitions=owned(h, foo=[0, 1, 2]),
            )
        )
        assert response.member_epoch == 2
        assert assignment(response) == parts(h, foo=[0, 1])
        assert current_of(h, "m1").state is MemberState.UNREVOKED_PARTITIONS
        if i == 0:
            assert summary(h.last.records) == [("current", "m1", False)]
        else:
            assert_nothing_written(h, before)


def test_s21_duplicate_full_heartbeat_while_unreleased() -> None:
    """S21 (E=4): m1 waits for foo[2], which m2 is still revoking. The first heartbeat
    writes m1's CurrentAssignment once (its previous epoch catches up with its epoch, as
    Kafka's updateMemberEpoch does); the duplicate writes nothing."""
    h = harness(topics={"foo": 3, "bar": 1})
    _unreleased(h)
    for i in range(2):
        before = len(h.log)
        response = ok(
            h.heartbeat(
                member_id="m1",
                member_epoch=4,
                rebalance_timeout_ms=5000,
                subscribed_topic_names=["foo"],
                topic_partitions=owned(h, foo=[0, 1]),
            )
        )
        assert response.member_epoch == 4
        assert assignment(response) == parts(h, foo=[0, 1])
        assert current_of(h, "m1").state is MemberState.UNRELEASED_PARTITIONS
        if i == 0:
            assert summary(h.last.records) == [("current", "m1", False)]
        else:
            assert_nothing_written(h, before)


def test_s22_when_the_assignment_field_is_present() -> None:
    """S22. The full heartbeat with a regex changes the subscription (names -> names and
    regex); the new regex is resolved after the heartbeat, so it moves no epoch yet: the
    Assignment is there anyway, because the request is full."""
    h = harness(topics={"foo": 2})
    response = ok(h.join("m", ["foo"]))
    assert (response.member_epoch, assignment(response)) == (2, parts(h, foo=[0, 1]))
    response = ok(h.heartbeat(member_id="m", member_epoch=2))
    assert response.assignment is None
    # Not full: TopicPartitions given but no subscription.
    response = ok(h.heartbeat(member_id="m", member_epoch=2, topic_partitions=owned(h, foo=[0, 1])))
    assert response.assignment is None
    full = {"rebalance_timeout_ms": 5000, "topic_partitions": owned(h, foo=[0, 1])}
    response = ok(
        h.heartbeat(member_id="m", member_epoch=2, subscribed_topic_names=["foo"], **full)
    )
    assert assignment(response) == parts(h, foo=[0, 1])
    response = ok(h.heartbeat(member_id="m", member_epoch=2, subscribed_topic_regex="fo+", **full))
    assert assignment(response) == parts(h, foo=[0, 1])
    assert response.member_epoch == 2
    h.assert_replayed()


def _three_member_start(h: Harness) -> tuple[ScriptedAssignor, Client, Client]:
    """S23's precondition with E=3 (Kafka's 10): m1 foo[0,1,2] bar[0,1], m2 foo[3,4,5] bar[2],
    both STABLE at 3, group and assignment epoch 3."""
    script = h.script("range")
    foo, bar = h.topic_id("foo"), h.topic_id("bar")
    m1, m2 = Client(h, "m1"), Client(h, "m2")
    script.layout = {"m1": {foo: list(range(6)), bar: [0, 1, 2]}}
    ok(m1.join(["foo", "bar"], server_assignor="range"))
    script.layout = {"m1": {foo: [0, 1, 2], bar: [0, 1]}, "m2": {foo: [3, 4, 5], bar: [2]}}
    ok(m2.join(["foo", "bar"], server_assignor="range"))
    settle(h, m1, m2)
    group = h.group()
    assert (group.group_epoch, group.assignment_epoch) == (3, 3)
    assert current_of(h, "m1").assigned_partitions == {
        foo: {0: 2, 1: 2, 2: 2},
        bar: {0: 2, 1: 2},
    }
    assert m2.owned_dict() == parts(h, foo=[3, 4, 5], bar=[2])
    return script, m1, m2


def test_s23_three_member_reconciliation() -> None:
    """S23 step by step with E=3, target 4 (Kafka's 10 and 11)."""
    h = harness()
    script, m1, m2 = _three_member_start(h)
    foo, bar = h.topic_id("foo"), h.topic_id("bar")
    script.layout = {
        "m1": {foo: [0, 1], bar: [0]},
        "m2": {foo: [2, 3], bar: [2]},
        "m3": {foo: [4, 5], bar: [1]},
    }
    m3 = Client(h, "m3")
    # 1. m3 joins: epoch 4, nothing free yet.
    response = ok(m3.join(["foo", "bar"], server_assignor="range"))
    assert (response.member_epoch, assignment(response)) == (4, {})
    assert current_of(h, "m3").state is MemberState.UNRELEASED_PARTITIONS
    assert h.group().state() is ConsumerGroupState.RECONCILING
    # 2. m1 (owned not reported) must revoke foo[2], bar[1].
    response = ok(m1.poll())
    assert (response.member_epoch, assignment(response)) == (3, parts(h, foo=[0, 1], bar=[0]))
    member = current_of(h, "m1")
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert member.partitions_pending_revocation == {foo: {2: 2}, bar: {1: 2}}
    # 3. m2 must revoke foo[4,5].
    response = ok(m2.poll())
    assert (response.member_epoch, assignment(response)) == (3, parts(h, foo=[3], bar=[2]))
    member = current_of(h, "m2")
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert member.partitions_pending_revocation == {foo: {4: 3, 5: 3}}
    # 4. m3: nothing new.
    response = ok(m3.poll())
    assert (response.member_epoch, response.assignment) == (4, None)
    # 5. m1 acknowledges: epoch 4, same partitions, so no Assignment.
    response = ok(m1.ack())
    assert (response.member_epoch, response.assignment) == (4, None)
    assert current_of(h, "m1").state is MemberState.STABLE
    # 6. m2 does not say what it owns: still revoking.
    response = ok(m2.poll())
    assert (response.member_epoch, response.assignment) == (3, None)
    assert current_of(h, "m2").state is MemberState.UNREVOKED_PARTITIONS
    # 7. m3 gets bar[1], freed by m1; foo[4,5] still held by m2.
    response = ok(m3.poll())
    assert (response.member_epoch, assignment(response)) == (4, parts(h, bar=[1]))
    assert current_of(h, "m3").state is MemberState.UNRELEASED_PARTITIONS
    response = ok(m3.poll())
    assert response.assignment is None
    # 8. m2 acknowledges and gets foo[2] (freed by m1).
    response = ok(m2.ack())
    assert (response.member_epoch, assignment(response)) == (4, parts(h, foo=[2, 3], bar=[2]))
    member = current_of(h, "m2")
    assert member.state is MemberState.STABLE
    assert member.assigned_partitions == {foo: {2: 4, 3: 3}, bar: {2: 3}}
    # 9. m3 gets foo[4,5].
    response = ok(m3.ack())
    assert (response.member_epoch, assignment(response)) == (
        4,
        parts(h, foo=[4, 5], bar=[1]),
    )
    assert current_of(h, "m3").state is MemberState.STABLE
    assert h.group().state() is ConsumerGroupState.STABLE
    h.assert_replayed()


def test_s24_new_member_triggers_new_target() -> None:
    """S24 (E=3): only members whose target changed get a TargetAssignmentMember record
    (m2 keeps its target here)."""
    h = harness()
    script, m1, m2 = _three_member_start(h)
    foo, bar = h.topic_id("foo"), h.topic_id("bar")
    script.layout = {
        "m1": {foo: [0, 1], bar: [0]},
        "m2": {foo: [3, 4, 5], bar: [2]},
        "m3": {foo: [2], bar: [1]},
    }
    response = ok(h.join("m3", ["foo", "bar"], server_assignor="range"))
    assert (response.member_epoch, assignment(response)) == (4, {})
    assert summary(h.last.records) == [
        ("member", "m3", False),
        ("group", None, False),
        ("target", "m1", False),
        ("target", "m3", False),
        ("target-meta", None, False),
        ("current", "m3", False),
    ]
    assert values(h.last.records, ConsumerGroupMetadataKey)[0].epoch == 4
    assert values(h.last.records, ConsumerGroupTargetAssignmentMetadataKey) == [
        ConsumerGroupTargetAssignmentMetadataValue(4, h.timer.now_ms)
    ]
    h.assert_replayed()


def test_s25_subscription_change_triggers_new_target() -> None:
    """S25 (E=2): foo -> foo, bar: metadata record, bump with a new hash, new target, and
    the member reconciles to 3 with bar's partitions (assignment epoch 3; foo keeps 2)."""
    h = harness()
    m = Client(h, "m")
    ok(m.join(["foo"]))
    old_hash = h.group().metadata_hash
    response = ok(m.ack(subscribed_topic_names=["foo", "bar"]))
    assert summary(h.last.records) == [
        ("member", "m", False),
        ("group", None, False),
        ("target", "m", False),
        ("target-meta", None, False),
        ("current", "m", False),
    ]
    group_meta = values(h.last.records, ConsumerGroupMetadataKey)[0]
    assert group_meta.epoch == 3 and group_meta.metadata_hash != old_hash
    assert response.member_epoch == 3
    assert assignment(response) == parts(h, foo=list(range(6)), bar=[0, 1, 2])
    member = current_of(h, "m")
    assert member.assigned_partitions[h.topic_id("bar")] == {0: 3, 1: 3, 2: 3}
    assert set(member.assigned_partitions[h.topic_id("foo")].values()) == {2}
    h.assert_replayed()


def _two_members(h: Harness, instance: bool = False) -> tuple[Client, Client]:
    """m1 (foo, bar) and m2 (foo, bar, zar) STABLE; with `instance`, static (instance id =
    member id)."""
    m1 = Client(h, "m1", "m1" if instance else None)
    m2 = Client(h, "m2", "m2" if instance else None)
    ok(m1.join(["foo", "bar"]))
    ok(m2.join(["foo", "bar", "zar"]))
    settle(h, m1, m2)
    return m1, m2


def test_s26_dynamic_member_leaves() -> None:
    """S26 (E=3 -> 4): three tombstones and a bump whose hash covers foo and bar only (the
    hash m1 had alone); no target is computed at leave time."""
    h = harness(topics={**TOPICS, "zar": 2})
    m1, m2 = _two_members(h)
    foo_bar_hash = values(h.log[:5], ConsumerGroupMetadataKey)[0].metadata_hash
    epoch = h.group().group_epoch
    response = ok(m2.leave())
    assert (response.member_id, response.member_epoch) == ("m2", -1)
    assert response.heartbeat_interval_ms == 0 and response.assignment is None
    assert summary(h.last.records) == [
        ("current", "m2", True),
        ("target", "m2", True),
        ("member", "m2", True),
        ("group", None, False),
    ]
    assert values(h.last.records, ConsumerGroupMetadataKey) == [
        ConsumerGroupMetadataValue(epoch + 1, foo_bar_hash)
    ]
    group = h.group()
    assert group.assignment_epoch == epoch and group.state() is ConsumerGroupState.ASSIGNING
    assert not h.timer.is_scheduled(session_timeout_key(GROUP, "m2"))
    # m1's next heartbeat computes the target.
    response = ok(m1.ack())
    assert response.member_epoch == epoch + 1
    assert assignment(response) == parts(h, foo=list(range(6)), bar=[0, 1, 2])
    h.assert_replayed()


def test_a_leave_tells_the_assignor_what_the_member_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leaver's target tombstone keeps what it held as a departed target (replayed
    from the records); the next target hands it to the assignor as a departed member's
    entry, so the freed partitions are known without scanning every partition; and any
    target that moves afterwards drops it (those partitions may be someone's now)."""
    h = harness(topics={"foo": 12})
    clients = [Client(h, f"m{i}") for i in range(1, 4)]
    for c in clients:
        ok(c.join(["foo"]))
    settle(h, *clients)
    m1, m2, m3 = clients
    held = h.group().target["m2"]
    ok(m2.leave())
    assert h.group().departed_targets == {"m2": held}

    def no_scan(*args: Any) -> Any:
        raise AssertionError("the freed partitions were looked for by a scan")

    monkeypatch.setattr(uniform, "_complement", no_scan)
    settle(h, m1, m3)
    target = h.group().target
    assert sorted(target) == ["m1", "m3"]
    foo = h.topic_id("foo")
    assert sorted(p for t in target.values() for p in t[foo]) == list(range(12))
    assert [len(t[foo]) for t in target.values()] == [6, 6]
    assert h.group().departed_targets == {}  # the new target moved: nothing departed now
    h.assert_replayed()


def test_s27_static_member_temporary_leave() -> None:
    """S27: one CurrentAssignment record at epoch -2, assignment epochs 0, no bump; the
    session timer keeps running."""
    h = harness(topics={**TOPICS, "zar": 2})
    m1, m2 = _two_members(h, instance=True)
    before = current_of(h, "m2")
    epoch = h.group().group_epoch
    response = ok(m2.leave(-2))
    assert (response.member_id, response.member_epoch) == ("m2", -2)
    assert response.assignment is None
    assert summary(h.last.records) == [("current", "m2", False)]
    value = h.last.records[0][1]
    assert value.member_epoch == -2
    assert value.previous_member_epoch == before.previous_member_epoch
    assert value.partitions_pending_revocation == ()
    assert value.assigned_partitions and all(
        set(tp.assignment_epochs) == {0} for tp in value.assigned_partitions
    )
    assert h.group().group_epoch == epoch
    assert h.timer.is_scheduled(session_timeout_key(GROUP, "m2"))
    # The group waits for the member: Reconciling (its epoch is not the assignment epoch).
    assert h.group().state() is ConsumerGroupState.RECONCILING
    h.assert_replayed()


def test_s28_static_member_leaves_permanently() -> None:
    """S28: as S26 with an instance id."""
    h = harness(topics={**TOPICS, "zar": 2})
    m1, m2 = _two_members(h, instance=True)
    epoch = h.group().group_epoch
    response = ok(m2.leave())
    assert (response.member_id, response.member_epoch) == ("m2", -1)
    assert summary(h.last.records) == [
        ("current", "m2", True),
        ("target", "m2", True),
        ("member", "m2", True),
        ("group", None, False),
    ]
    assert values(h.last.records, ConsumerGroupMetadataKey)[0].epoch == epoch + 1
    assert h.group().static_members == {"m1": "m1"}
    h.assert_replayed()


def test_s29_static_member_rejoins_and_gets_its_assignment_back() -> None:
    """S29 (E=3): the replacement inherits m2's assignment (assignment epochs 0) and target,
    at the group's epoch, without a bump; m2's timers are gone."""
    h = harness(topics={**TOPICS, "zar": 2})
    m1, m2 = _two_members(h, instance=True)
    m2_owned = m2.owned_dict()
    target = h.group().target["m2"]
    epoch = h.group().group_epoch
    ok(m2.leave(-2))
    new = Client(h, "m2new", "m2")
    response = ok(new.join(["foo", "bar", "zar"]))
    assert (response.member_id, response.member_epoch) == ("m2new", epoch)
    assert assignment(response) == m2_owned
    assert summary(h.last.records) == [
        ("current", "m2", True),
        ("target", "m2", True),
        ("member", "m2", True),
        ("member", "m2new", False),
        ("target", "m2new", False),
        ("current", "m2new", False),
        ("current", "m2new", False),
    ]
    first, second = values(h.last.records, ConsumerGroupCurrentMemberAssignmentKey)[1:]
    assert (first.member_epoch, first.previous_member_epoch) == (0, 0)
    assert (second.member_epoch, second.previous_member_epoch) == (epoch, 0)
    assert all(set(tp.assignment_epochs) == {0} for tp in second.assigned_partitions)
    group = h.group()
    assert group.group_epoch == epoch
    assert group.target["m2new"] == target and "m2" not in group.target
    assert group.static_members == {"m1": "m1", "m2": "m2new"}
    assert not h.timer.is_scheduled(session_timeout_key(GROUP, "m2"))
    assert not h.timer.is_scheduled(rebalance_timeout_key(GROUP, "m2"))
    assert h.timer.is_scheduled(session_timeout_key(GROUP, "m2new"))
    assert group.state() is ConsumerGroupState.STABLE
    h.assert_replayed()


def test_s30_static_rejoin_with_changed_subscription() -> None:
    """S30 (E=3): replacement records, then a bump and a new target; the new member
    reconciles to E+1."""
    h = harness(topics={**TOPICS, "zar": 2})
    m1, m2 = _two_members(h, instance=True)
    epoch = h.group().group_epoch
    ok(m2.leave(-2))
    new = Client(h, "m2new", "m2")
    response = ok(new.join(["zar"]))
    assert summary(h.last.records)[:6] == [
        ("current", "m2", True),
        ("target", "m2", True),
        ("member", "m2", True),
        ("member", "m2new", False),
        ("target", "m2new", False),
        ("current", "m2new", False),
    ]
    rest = summary(h.last.records)[6:]
    assert rest[0] == ("member", "m2new", False)  # the new subscription
    assert rest[1] == ("group", None, False)
    assert ("target-meta", None, False) in rest and rest[-1] == ("current", "m2new", False)
    assert values(h.last.records, ConsumerGroupMetadataKey)[0].epoch == epoch + 1
    assert response.member_epoch == epoch + 1
    assert assignment(response) == parts(h, zar=[0, 1])
    settle(h, m1, new)
    assert m1.owned_dict() == parts(h, foo=list(range(6)), bar=[0, 1, 2])
    h.assert_replayed()


def test_s31_same_member_id_new_instance_id() -> None:
    """S31: the static mapping follows the member to its new instance id."""
    h = harness()
    ok(h.join("m1", ["foo"], instance_id="i1"))
    response = ok(h.join("m1", ["foo"], instance_id="i2"))
    assert response.member_epoch == 2
    assert h.group().static_members == {"i2": "m1"}
    assert summary(h.last.records) == [("member", "m1", False)]
    assert current_of(h, "m1").instance_id == "i2"
    h.assert_replayed()


def test_s32_instance_id_still_in_use() -> None:
    """S32."""
    h = harness()
    ok(h.join("m1", ["foo"], instance_id="i1"))
    before = len(h.log)
    response = h.join("m2", ["foo"], instance_id="i1")
    assert error(response) == (
        ErrorCode.UNRELEASED_INSTANCE_ID,
        "Static member m2 with instance id i1 cannot join the group because the instance id "
        "is owned by m1 member.",
    )
    assert_nothing_written(h, before)


def test_s33_unknown_static_member_with_nonzero_epoch() -> None:
    """S33."""
    h = harness()
    ok(h.join("m1", ["foo"], instance_id="m1"))
    response = h.heartbeat(member_id="m2", instance_id="m2", member_epoch=10)
    assert error(response) == (ErrorCode.UNKNOWN_MEMBER_ID, "Instance id m2 is unknown.")


def test_s34_static_member_with_a_foreign_member_id() -> None:
    """S34."""
    h = harness()
    ok(h.join("m1", ["foo"], instance_id="m1"))
    response = h.heartbeat(member_id="unknown-m1", instance_id="m1", member_epoch=3)
    assert error(response) == (
        ErrorCode.FENCED_INSTANCE_ID,
        "Static member unknown-m1 with instance id m1 was fenced by member m1.",
    )


def test_s35_static_leave_errors() -> None:
    """S35: -2 (and -1) with an unknown instance, or someone else's."""
    h = harness()
    ok(h.join("m1", ["foo"], instance_id="i1"))
    before = len(h.log)
    for epoch in (-2, -1):
        response = h.heartbeat(member_id="m1", instance_id="unknown", member_epoch=epoch)
        assert response.error_code is ErrorCode.UNKNOWN_MEMBER_ID
        response = h.heartbeat(member_id="m2", instance_id="i1", member_epoch=epoch)
        assert response.error_code is ErrorCode.FENCED_INSTANCE_ID
    assert_nothing_written(h, before)


def test_s36_group_max_size() -> None:
    """S36: a third member is refused; members already in may rejoin."""
    h = harness(consumer_max_size=2)
    ok(h.join("m1", ["foo"]))
    ok(h.join("m2", ["foo"]))
    before = len(h.log)
    response = h.join("m3", ["foo"])
    assert response.error_code is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert_nothing_written(h, before)
    ok(h.join("m2", ["foo"]))


def test_s37_static_replacement_allowed_when_full() -> None:
    """S37 (E=2): max size 1, the static member at -2 owns foo[0] and bar[0]; its
    replacement subscribes to foo only: bump, and it keeps foo[0] at epoch 3."""
    h = harness(topics={"foo": 1, "bar": 1}, consumer_max_size=1)
    old = Client(h, "old-member-id", "instance-id")
    ok(old.join(["foo", "bar"], server_assignor="range"))
    ok(old.leave(-2))
    response = ok(
        h.join("new-member-id", ["foo"], instance_id="instance-id", server_assignor="range")
    )
    assert (response.member_id, response.member_epoch) == ("new-member-id", 3)
    assert assignment(response) == parts(h, foo=[0])
    assert h.group().static_members == {"instance-id": "new-member-id"}
    h.assert_replayed()


def test_s38_unreleased_instance_when_full() -> None:
    """S38: UNRELEASED_INSTANCE_ID, not GROUP_MAX_SIZE_REACHED."""
    h = harness(consumer_max_size=1)
    ok(h.join("m1", ["foo"], instance_id="i1"))
    response = h.join("m2", ["foo"], instance_id="i1")
    assert response.error_code is ErrorCode.UNRELEASED_INSTANCE_ID


def test_s39_new_static_member_rejected_when_full() -> None:
    """S39."""
    h = harness(consumer_max_size=1)
    ok(h.join("m1", ["foo"], instance_id="i1"))
    response = h.join("m2", ["foo"], instance_id="i2")
    assert response.error_code is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_s40_group_state_progression() -> None:
    """S40, through ConsumerGroupDescribe and ListGroups. Assigning needs a target held back
    by the assignment interval (default 1000 ms here)."""
    h = Harness(dict(TOPICS))
    m1, m2 = Client(h, "m1"), Client(h, "m2")

    def state() -> str:
        described = h.shard.consumer.describe(GROUP)
        listed = h.shard.consumer.list_groups()
        assert [g.group_state for g in listed] == [described.group_state]
        assert [g.group_id for g in h.shard.consumer.list_groups([described.group_state])] == [
            GROUP
        ]
        return described.group_state

    ok(m1.join(["foo"]))
    assert state() == "Stable"
    ok(m2.join(["foo"]))  # within the interval: the target waits
    assert state() == "Assigning"
    described = h.shard.consumer.describe(GROUP)
    assert (described.group_epoch, described.assignment_epoch) == (3, 2)
    h.sleep(1000)  # the assignment timer computes it
    assert state() == "Reconciling"
    settle(h, m1, m2)
    assert state() == "Stable"
    ok(m1.leave())
    ok(m2.leave())
    assert state() == "Empty"
    assert h.shard.consumer.list_groups(["stable"]) == []
    assert h.shard.consumer.list_groups(types_filter=["classic"]) == []
    h.assert_replayed()


def test_consumer_group_describe() -> None:
    """B.11: members with their assignment (assigned and pending revocation) and target,
    topic names from the image; a missing group is GROUP_ID_NOT_FOUND."""
    h = harness(topics={"foo": 3})
    _unrevoked(h)
    described = h.shard.consumer.describe(GROUP)
    assert described.error_code is ErrorCode.NONE
    assert described.assignor_name == "range"
    by_id = {m.member_id: m for m in described.members}
    m1 = by_id["m1"]
    assert m1.member_epoch == 2 and m1.subscribed_topic_names == ["foo"]
    assert [(tp.topic_name, tp.partitions) for tp in m1.assignment] == [("foo", [0, 1, 2])]
    assert [(tp.topic_name, tp.partitions) for tp in m1.target_assignment] == [("foo", [0, 1])]
    assert m1.member_type == 1 and m1.client_id == "client"
    # No regex ever sent: "" as Kafka describes it (not null).
    assert m1.subscribed_topic_regex == ""
    missing = h.shard.consumer.describe("nope")
    assert (missing.error_code, missing.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group nope not found.",
    )
    # Kafka leaves an error's epochs at the response's defaults.
    assert (missing.group_epoch, missing.assignment_epoch) == (0, 0)


def test_s41_assignor_failure() -> None:
    """S41: UNKNOWN_SERVER_ERROR, and nothing is persisted (no group, no timer)."""
    h = harness()
    h.script("range").error = "boom"
    response = h.join("m", ["foo"], server_assignor="range")
    assert error(response) == (
        ErrorCode.UNKNOWN_SERVER_ERROR,
        "Failed to compute a new target assignment for epoch 2: boom",
    )
    assert h.log == [] and h.shard.consumer_group(GROUP) is None
    assert not h.timer.is_scheduled(session_timeout_key(GROUP, "m"))


def test_failed_static_replacement_keeps_the_old_members_timers() -> None:
    """A static replacement that fails later in the heartbeat (here: an invalid regex)
    writes nothing, so the member at -2 must keep its session timer and still be fenced
    when it runs out."""
    h = harness()
    old = Client(h, "old", "i")
    ok(old.join(["foo"]))
    ok(old.leave(-2))
    response = h.heartbeat(
        member_id="new",
        instance_id="i",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_regex="[",
        topic_partitions=[],
    )
    assert response.error_code is ErrorCode.INVALID_REGULAR_EXPRESSION
    assert h.timer.is_scheduled(session_timeout_key(GROUP, "old"))
    h.sleep(SESSION)
    assert "old" not in h.group().metadata


def test_s42_session_timeout_fences_a_member() -> None:
    """S42: heartbeats push the session deadline; without them the member is fenced at the
    deadline (tombstones, epoch 3 with hash 0, the empty group's target epoch 3); its next
    heartbeat is UNKNOWN_MEMBER_ID. A leave cancels the timer."""
    h = harness()
    m = Client(h, "m")
    ok(m.join(["foo"]))
    key = session_timeout_key(GROUP, "m")
    assert h.timer.deadline(key) == START_MS + SESSION
    h.sleep(SESSION - 1)
    ok(m.poll())
    assert h.timer.deadline(key) == h.timer.now_ms + SESSION
    assert h.sleep(SESSION - 1).records == []
    fired = h.sleep(1)
    assert summary(fired.records) == [
        ("current", "m", True),
        ("target", "m", True),
        ("member", "m", True),
        ("group", None, False),
        ("target-meta", None, False),
    ]
    assert values(fired.records, ConsumerGroupMetadataKey) == [ConsumerGroupMetadataValue(3, 0)]
    assert values(fired.records, ConsumerGroupTargetAssignmentMetadataKey) == [
        ConsumerGroupTargetAssignmentMetadataValue(3, 0)
    ]
    assert h.group().state() is ConsumerGroupState.EMPTY
    assert m.poll().error_code is ErrorCode.UNKNOWN_MEMBER_ID
    h.assert_replayed()

    ok(m.join(["foo"]))
    ok(m.leave())
    assert not h.timer.is_scheduled(key)


def test_s43_session_timeout_of_a_temporarily_left_static_member() -> None:
    """S43: the session timer keeps running after -2; without a replacement the member is
    fenced as in S42."""
    h = harness()
    m = Client(h, "m", "i")
    ok(m.join(["foo"]))
    ok(m.leave(-2))
    fired = h.sleep(SESSION)
    assert summary(fired.records) == [
        ("current", "m", True),
        ("target", "m", True),
        ("member", "m", True),
        ("group", None, False),
        ("target-meta", None, False),
    ]
    assert values(fired.records, ConsumerGroupMetadataKey)[0].epoch == 3
    assert h.group().static_members == {}
    h.assert_replayed()


def test_s44_rebalance_timeout_lifecycle() -> None:
    """S44: the rebalance timer is armed with the member's RebalanceTimeoutMs while it
    revokes, cancelled once it has; a stale firing is a no-op."""
    h = Harness({"foo": 3})  # assignment interval 1000 ms, as Kafka's default
    m1, m2 = Client(h, "m1"), Client(h, "m2")
    ok(m1.join(["foo"], server_assignor="range"))
    h.sleep(1000)
    assert ok(m2.join(["foo"], server_assignor="range")).member_epoch == 3
    response = ok(m1.poll(rebalance_timeout_ms=12_000))
    assert (response.member_epoch, assignment(response)) == (2, parts(h, foo=[0, 1]))
    key = rebalance_timeout_key(GROUP, "m1")
    assert h.timer.deadline(key) == h.timer.now_ms + 12_000
    stale = h.timer._live[key][1]
    response = ok(m1.ack())
    assert (response.member_epoch, response.assignment) == (3, None)
    assert not h.timer.is_scheduled(key)
    assert stale(h.timer.now_ms).records == []
    assert h.sleep(12_000).records == []


def test_s45_rebalance_timeout_expiry_fences() -> None:
    """S45: m1 does not revoke within its 10000 ms rebalance timeout: fenced (tombstones,
    epoch 4), its timers gone, its next heartbeat UNKNOWN_MEMBER_ID."""
    h = Harness({"foo": 3})
    m1, m2 = Client(h, "m1"), Client(h, "m2")
    ok(m1.join(["foo"], server_assignor="range", rebalance_timeout_ms=10_000))
    h.sleep(1000)
    ok(m2.join(["foo"], server_assignor="range"))
    assert ok(m1.poll()).member_epoch == 2
    assert current_of(h, "m1").state is MemberState.UNREVOKED_PARTITIONS
    assert h.sleep(9_999).records == []
    fired = h.sleep(1)
    assert summary(fired.records) == [
        ("current", "m1", True),
        ("target", "m1", True),
        ("member", "m1", True),
        ("group", None, False),
    ]
    assert values(fired.records, ConsumerGroupMetadataKey)[0].epoch == 4
    assert not h.timer.is_scheduled(session_timeout_key(GROUP, "m1"))
    assert not h.timer.is_scheduled(rebalance_timeout_key(GROUP, "m1"))
    assert m1.poll().error_code is ErrorCode.UNKNOWN_MEMBER_ID
    # m2 takes everything at the next epoch.
    response = ok(m2.ack())
    assert (response.member_epoch, assignment(response)) == (4, parts(h, foo=[0, 1, 2]))
    h.assert_replayed()


def test_s46_assignment_interval() -> None:
    """S46 with interval 5000. Kafka computes the held-back target in the first heartbeat
    after the interval; we compute it with the `assignment-<group>` timer when the interval
    ends (t0+5000), so m2's heartbeat at t0+5005 only reconciles towards it."""
    h = Harness({"foo": 6}, consumer_assignment_interval_ms=5000)
    t0 = h.timer.now_ms
    m1, m2 = Client(h, "m1"), Client(h, "m2")
    response = ok(m1.join(["foo"], server_assignor="range"))
    assert (response.member_epoch, assignment(response)) == (2, parts(h, foo=list(range(6))))
    assert values(h.last.records, ConsumerGroupTargetAssignmentMetadataKey) == [
        ConsumerGroupTargetAssignmentMetadataValue(2, t0)
    ]
    h.sleep(4995)
    response = ok(m2.join(["foo"], server_assignor="range"))
    assert (response.member_epoch, assignment(response)) == (2, {})
    assert summary(h.last.records) == [
        ("member", "m2", False),
        ("group", None, False),
        ("current", "m2", False),
    ]
    assert values(h.last.records, ConsumerGroupMetadataKey)[0].epoch == 3
    assert h.timer.deadline(assignment_key(GROUP)) == t0 + 5000
    assert h.group().state() is ConsumerGroupState.ASSIGNING
    fired = h.sleep(5)
    assert summary(fired.records) == [
        ("target", "m1", False),
        ("target", "m2", False),
        ("target-meta", None, False),
    ]
    assert values(fired.records, ConsumerGroupTargetAssignmentMetadataKey) == [
        ConsumerGroupTargetAssignmentMetadataValue(3, t0 + 5000)
    ]
    foo = h.topic_id("foo")
    assert h.group().target == {
        "m1": {foo: frozenset({0, 1, 2})},
        "m2": {foo: frozenset({3, 4, 5})},
    }
    response = ok(m2.poll())
    assert (response.member_epoch, response.assignment) == (3, None)
    assert current_of(h, "m2").state is MemberState.UNRELEASED_PARTITIONS
    settle(h, m1, m2)
    assert m2.owned_dict() == parts(h, foo=[3, 4, 5])
    h.assert_replayed()


def test_assignment_interval_timer_survives_reload() -> None:
    """A held-back target whose timer was lost with a restart is scheduled again on load."""
    h = Harness({"foo": 6}, consumer_assignment_interval_ms=5000)
    ok(h.join("m1", ["foo"]))
    h.sleep(1000)
    ok(h.join("m2", ["foo"]))
    h.reload()
    assert h.timer.is_scheduled(assignment_key(GROUP))
    h.sleep(5000)
    assert h.group().assignment_epoch == 3


def test_reconciling_heartbeat_interval() -> None:
    """Ours: with consumer_reconciling_heartbeat_interval_ms on, members that are not
    STABLE at the newest target (or whose group awaits a new target) are asked to come back
    sooner; stable members get the normal interval."""
    h = Harness({"foo": 6}, consumer_reconciling_heartbeat_interval_ms=250)
    m1, m2 = Client(h, "m1"), Client(h, "m2")
    assert ok(m1.join(["foo"])).heartbeat_interval_ms == INTERVAL
    assert ok(m2.join(["foo"])).heartbeat_interval_ms == 250  # target held back
    assert ok(m1.ack()).heartbeat_interval_ms == 250
    h.sleep(1000)  # target computed
    response = ok(m1.poll())
    assert response.member_epoch == 2 and response.heartbeat_interval_ms == 250  # revoking
    response = ok(m1.ack())
    assert response.member_epoch == 3 and response.heartbeat_interval_ms == INTERVAL
    response = ok(m2.ack())
    assert current_of(h, "m2").state is MemberState.STABLE
    assert response.heartbeat_interval_ms == INTERVAL


# =============================================================================================
# Regular expressions and topic metadata (our synchronous resolution)
# =============================================================================================


def test_s47_regex_join_with_new_regex() -> None:
    """S47, as Kafka: m2's join with a new regex moves no epoch and gets nothing (the regex
    matches nothing until resolved); the resolution, a shard event after the heartbeat,
    writes the RegularExpression record (sorted topics, image version, now) and the bump to
    E+1 with the new hash; m2's next heartbeat reconciles to E+1 with the matching topics'
    partitions. A second member with the resolved regex bumps at once, writing no regex."""
    h = harness(topics={"foo": 2, "foobar": 1, "bar": 3})
    m1 = Client(h, "m1")
    ok(m1.join(["bar"]))
    epoch = h.group().group_epoch
    old_hash = h.group().metadata_hash
    response = ok(
        h.heartbeat(
            member_id="m2",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_regex="foo.*",
            topic_partitions=[],
        )
    )
    assert summary(h.last.records) == [("member", "m2", False), ("current", "m2", False)]
    assert (response.member_epoch, assignment(response)) == (epoch, {})
    assert h.timer.is_scheduled("regex-" + GROUP)

    fired = h.sleep(0)
    assert summary(fired.records) == [("regex", "foo.*", False), ("group", None, False)]
    assert values(fired.records, ConsumerGroupRegularExpressionKey) == [
        ConsumerGroupRegularExpressionValue(("foo", "foobar"), h.topics.version, h.timer.now_ms)
    ]
    group_meta = values(fired.records, ConsumerGroupMetadataKey)[0]
    assert group_meta.epoch == epoch + 1 and group_meta.metadata_hash != old_hash
    response = ok(h.heartbeat(member_id="m2", member_epoch=epoch))
    assert response.member_epoch == epoch + 1
    assert assignment(response) == parts(h, foo=[0, 1], foobar=[0])
    # A second member with the same regex reuses the resolution, and moves the epoch.
    response = ok(
        h.heartbeat(
            member_id="m3",
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_regex="foo.*",
            topic_partitions=[],
        )
    )
    assert ("regex", "foo.*", False) not in summary(h.last.records)
    assert response.member_epoch == epoch + 2
    assert not h.timer.is_scheduled("regex-" + GROUP)
    h.assert_replayed()


def test_regex_resolution_follows_topic_creation() -> None:
    """A topic created later that matches a regex: the next heartbeat asks for a new
    resolution, at least 10 s (Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS) after the last
    one; it records the new topic set and bumps, and the heartbeat after gets the topic. A
    topic created that matches nothing only refreshes the record: no epoch moves."""
    h = harness(topics={"foo": 2})
    m = Client(h, "m")
    ok(
        m._send(
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_regex="foo.*",
            topic_partitions=[],
        )
    )
    h.sleep(0)
    resolved_ms = h.timer.now_ms
    ok(m.ack())
    epoch = h.group().group_epoch
    h.topics.add("other", 4)
    assert ok(m.ack()).member_epoch == epoch
    assert h.timer.deadline("regex-" + GROUP) == resolved_ms + 10_001
    fired = h.sleep(10_001)
    assert summary(fired.records) == [("regex", "foo.*", False)]
    assert ok(m.ack()).member_epoch == epoch
    h.topics.add("foo2", 1)
    before = len(h.log)
    response = ok(m.ack())
    assert response.member_epoch == epoch and len(h.log) == before
    fired = h.sleep(10_001)
    assert summary(fired.records) == [("regex", "foo.*", False), ("group", None, False)]
    response = ok(m.ack())
    assert response.member_epoch == epoch + 1
    assert assignment(response) == parts(h, foo=[0, 1], foo2=[0])
    h.assert_replayed()


def test_regex_refreshed_after_the_refresh_interval() -> None:
    """group.consumer.regex.refresh.interval.ms: a heartbeat on the full path after it
    resolves the group's regexes again, even with no topic change."""
    h = harness(topics={"foo": 2}, consumer_regex_refresh_interval_ms=60_000)
    m = Client(h, "m")
    ok(
        m._send(
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_regex="foo.*",
            topic_partitions=[],
        )
    )
    h.sleep(0)
    ok(m.ack())
    h.sleep(30_000)
    ok(m._send(member_epoch=m.epoch, rebalance_timeout_ms=5000))
    assert not h.timer.is_scheduled("regex-" + GROUP)
    h.sleep(31_000)
    ok(m._send(member_epoch=m.epoch, rebalance_timeout_ms=5000))
    fired = h.sleep(0)
    assert summary(fired.records) == [("regex", "foo.*", False)]
    assert values(fired.records, ConsumerGroupRegularExpressionKey)[0].timestamp == h.now


def test_s49_regex_removed_when_last_subscriber_leaves() -> None:
    """S49: the last subscriber's leave (or fencing) tombstones the regex in the same write;
    one of two subscribers leaving does not; a member switching away from its regex drops
    it in its own heartbeat."""
    h = harness(topics={"foo": 2, "bar": 1})

    def join_regex(member_id: str) -> None:
        ok(
            h.heartbeat(
                member_id=member_id,
                member_epoch=0,
                rebalance_timeout_ms=5000,
                subscribed_topic_regex="fo+",
                topic_partitions=[],
            )
        )

    join_regex("a")
    join_regex("b")
    h.sleep(0)  # resolved
    ok(h.heartbeat(member_id="a", member_epoch=-1))
    assert ("regex", "fo+", True) not in summary(h.last.records)
    ok(h.heartbeat(member_id="b", member_epoch=-1))
    assert summary(h.last.records) == [
        ("current", "b", True),
        ("target", "b", True),
        ("member", "b", True),
        ("regex", "fo+", True),
        ("group", None, False),
        ("target-meta", None, False),
    ]
    assert h.group().resolved_regexes == {}
    # Fenced by its session timeout.
    join_regex("c")
    h.sleep(0)
    fired = h.sleep(SESSION)
    assert ("regex", "fo+", True) in summary(fired.records)
    # Switching to names.
    join_regex("d")
    h.sleep(0)
    ok(h.heartbeat(member_id="d", member_epoch=h.group().group_epoch - 1))
    epoch = h.group().group_epoch
    response = ok(
        h.heartbeat(
            member_id="d",
            member_epoch=epoch,
            subscribed_topic_regex="",
            subscribed_topic_names=["bar"],
            topic_partitions=[],  # foo's partitions already released
        )
    )
    assert ("regex", "fo+", True) in summary(h.last.records)
    assert (response.member_epoch, assignment(response)) == (epoch + 1, parts(h, bar=[0]))
    assert h.group().resolved_regexes == {}
    h.assert_replayed()


def test_regex_back_after_every_member_expired_is_resolved_at_once() -> None:
    """Every member expires (the regex is tombstoned with its last subscriber); a regex
    member rejoining within 10 s of the last resolution is resolved at once, not 10 s later
    (Kafka: with no resolved regex the last refresh time is Long.MIN_VALUE). Until then, as
    in Kafka, the group is Stable with the regex member holding nothing: a new regex moves
    no epoch. The resolution bumps it and the group settles with every partition held."""
    h = harness(topics={"t0": 4, "t1": 3})
    names = Client(h, "names")
    regex = Client(h, "regex")

    def join_regex() -> Any:
        regex.owned = []
        return ok(
            regex._send(
                member_epoch=0,
                rebalance_timeout_ms=5000,
                subscribed_topic_regex="t[0-9]",
                topic_partitions=[],
            )
        )

    ok(names.join(["t0"]))
    join_regex()
    h.sleep(0)  # resolved
    settle(h, names, regex)
    fired = h.sleep(SESSION + 1)
    assert ("regex", "t[0-9]", True) in summary(fired.records)
    assert len(h.group()) == 0 and h.group().resolved_regexes == {}

    ok(names.join(["t0"]))
    settle(h, names)
    epoch = h.group().group_epoch
    response = join_regex()
    assert (response.member_epoch, assignment(response)) == (epoch, {})
    assert h.group().state() is ConsumerGroupState.STABLE
    assert h.timer.deadline("regex-" + GROUP) == h.now
    fired = h.sleep(0)
    assert summary(fired.records) == [("regex", "t[0-9]", False), ("group", None, False)]
    settle(h, names, regex)
    held = {(t, p) for client in (names, regex) for t, ps in client.owned for p in ps}
    assert held == {(h.topic_id("t0"), p) for p in range(4)} | {
        (h.topic_id("t1"), p) for p in range(3)
    }
    h.assert_replayed()


def test_s50_metadata_change_bumps_the_epoch() -> None:
    """S50: a subscribed topic growing, being created or deleted bumps the epoch at the next
    heartbeat, with a new hash and a new target; an unrelated topic changes nothing."""
    h = harness(topics={"foo": 2})
    m = Client(h, "m")
    ok(m.join(["foo", "bar"]))
    epoch, old_hash = h.group().group_epoch, h.group().metadata_hash

    h.topics.add("unrelated", 3)
    before = len(h.log)
    assert ok(m.ack()).member_epoch == epoch
    assert_nothing_written(h, before)

    h.topics.add("foo", 4)  # grows
    response = ok(m.ack())
    assert summary(h.last.records) == [
        ("group", None, False),
        ("target", "m", False),
        ("target-meta", None, False),
        ("current", "m", False),
    ]
    group_meta = values(h.last.records, ConsumerGroupMetadataKey)[0]
    assert group_meta.epoch == epoch + 1 and group_meta.metadata_hash != old_hash
    assert (response.member_epoch, assignment(response)) == (epoch + 1, parts(h, foo=[0, 1, 2, 3]))

    h.topics.add("bar", 2)  # created
    response = ok(m.ack())
    assert response.member_epoch == epoch + 2
    assert assignment(response) == parts(h, foo=[0, 1, 2, 3], bar=[0, 1])

    foo = h.topic_id("foo")
    h.topics.delete("foo")  # deleted: its partitions are revoked
    response = ok(m.poll())
    assert response.member_epoch == epoch + 2
    assert current_of(h, "m").partitions_pending_revocation.keys() == {foo}
    m.owned = [(t, ps) for t, ps in m.owned if t != foo]
    response = ok(m.ack())
    assert response.member_epoch == epoch + 3
    assert current_of(h, "m").assigned_partitions.keys() == {h.topic_id("bar")}
    h.assert_replayed()


def test_s50_metadata_checked_after_load() -> None:
    """S50 (#testSubscriptionMetadataRefreshedAfterGroupIsLoaded): a loaded group checks its
    hash at its first heartbeat; unchanged topics write nothing, changed ones bump."""
    h = harness(topics={"foo": 2})
    m = Client(h, "m")
    ok(m.join(["foo"]))
    h.reload()
    before = len(h.log)
    assert ok(m.ack()).member_epoch == 2
    assert_nothing_written(h, before)
    h.reload()
    h.topics.add("foo", 3)
    response = ok(m.ack())
    assert response.member_epoch == 3
    assert assignment(response) == parts(h, foo=[0, 1, 2])


def test_s51_legacy_subscription_metadata_cleanup() -> None:
    """S51: a group loaded with a (pre-KIP-1101) ConsumerGroupPartitionMetadata record drops it
    with a tombstone in its next epoch-bumping heartbeat, once."""
    h = harness()
    ok(h.join("m1", ["foo"]))
    h.apply(
        Result(
            records=[
                (ConsumerGroupPartitionMetadataKey(GROUP), ConsumerGroupPartitionMetadataValue(()))
            ]
        )
    )
    h.reload()
    assert h.group().has_legacy_partition_metadata
    before = len(h.log)
    ok(h.heartbeat(member_id="m1", member_epoch=2))  # no bump: left alone
    assert_nothing_written(h, before)
    ok(h.join("m2", ["foo"]))
    assert summary(h.last.records)[:3] == [
        ("member", "m2", False),
        ("group", None, False),
        ("partition-metadata", None, True),
    ]
    assert not h.group().has_legacy_partition_metadata
    ok(h.join("m3", ["bar"]))
    assert ("partition-metadata", None, True) not in summary(h.last.records)
    h.assert_replayed()


def test_preferred_server_assignor_change_bumps_the_epoch() -> None:
    """B.4.6: a ServerAssignor change bumps only when it changes the group's preferred
    assignor (the most asked for; ties go to the smallest name, so the choice does not
    depend on the order the members' records were replayed in)."""
    h = harness(topics={"foo": 3})
    a, b = Client(h, "a"), Client(h, "b")
    ok(a.join(["foo"], server_assignor="range"))
    ok(b.join(["foo"], server_assignor="range"))
    settle(h, a, b)
    epoch = h.group().group_epoch
    ok(a.ack(server_assignor="uniform"))  # one each: "range" still wins the tie
    assert summary(h.last.records) == [("member", "a", False)]
    assert h.group().preferred_assignor() == "range"
    response = ok(b.ack(server_assignor="uniform"))
    assert summary(h.last.records)[:2] == [("member", "b", False), ("group", None, False)]
    assert response.member_epoch == epoch + 1
    assert h.shard.consumer.describe(GROUP).assignor_name == "uniform"
    h.assert_replayed()


def test_assignor_no_longer_configured_falls_back_to_the_default() -> None:
    """A member's stored ServerAssignor that the coordinator no longer offers (restarted
    with another group.consumer.assignors) does not break target computation."""
    h = harness(topics={"foo": 3})
    ok(h.join("a", ["foo"], server_assignor="range"))
    del h.shard.consumer.assignors["range"]
    response = ok(h.join("b", ["foo"]))
    assert response.member_epoch == 3
    assert h.group().assignment_epoch == 3


# =============================================================================================
# Replay
# =============================================================================================


def test_replayed_groups_equal_live_groups_through_a_scenario_mix() -> None:
    """After every step of a mixed sequence (joins, static leave and replacement, revocation,
    subscription change, regex, topic growth, session expiry), a shard rebuilt from the log
    has the same consumer groups, and a reloaded shard carries on identically."""
    h = harness(topics={"foo": 6, "bar": 3, "zar": 2})
    a, b, c = Client(h, "a"), Client(h, "b", "ib"), Client(h, "c")
    steps: list[Callable[[], object]] = [
        lambda: a.join(["foo", "bar"]),
        lambda: b.join(["foo", "bar"]),
        lambda: a.poll(),
        lambda: b.ack(),
        lambda: a.ack(),
        lambda: c._send(
            member_epoch=0,
            rebalance_timeout_ms=5000,
            subscribed_topic_regex="(foo|zar)",
            topic_partitions=[],
        ),
        lambda: b.leave(-2),
        lambda: c.ack(),
        lambda: a.ack(subscribed_topic_names=["bar"]),
        lambda: h.topics.add("foo", 8),
        lambda: c.ack(),
        lambda: a.ack(),
        lambda: h.sleep(SESSION + 1),
    ]
    for step in steps:
        step()
        h.assert_replayed()
    b2 = Client(h, "b2", "ib")
    ok(b2.join(["foo"]))
    h.assert_replayed()
    h.reload()
    settle(h, b2)
    h.assert_replayed()

"""Server-side assignors (scenarios S147-S150): exact layouts for range, balance and
stickiness for uniform (whose layouts depend on iteration orders, as in Kafka)."""

from __future__ import annotations

import uuid

import pytest

from groupcoord.coordinator.groups.assignors import (
    GroupSpec,
    LazyAssignment,
    MemberSubscription,
    PartitionAssignorError,
    RangeAssignor,
    SubscriptionType,
    TopicMetadata,
    UniformAssignor,
    range_order,
    subscription_type_of,
)

T1, T2, T3, T4 = (uuid.UUID(int=i) for i in (1, 2, 3, 4))
RANGE = RangeAssignor()
UNIFORM = UniformAssignor()


def sub(*topics: uuid.UUID, instance: str | None = None) -> MemberSubscription:
    return MemberSubscription(
        instance_id=instance, rack_id=None, subscribed_topic_ids=frozenset(topics)
    )


def plain(result) -> dict[str, dict[uuid.UUID, list[int]]]:
    """{member: {topic: sorted partitions}}, dropping empty members."""
    out = {}
    for m, a in result.items():
        topics = {t: sorted(ps) for t, ps in a.items() if ps}
        if topics:
            out[m] = topics
    return out


def sizes(result) -> dict[str, int]:
    return {m: sum(map(len, a.values())) for m, a in result.items()}


def owners(result) -> dict[tuple[uuid.UUID, int], str]:
    out: dict[tuple[uuid.UUID, int], str] = {}
    for m, a in result.items():
        for t, ps in a.items():
            for p in ps:
                assert (t, p) not in out, f"{t}-{p} assigned twice"
                out[(t, p)] = m
    return out


def assert_complete(result, topics: dict[uuid.UUID, int], group: GroupSpec) -> None:
    got = owners(result)
    subscribed = set().union(*(s.subscribed_topic_ids for s in group.members.values()))
    expected = {(t, p) for t in subscribed for p in range(topics[t])}
    assert set(got) == expected
    for (t, _), m in got.items():
        assert t in group.members[m].subscribed_topic_ids
    assert set(result) == set(group.members)


# ---------------------------------------------------------------------------------------------
# Range (S147, S148)


def test_range_heterogeneous_reference_layout():
    topics = {T1: 3, T2: 3, T3: 2}
    group = GroupSpec({"A": sub(T1, T2), "B": sub(T3), "C": sub(T2, T3)})
    assert group.subscription_type is SubscriptionType.HETEROGENEOUS
    result = RANGE.assign(group, TopicMetadata(topics))
    assert plain(result) == {
        "A": {T1: [0, 1, 2], T2: [0, 1]},
        "B": {T3: [0]},
        "C": {T2: [2], T3: [1]},
    }
    assert_complete(result, topics, group)


def test_range_homogeneous_two_members_two_topics():
    topics = {T1: 3, T3: 2}
    group = GroupSpec({"A": sub(T1, T3), "B": sub(T1, T3)})
    result = RANGE.assign(group, TopicMetadata(topics))
    assert plain(result) == {"A": {T1: [0, 1], T3: [0]}, "B": {T1: [2], T3: [1]}}
    assert isinstance(result, LazyAssignment)
    assert result.partition_count("A") == 3 and result.partition_count("B") == 2


def test_range_homogeneous_co_partitioned_and_extras_first():
    topics = {T1: 7, T2: 7}
    group = GroupSpec({m: sub(T1, T2) for m in ("c", "a", "b")})
    result = RANGE.assign(group, TopicMetadata(topics))
    expected = {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}
    assert plain(result) == {m: {T1: ps, T2: ps} for m, ps in expected.items()}


def test_range_more_members_than_partitions():
    topics = {T1: 2}
    group = GroupSpec({m: sub(T1) for m in "abc"})
    result = RANGE.assign(group, TopicMetadata(topics))
    assert plain(result) == {"a": {T1: [0]}, "b": {T1: [1]}}
    assert result["c"] == {}


def test_range_static_members_first_by_instance_id():
    members = {
        "m1": sub(T1),
        "m2": sub(T1, instance="zeta"),
        "m3": sub(T1, instance="alpha"),
        "m0": sub(T1),
    }
    group = GroupSpec(members)
    assert range_order(group) == ["m3", "m2", "m0", "m1"]
    result = RANGE.assign(group, TopicMetadata({T1: 8}))
    assert plain(result) == {
        "m3": {T1: [0, 1]},
        "m2": {T1: [2, 3]},
        "m0": {T1: [4, 5]},
        "m1": {T1: [6, 7]},
    }


def test_range_static_assignment_stable_across_member_id_changes():
    topics = TopicMetadata({T1: 5, T2: 3})
    before = GroupSpec(
        {"x-1": sub(T1, T2, instance="i1"), "x-2": sub(T1, T2, instance="i2"), "d": sub(T1, T2)}
    )
    # The static members rejoin with new member ids that sort the other way round.
    after = GroupSpec(
        {"a-9": sub(T1, T2, instance="i2"), "z-0": sub(T1, T2, instance="i1"), "d": sub(T1, T2)}
    )
    r1 = plain(RANGE.assign(before, topics))
    r2 = plain(RANGE.assign(after, topics))
    assert r1["x-1"] == r2["z-0"]
    assert r1["x-2"] == r2["a-9"]
    assert r1["d"] == r2["d"]


def test_range_unknown_topic_and_empty_group():
    group = GroupSpec({"a": sub(T1, T4)})
    with pytest.raises(PartitionAssignorError):
        RANGE.assign(group, TopicMetadata({T1: 1}))
    assert RANGE.assign(GroupSpec({}), TopicMetadata({})) == {}


def test_range_member_without_subscriptions_gets_nothing():
    group = GroupSpec({"a": sub(T1), "b": sub()})
    result = RANGE.assign(group, TopicMetadata({T1: 2}))
    assert plain(result) == {"a": {T1: [0, 1]}}
    assert result["b"] == {}


# ---------------------------------------------------------------------------------------------
# Uniform, homogeneous (S149)


def test_uniform_more_members_than_partitions():
    topics = {T1: 2}
    group = GroupSpec({m: sub(T1) for m in "abc"})
    result = UNIFORM.assign(group, TopicMetadata(topics))
    assert_complete(result, topics, group)
    assert sorted(sizes(result).values()) == [0, 1, 1]


def test_uniform_first_assignment_is_balanced_and_contiguous():
    topics = {T1: 6, T2: 5}
    group = GroupSpec({m: sub(T1, T2) for m in "abc"})
    result = UNIFORM.assign(group, TopicMetadata(topics))
    assert_complete(result, topics, group)
    # Nobody owns more than the minimum, so the extra slots go to the last members
    # (KAFKA-18688); partitions are dealt in member then topic order.
    assert plain(result) == {
        "a": {T1: [0, 1, 2]},
        "b": {T1: [3, 4, 5], T2: [0]},
        "c": {T2: [1, 2, 3, 4]},
    }


def test_uniform_member_added_moves_only_from_over_quota_members():
    topics = {T1: 3, T2: 3}
    metadata = TopicMetadata(topics)
    first = UNIFORM.assign(GroupSpec({m: sub(T1, T2) for m in "ab"}), metadata).to_dict()
    group = GroupSpec({m: sub(T1, T2) for m in "abc"}, first)
    result = UNIFORM.assign(group, metadata)
    assert_complete(result, topics, group)
    assert sorted(sizes(result).values()) == [2, 2, 2]
    for m in "ab":
        for t, ps in result[m].items():
            assert ps <= first[m].get(t, frozenset())  # nothing new for old members
    assert set(result.changed_members()) == {"a", "b", "c"}


def test_uniform_member_removed_keeps_everything_retained():
    topics = {T1: 3, T2: 3}
    metadata = TopicMetadata(topics)
    first = UNIFORM.assign(GroupSpec({m: sub(T1, T2) for m in "abc"}), metadata).to_dict()
    for keep_departed in (True, False):
        previous = dict(first) if keep_departed else {m: first[m] for m in "ab"}
        group = GroupSpec({m: sub(T1, T2) for m in "ab"}, previous)
        result = UNIFORM.assign(group, metadata)
        assert_complete(result, topics, group)
        assert sorted(sizes(result).values()) == [3, 3]
        for m in "ab":
            for t, ps in first[m].items():
                assert ps <= result[m][t]


def test_uniform_balanced_previous_assignment_does_not_move():
    # KAFKA-18688: with 7 partitions over 3 members, whoever already holds the extra keeps it.
    topics = {T1: 7}
    previous = {"a": {T1: {0, 1}}, "b": {T1: {2, 3, 4}}, "c": {T1: {5, 6}}}
    group = GroupSpec({m: sub(T1) for m in "abc"}, previous)
    result = UNIFORM.assign(group, TopicMetadata(topics))
    assert plain(result) == {m: {T1: sorted(ps[T1])} for m, ps in previous.items()}
    assert result.changed_members() == []


def test_uniform_unsubscribed_topic_dropped_and_grown_topic_filled():
    previous = {"a": {T1: {0, 1}, T3: {0}}, "b": {T1: {2, 3}}}
    group = GroupSpec({m: sub(T1, T2) for m in "ab"}, previous)
    topics = {T1: 6, T2: 2}  # T1 grew from 4 to 6; T2 is new; T3 no longer subscribed
    result = UNIFORM.assign(group, TopicMetadata(topics))
    assert_complete(result, topics, group)
    assert sorted(sizes(result).values()) == [4, 4]
    assert {0, 1} <= result["a"][T1] and {2, 3} <= result["b"][T1]


def test_uniform_unknown_topic_raises():
    group = GroupSpec({"a": sub(T1, T4), "b": sub(T1, T4)})
    with pytest.raises(PartitionAssignorError):
        UNIFORM.assign(group, TopicMetadata({T1: 3}))
    hetero = GroupSpec({"a": sub(T1), "b": sub(T4)})
    with pytest.raises(PartitionAssignorError):
        UNIFORM.assign(hetero, TopicMetadata({T1: 3}))


def test_uniform_no_subscriptions_gives_empty_assignments():
    group = GroupSpec({"a": sub(), "b": sub()}, {"a": {T1: {0}}})
    result = UNIFORM.assign(group, TopicMetadata({T1: 1}))
    assert dict(result) == {"a": {}, "b": {}}
    assert UNIFORM.assign(GroupSpec({}), TopicMetadata({})) == {}


def test_uniform_large_sample_valid_and_balanced():
    topics = {uuid.UUID(int=100 + i): 1 + (i * 7) % 23 for i in range(30)}
    metadata = TopicMetadata(topics)
    members = {f"member-{i:03d}": sub(*topics) for i in range(37)}
    result = UNIFORM.assign(GroupSpec(members), metadata)
    assert_complete(result, topics, GroupSpec(members))
    counts = sizes(result)
    assert max(counts.values()) - min(counts.values()) <= 1
    # Shrink and grow the group: still valid, balanced and sticky.
    previous = result.to_dict()
    smaller = {m: s for i, (m, s) in enumerate(members.items()) if i % 5}
    smaller.update({f"new-{i}": sub(*topics) for i in range(3)})
    group = GroupSpec(smaller, previous)
    again = UNIFORM.assign(group, metadata)
    assert_complete(again, topics, group)
    counts = sizes(again)
    assert max(counts.values()) - min(counts.values()) <= 1
    for m in smaller:
        kept = sum(len(again[m].get(t, set()) & ps) for t, ps in previous.get(m, {}).items())
        assert kept == min(sum(map(len, previous.get(m, {}).values())), counts[m])


def test_uniform_invalid_previous_target_is_repaired():
    # A partition twice, and one that does not exist: the first owner (by id) keeps it.
    previous = {"a": {T1: {0, 1, 9}}, "b": {T1: {1, 2}}}
    group = GroupSpec({m: sub(T1) for m in "abc"}, previous)
    topics = {T1: 4}
    result = UNIFORM.assign(group, TopicMetadata(topics))
    assert_complete(result, topics, group)
    assert {0, 1} <= result["a"][T1]
    hetero = GroupSpec({"a": sub(T1), "b": sub(T1, T2), "c": sub(T2)}, previous)
    result = UNIFORM.assign(hetero, TopicMetadata({T1: 4, T2: 2}))
    assert_complete(result, {T1: 4, T2: 2}, hetero)


def test_uniform_equal_topic_ids_need_not_be_identical_objects():
    previous = {"a": {uuid.UUID(int=1): {0, 1}}, "b": {uuid.UUID(int=1): {2}}}
    group = GroupSpec({m: sub(T1) for m in "ab"}, previous)
    result = UNIFORM.assign(group, TopicMetadata({T1: 4}))
    assert {0, 1} <= result["a"][T1] and {2} <= result["b"][T1]
    assert sorted(sizes(result).values()) == [2, 2]


# ---------------------------------------------------------------------------------------------
# Uniform, heterogeneous (S150)


def test_uniform_heterogeneous_first_assignment_two_members_two_topics():
    topics = {T1: 3, T3: 2}
    group = GroupSpec({"A": sub(T1, T3), "B": sub(T3)})
    assert group.subscription_type is SubscriptionType.HETEROGENEOUS
    result = UNIFORM.assign(group, TopicMetadata(topics))
    assert plain(result) == {"A": {T1: [0, 1, 2]}, "B": {T3: [0, 1]}}


def test_uniform_heterogeneous_subscription_removed_redistributes():
    topics = {T1: 3, T2: 3}
    previous = {"A": {T1: {0, 1, 2}, T2: {0, 1}}, "B": {T2: {2}}}
    group = GroupSpec({"A": sub(T1), "B": sub(T2)}, previous)
    result = UNIFORM.assign(group, TopicMetadata(topics))
    assert plain(result) == {"A": {T1: [0, 1, 2]}, "B": {T2: [0, 1, 2]}}
    assert result.changed_members() == ["A", "B"]


def test_uniform_heterogeneous_member_without_subscriptions_gets_nothing():
    topics = {T1: 3, T2: 3}
    group = GroupSpec({"A": sub(T1, T2), "B": sub()})
    result = UNIFORM.assign(group, TopicMetadata(topics))
    assert plain(result) == {"A": {T1: [0, 1, 2], T2: [0, 1, 2]}}
    assert result["B"] == {}


def test_uniform_heterogeneous_balances_identical_subscribers():
    topics = {T1: 10, T2: 4}
    # b and c share a subscription; the previous target piles everything on b.
    previous = {"b": {T1: set(range(10)), T2: set(range(4))}}
    group = GroupSpec({"a": sub(T1), "b": sub(T1, T2), "c": sub(T1, T2)}, previous)
    result = UNIFORM.assign(group, TopicMetadata(topics))
    assert_complete(result, topics, group)
    counts = sizes(result)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert result.changed_members() == ["a", "b", "c"]


# ---------------------------------------------------------------------------------------------
# Spec


def test_subscription_type_and_partition_lookup():
    assert subscription_type_of({}) is SubscriptionType.HOMOGENEOUS
    assert subscription_type_of({"a": sub(T1), "b": sub(T1)}) is SubscriptionType.HOMOGENEOUS
    assert subscription_type_of({"a": sub(T1), "b": sub()}) is SubscriptionType.HETEROGENEOUS
    group = GroupSpec({"a": sub(T1)}, {"a": {T1: {2}}, "gone": {T1: {3}}})
    assert group.is_partition_assigned(T1, 2)
    assert not group.is_partition_assigned(T1, 3)
    assert group.member_assignment("zzz") == {}


def test_lazy_assignment_is_a_mapping():
    group = GroupSpec({m: sub(T1) for m in "ba"})
    result = UNIFORM.assign(group, TopicMetadata({T1: 3}))
    assert list(result) == ["a", "b"] and len(result) == 2 and "a" in result
    assert "zzz" not in result
    assert result == {"a": {T1: frozenset({0})}, "b": {T1: frozenset({1, 2})}}
    assert result.partition_count("b") == 2
    with pytest.raises(KeyError):
        result["zzz"]

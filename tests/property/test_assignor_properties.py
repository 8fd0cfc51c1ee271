"""Property tests of the server-side assignors: for random groups, subscriptions, partition
counts and previous target assignments (valid targets: each partition at most once, held
by current members, by members that left, or by nobody; possibly of topics the holder no
longer subscribes to; topics may have grown since), every partition of a subscribed topic
is assigned exactly once, to a subscriber; homogeneous uniform is balanced and sticky;
heterogeneous uniform balances the subscribers of a topic that share their subscription;
results are deterministic."""

from __future__ import annotations

import random
import uuid
from bisect import bisect_left

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.groups.assignors import (
    GroupSpec,
    MemberSubscription,
    RangeAssignor,
    SubscriptionType,
    TopicMetadata,
    UniformAssignor,
    range_order,
)
from groupcoord.coordinator.groups.assignors.uniform import _targets

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()
TOPICS = [uuid.UUID(int=1000 + i) for i in range(6)]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scenarios(draw, homogeneous: bool | None = None):
    """(members, previous target, partition counts)."""
    ntopics = draw(st.integers(1, len(TOPICS)))
    topics = TOPICS[:ntopics]
    counts = {t: draw(st.integers(0, 14)) for t in topics}
    nmembers = draw(st.integers(1, 9))
    ids = draw(
        st.lists(
            st.text("abcdefgh", min_size=1, max_size=3),
            min_size=nmembers,
            max_size=nmembers,
            unique=True,
        )
    )
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    if homogeneous:
        shared = frozenset(draw(st.sets(st.sampled_from(topics))))
        subs = {m: shared for m in ids}
    else:
        subs = {m: frozenset(draw(st.sets(st.sampled_from(topics)))) for m in ids}
    statics = draw(st.lists(st.booleans(), min_size=nmembers, max_size=nmembers))
    members = {
        m: MemberSubscription(f"i-{m}" if s else None, None, subs[m])
        for m, s in zip(ids, statics, strict=True)
    }
    # A valid previous target: each existing partition (of any topic, on the counts before
    # the topics grew) to one of the members, one that left, or nobody.
    holders = [*ids, "gone-1", "gone-2", None]
    previous: dict[str, dict[uuid.UUID, set[int]]] = {}
    for t in topics:
        before = draw(st.integers(0, counts[t]))
        for p in range(before):
            owner = draw(st.sampled_from(holders))
            if owner is not None:
                previous.setdefault(owner, {}).setdefault(t, set()).add(p)
    return members, previous, counts


def owners_of(result) -> dict[tuple[uuid.UUID, int], str]:
    out: dict[tuple[uuid.UUID, int], str] = {}
    for m, a in result.items():
        for t, ps in a.items():
            for p in ps:
                assert (t, p) not in out, f"{t}-{p} assigned twice"
                out[(t, p)] = m
    return out


def check_valid(result, members, counts) -> dict[tuple[uuid.UUID, int], str]:
    assert set(result) == set(members)
    got = owners_of(result)
    subscribed = set().union(*(s.subscribed_topic_ids for s in members.values()))
    assert set(got) == {(t, p) for t in subscribed for p in range(counts[t])}
    for (t, _), m in got.items():
        assert t in members[m].subscribed_topic_ids
    return got


def size(assignment) -> int:
    return sum(map(len, assignment.values()))


def shuffled(mapping: dict, seed: int) -> dict:
    items = list(mapping.items())
    random.Random(seed).shuffle(items)
    return dict(items)


@SETTINGS
@given(scenarios(), st.integers(0, 1000))
def test_uniform_valid_and_deterministic(scenario, seed):
    members, previous, counts = scenario
    result = UNIFORM.assign(GroupSpec(members, previous), TopicMetadata(counts))
    check_valid(result, members, counts)
    again = UNIFORM.assign(
        GroupSpec(shuffled(members, seed), shuffled(previous, seed)), TopicMetadata(counts)
    )
    assert again.to_dict() == result.to_dict()
    for m in members:
        assert result.partition_count(m) == size(result[m])
    # Members not reported as changed have exactly their previous target.
    unchanged = set(members) - set(result.changed_members())
    for m in unchanged:
        before = {t: ps for t, ps in previous.get(m, {}).items() if ps}
        assert dict(result[m]) == before


@SETTINGS
@given(scenarios(homogeneous=True))
def test_uniform_homogeneous_balanced_and_sticky(scenario):
    members, previous, counts = scenario
    group = GroupSpec(members, previous)
    assert group.subscription_type is SubscriptionType.HOMOGENEOUS
    result = UNIFORM.assign(group, TopicMetadata(counts))
    check_valid(result, members, counts)
    sizes = [size(result[m]) for m in members]
    assert max(sizes) - min(sizes) <= 1
    subscribed = next(iter(members.values())).subscribed_topic_ids
    for m in members:
        owned = {(t, p) for t, ps in previous.get(m, {}).items() if t in subscribed for p in ps}
        now = {(t, p) for t, ps in result[m].items() for p in ps}
        assert len(owned & now) == min(len(owned), len(now))
    # Same result whether or not the departed members' entries are in the spec.
    current_only = {m: a for m, a in previous.items() if m in members}
    other = UNIFORM.assign(GroupSpec(members, current_only), TopicMetadata(counts))
    assert other.to_dict() == result.to_dict()


@SETTINGS
@given(scenarios(), st.booleans())
def test_uniform_same_result_with_the_coordinators_hints(scenario, extra_topic):
    """GroupSpec.assignment_sizes / assignment_topics (what a consumer group maintains)
    change nothing but the cost: the same targets and the same changed members, whether
    the topics hint is exact or a superset."""
    members, previous, counts = scenario
    metadata = TopicMetadata(counts)
    plain = UNIFORM.assign(GroupSpec(members, previous), metadata)
    sizes = {m: size(a) for m, a in previous.items()}
    topics = {t for a in previous.values() for t in a}
    if extra_topic:
        topics.add(TOPICS[-1])
    hinted = UNIFORM.assign(GroupSpec(members, previous, None, sizes, topics), metadata)
    assert hinted.to_dict() == plain.to_dict()
    assert sorted(hinted.changed_members()) == sorted(plain.changed_members())


@SETTINGS
@given(scenarios(homogeneous=True), st.text("xyz", min_size=1, max_size=3), st.booleans())
def test_uniform_homogeneous_join_moves_only_what_balance_requires(scenario, new_id, static):
    members, previous, counts = scenario
    metadata = TopicMetadata(counts)
    stable = UNIFORM.assign(GroupSpec(members, previous), metadata).to_dict()
    subscribed = next(iter(members.values())).subscribed_topic_ids
    joined = dict(members)
    joined[new_id] = MemberSubscription("new" if static else None, None, subscribed)
    result = UNIFORM.assign(GroupSpec(joined, stable), metadata)
    check_valid(result, joined, counts)
    before = owners_of(stable)
    after = owners_of(result)
    moved = sum(1 for tp, m in after.items() if before.get(tp) != m)
    total = sum(counts[t] for t in subscribed)
    # Only the newcomer's partitions move, and it gets no more than its fair share.
    assert moved == size(result[new_id]) <= -(-total // len(joined))
    # And a member leaving again frees exactly its partitions.
    left = {m: s for m, s in joined.items() if m != new_id}
    back = UNIFORM.assign(GroupSpec(left, result.to_dict()), metadata)
    back_owners = owners_of(back)
    moved_back = sum(1 for tp, m in back_owners.items() if after.get(tp) != m)
    assert moved_back == size(result[new_id])


@SETTINGS
@given(scenarios(homogeneous=False))
def test_uniform_heterogeneous_near_balance(scenario):
    members, previous, counts = scenario
    result = UNIFORM.assign(GroupSpec(members, previous), TopicMetadata(counts))
    check_valid(result, members, counts)
    current_only = {m: a for m, a in previous.items() if m in members}
    other = UNIFORM.assign(GroupSpec(members, current_only), TopicMetadata(counts))
    assert other.to_dict() == result.to_dict()
    sizes = {m: size(result[m]) for m in members}
    for t in counts:
        subscribers = [m for m, s in members.items() if t in s.subscribed_topic_ids]
        if len({members[m].subscribed_topic_ids for m in subscribers}) == 1:
            loads = [sizes[m] for m in subscribers]
            assert max(loads) - min(loads) <= 1, (t, loads)
    # Each member keeps its previous partitions of still-subscribed topics unless it has
    # more than the least-loaded subscriber of such a topic + 1.
    for m, s in members.items():
        for t, ps in previous.get(m, {}).items():
            if t in s.subscribed_topic_ids and not ps <= result[m].get(t, frozenset()):
                least = min(sizes[o] for o, so in members.items() if t in so.subscribed_topic_ids)
                assert sizes[m] >= least


@SETTINGS
@given(scenarios(), st.integers(0, 1000))
def test_range_valid_contiguous_and_ordered(scenario, seed):
    members, previous, counts = scenario
    group = GroupSpec(members, previous)
    result = RANGE.assign(group, TopicMetadata(counts))
    check_valid(result, members, counts)
    order = range_order(group)
    for t, count in counts.items():
        subscribers = [m for m in order if t in members[m].subscribed_topic_ids]
        expected = 0
        for j, m in enumerate(subscribers):
            ps = sorted(result[m].get(t, ()))
            share = count // len(subscribers) + (j < count % len(subscribers))
            assert ps == list(range(expected, expected + share))
            expected += share
    again = RANGE.assign(GroupSpec(shuffled(members, seed), {}), TopicMetadata(counts))
    assert again.to_dict() == result.to_dict()


def targets_reference(owned: list[int], minq: int, extra: int) -> list[int]:
    """KAFKA-18688, member by member, as Kafka's loop does it."""
    n = len(owned)
    out = []
    left = extra
    for i, o in enumerate(owned):
        take = left > 0 and (o > minq or n - i <= left)
        out.append(minq + 1 if take else minq)
        left -= take
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=30), st.integers(0, 200))
def test_extra_slot_rule_closed_form(owned, total):
    n = len(owned)
    minq, extra = divmod(total, n)
    expected = targets_reference(owned, minq, extra)
    assert _targets(owned, minq, extra) == expected
    assert sum(expected) == total
    assert bisect_left(sorted(expected), minq) == 0

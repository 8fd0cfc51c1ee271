"""The range assignor (Kafka's server-side `RangeAssignor`, name "range").

Not sticky, deterministic. Members are ordered static members first (by instance id), then
dynamic members (by member id), so a static member that rejoins with a new member id keeps
its place, and its partitions. For each topic, its subscribers in that order take
consecutive ranges: with P partitions and n subscribers, each gets P // n, and the first
P % n one more. In a homogeneous group whose topics have equal partition counts, member i
therefore gets the same partition numbers of every topic (co-partitioning, for joins).

Example: A{T1(3), T2(3)}, B{T3(2)}, C{T2, T3} -> A: T1[0,1,2], T2[0,1]; B: T3[0]; C: T2[2], T3[1].

A member's ranges become frozensets only when its assignment is read (LazyAssignment).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping

from .spec import (
    Assignment,
    GroupSpec,
    LazyAssignment,
    PartitionAssignorError,
    SubscriptionType,
    TopicDescriber,
    TopicId,
)

RANGE_ASSIGNOR_NAME = "range"


def range_order(group: GroupSpec) -> list[str]:
    """Static members by instance id, then dynamic members by member id."""
    members = group.members
    static = sorted(
        (sub.instance_id, m) for m, sub in members.items() if sub.instance_id is not None
    )
    dynamic = sorted(m for m, sub in members.items() if sub.instance_id is None)
    return [m for _, m in static] + dynamic


def _counts(topic_ids: list[TopicId], topics: TopicDescriber) -> list[int]:
    counts = [topics.num_partitions(t) for t in topic_ids]
    for t, count in zip(topic_ids, counts, strict=True):
        if count < 0:
            raise PartitionAssignorError(f"Member is subscribed to a non-existent topic {t}")
    return counts


class RangeAssignor:
    """Kafka's `range` assignor."""

    name = RANGE_ASSIGNOR_NAME

    def assign(self, group: GroupSpec, topics: TopicDescriber) -> Assignment:
        if not group.members:
            return {}
        order = range_order(group)
        if group.subscription_type is SubscriptionType.HOMOGENEOUS:
            return _homogeneous(group, order, topics)
        return _heterogeneous(group, order, topics)


def _homogeneous(group: GroupSpec, order: list[str], topics: TopicDescriber) -> Assignment:
    # Member at rank r gets, of a topic with quota q and e extras, the range starting at
    # r * q + min(r, e), of q + (r < e) partitions: computed when read.
    n = len(order)
    topic_ids = sorted(group.members[order[0]].subscribed_topic_ids)
    quotas = [divmod(count, n) for count in _counts(topic_ids, topics)]
    base = sum(q for q, _ in quotas)
    extras = sorted(e for _, e in quotas)
    sizes = [base + len(extras) - bisect_right(extras, r) for r in range(n)]

    def build(r: int) -> Mapping[TopicId, frozenset[int]]:
        out: dict[TopicId, frozenset[int]] = {}
        for t, (q, e) in zip(topic_ids, quotas, strict=True):
            size = q + (r < e)
            if size:
                start = r * q + min(r, e)
                out[t] = frozenset(range(start, start + size))
        return out

    return LazyAssignment(order, build, sizes)


def _heterogeneous(group: GroupSpec, order: list[str], topics: TopicDescriber) -> Assignment:
    members = group.members
    subscribers: dict[TopicId, list[int]] = {}
    for r, m in enumerate(order):
        for t in members[m].subscribed_topic_ids:
            subscribers.setdefault(t, []).append(r)
    topic_ids = sorted(subscribers)
    counts = _counts(topic_ids, topics)
    ranges: list[list[tuple[TopicId, range]]] = [[] for _ in order]
    sizes = [0] * len(order)
    for t, count in zip(topic_ids, counts, strict=True):
        subs = subscribers[t]
        q, e = divmod(count, len(subs))
        start = 0
        for j, r in enumerate(subs):
            size = q + (j < e)
            if not size:
                break
            ranges[r].append((t, range(start, start + size)))
            sizes[r] += size
            start += size

    def build(r: int) -> Mapping[TopicId, frozenset[int]]:
        return {t: frozenset(span) for t, span in ranges[r]}

    return LazyAssignment(order, build, sizes)

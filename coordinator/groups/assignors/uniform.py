"""The uniform assignor (Kafka's `UniformAssignor`, the default of KIP-848): balance first,
then stickiness. Homogeneous groups (every member subscribes to the same topics) and
heterogeneous groups use different builders, as in Kafka.

Homogeneous theory of operation (Kafka's UniformHomogeneousAssignmentBuilder with the
KAFKA-18688 stability rule). With T partitions and N members, every member's target is
`T // N`, and `T % N` members get one more ("extra"). Members are visited in order (sorted
ids); a member takes an extra slot while extras remain if it already holds more than the
minimum, or if the members left (itself included) are no more than the extras left. It
keeps its previous partitions (of subscribed topics) up to its target, releasing its
highest ones beyond it; the released partitions and those nobody held are dealt, in order,
to the members below target. Sizes differ by at most one, a member loses partitions only
above its target, and a balanced previous target does not move at all.

Nothing here touches single partitions on the common paths, because in Python that alone
costs more than the whole budget (putting 500,000 ints in a set takes ~40 ms):

* Targets come from per-member counts (`len` of the previous sets) and the extra-slot rule is
  solved in closed form: if there is a first index `f` where (members left) <= (extras left),
  the members from `f` on all take an extra and before it those holding more than the
  minimum do (`f` by bisection over prefix counts); otherwise the first `T % N` members
  holding more than the minimum do.
* A member that keeps its whole previous target keeps the very set objects it came with.
* The unassigned partitions form a pool of segments (a `range` per topic nobody held, sorted
  lists of released partitions); the members below target take consecutive slices of it,
  located with prefix sums and bisection only when a member's assignment is read.
* Which partitions nobody holds is known without a scan when the counts add up: in a first
  assignment nobody holds anything; otherwise the spec's entries for members that left are
  exactly the freed partitions. Only when the counts do not add up (a new topic, no entries
  for the members that left) are the previous sets of the short topics unioned and
  complemented; a topic that only grew is recognised from its highest partition.

Heterogeneous theory of operation (Kafka's UniformHeterogeneousAssignmentBuilder): (1) each
member keeps its previous partitions of the topics it still subscribes to (checked per member
against its subscription class by object identity, without hashing UUIDs); (2) the
unassigned partitions are handed out topic by topic (topics sorted by partitions per
subscriber descending, then subscriber count ascending, then topic id), each to the
least-loaded subscriber: that is water-filling, computed in one step per topic (sort the
subscribers by load, find the level with prefix sums; at the last level the members first
by (load, index) get the remainder) and handing out contiguous slices; (3) per topic with two
or more subscribers, partitions move one at a time from the most-loaded holder (its highest
partition) to the least-loaded subscriber while their loads differ by more than one (two
heaps), over the topics again until a whole pass moves nothing or 16 passes ran.
Near-balanced: exact when the subscribers of a topic share their subscriptions, possibly off
by a little when subscriptions overlap partially.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, chain, compress, filterfalse, groupby, repeat
from operator import itemgetter

from .spec import (
    EMPTY_MEMBER_ASSIGNMENT,
    Assignment,
    GroupSpec,
    LazyAssignment,
    MemberAssignment,
    PartitionAssignorError,
    SubscriptionType,
    TopicDescriber,
    TopicId,
)

UNIFORM_ASSIGNOR_NAME = "uniform"
MAX_BALANCE_PASSES = 16
"""Kafka's MAX_ITERATION_COUNT for the heterogeneous balancing passes."""

_first = itemgetter(0)
_second = itemgetter(1)
_EMPTY: MemberAssignment = {}
_NOTHING: tuple[frozenset[int]] = (frozenset(),)

Seq = range | list[int]
"""A run of partitions of one topic: a range, or a sorted list."""


class UniformAssignor:
    """Kafka's `uniform` assignor: balance > stickiness."""

    name = UNIFORM_ASSIGNOR_NAME

    def assign(self, group: GroupSpec, topics: TopicDescriber) -> Assignment:
        if not group.members:
            return {}
        if group.subscription_type is SubscriptionType.HOMOGENEOUS:
            return assign_homogeneous(group, topics)
        return assign_heterogeneous(group, topics)


class _Inconsistent(Exception):
    """The previous target assigns a partition twice or a partition that does not exist."""


# ---------------------------------------------------------------------------------------------
# Shared helpers


def _partition_counts(topic_ids: Sequence[TopicId], topics: TopicDescriber) -> list[int]:
    counts = [topics.num_partitions(t) for t in topic_ids]
    for t, count in zip(topic_ids, counts, strict=True):
        if count < 0:
            raise PartitionAssignorError(
                f"Members are subscribed to topic {t} which doesn't exist in the topic metadata."
            )
    return counts


def _all_empty(member_ids: Sequence[str]) -> LazyAssignment:
    return LazyAssignment(member_ids, lambda _i: EMPTY_MEMBER_ASSIGNMENT, [0] * len(member_ids))


class _TopicIndex:
    """Topic id -> index into the sorted topic list. Looks topic objects up by identity first:
    uuid.UUID hashes in Python code, and the previous target usually reuses the UUID objects
    of the subscriptions."""

    __slots__ = ("by_id", "by_value")

    def __init__(self, topic_ids: Sequence[TopicId]) -> None:
        self.by_value = {t: k for k, t in enumerate(topic_ids)}
        self.by_id = {id(t): k for k, t in enumerate(topic_ids)}

    def get(self, topic_id: TopicId) -> int | None:
        k = self.by_id.get(id(topic_id))
        if k is None:
            k = self.by_value.get(topic_id)
        return k

    def __getitem__(self, topic_id: TopicId) -> int:
        k = self.by_id.get(id(topic_id))
        return self.by_value[topic_id] if k is None else k


def _departed_by_topic(
    group: GroupSpec, topic_ids: list[TopicId], counts: list[int], tindex: _TopicIndex
) -> list[set[int]] | None:
    """The partitions (of the given topics) that members which left held in the previous
    target (the spec's assignment entries for ids that are not members), per topic index."""
    amap = group.assignment
    # (filterfalse: a C loop of lookups, cheaper than a set difference of every key.)
    gone = list(filterfalse(group.members.__contains__, amap))
    if not gone:
        return None
    per_topic: list[set[int]] = [set() for _ in topic_ids]
    for m in gone:
        for t, s in amap[m].items():
            k = tindex.get(t)
            if k is not None:
                count = counts[k]
                per_topic[k].update(p for p in s if p < count)
    return per_topic


def _complement(claimed: list[Collection[int]], claimed_count: int, count: int) -> Seq:
    """The partitions of range(count) in none of `claimed` (which hold `claimed_count`
    partitions in all). Raises _Inconsistent on out-of-range partitions and on duplicates
    when it looks at the partitions one by one."""
    if not claimed_count:
        return range(count)
    highest = max(map(max, filter(None, claimed)))
    if highest >= count:
        raise _Inconsistent
    if highest == claimed_count - 1:
        # Without duplicates, the claimed partitions are exactly 0..highest (a topic that
        # grew): no need to look at them one by one.
        return range(claimed_count, count)
    union: set[int] = set().union(*claimed)
    if len(union) != claimed_count:
        raise _Inconsistent
    return list(filterfalse(union.__contains__, range(count)))


def _find_missing(
    group: GroupSpec | None,
    topic_ids: list[TopicId],
    counts: list[int],
    tindex: _TopicIndex,
    claimed_total: int,
    buckets: Callable[[], list[list[Collection[int]]]],
) -> dict[int, Seq]:
    """The partitions no current member holds in the previous target, per topic index.

    `claimed_total` counts the partitions the members hold (of these topics, subscribed or
    not); `buckets()` returns their sets per topic, for when the counts do not tell. `group`
    None: do not use the entries of departed members (after a repair)."""
    missing_total = sum(counts) - claimed_total
    if missing_total < 0:
        raise _Inconsistent
    if not missing_total:
        return {}
    if not claimed_total:
        # A first assignment: every topic, whole.
        return {k: range(count) for k, count in enumerate(counts) if count}
    departed = None if group is None else _departed_by_topic(group, topic_ids, counts, tindex)
    if departed is not None and sum(map(len, departed)) == missing_total:
        # The members that left held exactly what nobody holds now.
        return {k: sorted(s) for k, s in enumerate(departed) if s}
    out: dict[int, Seq] = {}
    for k, sets in enumerate(buckets()):
        count = counts[k]
        claimed = sum(map(len, sets))
        deficit = count - claimed
        if deficit < 0:
            raise _Inconsistent
        if not deficit:
            continue
        if departed is not None and len(departed[k]) == deficit:
            out[k] = sorted(departed[k])
        else:
            out[k] = _complement(sets, claimed, count)
    return out


class _Previous(Sequence[MemberAssignment]):
    """The members' previous targets, in member order, looked up when read."""

    __slots__ = ("amap", "member_ids")

    def __init__(self, amap: Mapping[str, MemberAssignment], member_ids: Sequence[str]) -> None:
        self.amap = amap
        self.member_ids = member_ids

    def __len__(self) -> int:
        return len(self.member_ids)

    def __getitem__(self, i: int) -> MemberAssignment:  # type: ignore[override]
        return self.amap.get(self.member_ids[i], _EMPTY)

    def __iter__(self) -> Iterator[MemberAssignment]:
        return map(self.amap.get, self.member_ids, repeat(_EMPTY))


class _Pool:
    """Unassigned partitions as consecutive segments (topic index, Seq)."""

    __slots__ = ("topics", "seqs", "ends")

    def __init__(self, segments: list[tuple[int, Seq]]) -> None:
        segments = [s for s in segments if len(s[1])]
        self.topics = [k for k, _ in segments]
        self.seqs = [s for _, s in segments]
        self.ends = list(accumulate(map(len, self.seqs)))

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def slice(self, start: int, end: int) -> Iterator[tuple[int, Seq]]:
        ends = self.ends
        j = bisect_right(ends, start)
        while start < end:
            seq = self.seqs[j]
            seg_start = ends[j] - len(seq)
            stop = min(end, ends[j])
            yield self.topics[j], seq[start - seg_start : stop - seg_start]
            start = stop
            j += 1


def _sanitize(
    topic_ids: list[TopicId],
    counts: list[int],
    tindex: _TopicIndex,
    prevs: list[MemberAssignment],
    subscriptions: Sequence[frozenset[TopicId]] | None = None,
) -> tuple[list[MemberAssignment], list[int], list[list[frozenset[int]]]]:
    """Repairs a previous target that is not one (a partition twice, or one that does not
    exist): the first holder in member order keeps a partition. Also drops the topics a
    member no longer subscribes to (returned per topic index: released). Slow, and only for
    such input."""
    seen: list[set[int]] = [set() for _ in topic_ids]
    released: list[list[frozenset[int]]] = [[] for _ in topic_ids]
    cleaned: list[MemberAssignment] = []
    changed: list[int] = []
    for i, d in enumerate(prevs):
        out: dict[TopicId, frozenset[int]] = {}
        modified = False
        for t, s in d.items():
            k = tindex.get(t)
            if k is None:
                modified = True
                continue
            count = counts[k]
            kept = frozenset(p for p in s if p < count and p not in seen[k])
            seen[k].update(kept)
            if len(kept) != len(s):
                modified = True
            if subscriptions is not None and t not in subscriptions[i]:
                modified = True
                if kept:
                    released[k].append(kept)
            elif kept:
                out[t] = kept
        cleaned.append(out if modified else d)
        if modified:
            changed.append(i)
    return cleaned, changed, released


# ---------------------------------------------------------------------------------------------
# Homogeneous


def assign_homogeneous(group: GroupSpec, topics: TopicDescriber) -> Assignment:
    """The uniform assignment of a group whose members all subscribe to the same topics."""
    member_ids = group.member_ids
    if not member_ids:
        return {}
    subscribed = group.members[member_ids[0]].subscribed_topic_ids
    if not subscribed:
        return _all_empty(member_ids)
    topic_ids = sorted(subscribed)
    counts = _partition_counts(topic_ids, topics)
    tindex = _TopicIndex(topic_ids)

    amap = group.assignment
    sizes, present = group.assignment_sizes, group.assignment_topics
    if sizes is not None and present is not None and subscribed.issuperset(present):
        # The coordinator's hints: the previous target holds only subscribed topics, and
        # its sizes are known. Nothing to normalize, and no previous set is looked at
        # unless it is read (the members above target, a member's new target).
        try:
            return _homogeneous(
                group,
                member_ids,
                topic_ids,
                counts,
                tindex,
                _Previous(amap, member_ids),
                [],
                list(map(sizes.get, member_ids, repeat(0))),
            )
        except _Inconsistent:
            pass  # repaired below, as without the hints
    prevs: list[MemberAssignment] = list(map(amap.get, member_ids, repeat(_EMPTY)))
    normalized: list[int] = []
    # Are all keys of the previous target the subscription's own topic objects? Looking at
    # the first key of each run of identical objects is enough.
    ids = set(map(id, subscribed))
    if not all(id(t) in ids for t, _ in groupby(chain.from_iterable(prevs))):
        # Compare by value, and drop the topics no longer subscribed.
        for i, d in enumerate(prevs):
            if any(t not in subscribed for t in d):
                prevs[i] = {t: s for t, s in d.items() if t in subscribed}
                normalized.append(i)
    try:
        return _homogeneous(group, member_ids, topic_ids, counts, tindex, prevs, normalized)
    except _Inconsistent:
        # Not a valid previous target: repair it (first holder wins), and look at every
        # partition nobody holds rather than trusting the departed members' entries.
        prevs, repaired, _ = _sanitize(topic_ids, counts, tindex, prevs)
        normalized = sorted(set(normalized).union(repaired))
        return _homogeneous(None, member_ids, topic_ids, counts, tindex, prevs, normalized)


def _homogeneous(
    group: GroupSpec | None,
    member_ids: Sequence[str],
    topic_ids: list[TopicId],
    counts: list[int],
    tindex: _TopicIndex,
    prevs: Sequence[MemberAssignment],
    normalized: list[int],
    owned: list[int] | None = None,
) -> Assignment:
    """`owned`: the members' previous sizes when known (GroupSpec.assignment_sizes)."""
    n = len(member_ids)
    minq, extra = divmod(sum(counts), n)

    if owned is None:
        # Partitions each member holds in the previous target (all of subscribed topics
        # now). Most hold partitions of one topic: one len per member, empty ones count 0.
        lens = [len(s) for d in prevs for s in (d.values() if d else _NOTHING)]
        if len(lens) == n:
            owned = lens
        else:
            nitems = [len(d) or 1 for d in prevs]
            prefix = list(accumulate(lens, initial=0))
            upto = [prefix[j] for j in accumulate(nitems)]
            owned = [b - a for a, b in zip([0, *upto[:-1]], upto, strict=True)]
    claimed = sum(owned)

    targets = _targets(owned, minq, extra)
    diff = [t - o for t, o in zip(targets, owned, strict=True)]
    moving = list(compress(range(n), diff))
    if min(diff) >= 0:
        unfilled, over = moving, []
    else:
        unfilled = [i for i in moving if diff[i] > 0]
        over = [i for i in moving if diff[i] < 0]

    # Members above target keep their lowest partitions (in topic order) and release the rest.
    kept_override: dict[int, dict[TopicId, Collection[int]]] = {}
    released: list[tuple[int, Seq]] = []
    for i in over:
        keep = targets[i]
        d = prevs[i]
        kept: dict[TopicId, Collection[int]] = {}
        for k, t in sorted((tindex[t], t) for t in d):
            s = d[t]
            if keep >= len(s):
                kept[t] = s
                keep -= len(s)
                continue
            ordered = sorted(s)
            if keep:
                kept[t] = frozenset(ordered[:keep])
            released.append((k, ordered[keep:]))
            keep = 0
        kept_override[i] = kept

    def buckets() -> list[list[Collection[int]]]:
        # Runs of the same topic object are grouped without hashing them.
        out: list[list[Collection[int]]] = [[] for _ in topic_ids]
        pairs = zip(chain.from_iterable(prevs), (s for d in prevs for s in d.values()), strict=True)
        for t, run in groupby(pairs, key=_first):
            out[tindex[t]].extend(map(_second, run))
        return out

    missing = _find_missing(group, topic_ids, counts, tindex, claimed, buckets)
    pool = _Pool(sorted(missing.items()) + released)
    fills = [diff[i] for i in unfilled]
    fill_ends = list(accumulate(fills))
    if (fill_ends[-1] if fill_ends else 0) != len(pool):
        raise _Inconsistent

    def build(i: int) -> Mapping[TopicId, frozenset[int]]:
        base: Mapping[TopicId, Collection[int]] | None = kept_override.get(i)
        if base is None:
            base = prevs[i]
        out: dict[TopicId, frozenset[int]] = {t: frozenset(s) for t, s in base.items() if s}
        pos = bisect_left(unfilled, i)
        if pos < len(unfilled) and unfilled[pos] == i:
            end = fill_ends[pos]
            for k, seq in pool.slice(end - fills[pos], end):
                t = topic_ids[k]
                got = out.get(t)
                out[t] = frozenset(seq) if got is None else got.union(seq)
        return out

    def changed() -> Iterable[int]:
        return sorted(set(moving).union(normalized))

    return LazyAssignment(member_ids, build, targets, changed)


def _targets(owned: list[int], minq: int, extra: int) -> list[int]:
    """Each member's target size under the KAFKA-18688 rule (see the module docstring)."""
    n = len(owned)
    if not extra:
        return [minq] * n
    plus = minq + 1
    # Members holding more than the minimum take an extra slot while extras remain...
    greedy = [o > minq for o in owned]
    before = list(accumulate(greedy, initial=0))  # greedy members in [0, i)

    # ...unless the members left are no more than the extras left: from that index `f` on,
    # everyone takes one. (n - i) - (extra - before[i]) never increases with i.
    def forced(i: int) -> bool:
        return n - i - extra + before[i] <= 0

    f = bisect_left(range(n + 1), True, key=forced)
    if f < n:
        targets = [minq + g for g in greedy[:f]]
        targets += [plus] * (n - f)
    else:
        bound = bisect_left(before, extra)  # the first `extra` greedy members are before it
        targets = [minq + g for g in greedy[:bound]]
        targets += [minq] * (n - bound)
    return targets


# ---------------------------------------------------------------------------------------------
# Heterogeneous


def assign_heterogeneous(group: GroupSpec, topics: TopicDescriber) -> Assignment:
    """The uniform assignment of a group whose members subscribe to different topics."""
    if not group.members:
        return {}
    builder = _Heterogeneous(group, topics)
    try:
        builder.keep(repair=False)
    except _Inconsistent:
        builder = _Heterogeneous(group, topics)
        builder.keep(repair=True)
    builder.assign_unassigned()
    builder.balance()
    return builder.result()


class _Heterogeneous:
    """State of one heterogeneous assignment. Member i's partitions of topic k are, unless
    balancing flattened them into `flat[(i, k)]` (a sorted list), its kept set
    `kept[i][topic_ids[k]]` plus the pieces (k, Seq) in `extra[i]` it was handed."""

    def __init__(self, group: GroupSpec, topics: TopicDescriber) -> None:
        self.group = group
        member_ids = self.member_ids = group.member_ids
        n = len(member_ids)
        members = group.members
        subs = self.subs = [members[m].subscribed_topic_ids for m in member_ids]

        # Members with identical subscriptions form a class; a topic's subscribers are the
        # members of the classes subscribing to it.
        class_of: dict[frozenset[TopicId], int] = {}
        classes: list[list[int]] = []
        self.member_class = member_class = [0] * n
        for i, s in enumerate(subs):
            c = class_of.get(s)
            if c is None:
                c = class_of[s] = len(classes)
                classes.append([])
            classes[c].append(i)
            member_class[i] = c
        class_subs = list(class_of)
        self.class_topic_ids = [set(map(id, s)) for s in class_subs]
        topic_ids = self.topic_ids = sorted(set().union(*class_subs))
        self.counts = _partition_counts(topic_ids, topics)
        self.tindex = _TopicIndex(topic_ids)
        topic_classes: list[list[int]] = [[] for _ in topic_ids]
        for c, s in enumerate(class_subs):
            for t in s:
                topic_classes[self.tindex.by_value[t]].append(c)
        by_signature: dict[tuple[int, ...], int] = {}
        self.subscribers: list[list[int]] = []
        self.signature: list[int] = []  # topics with the same subscribers share a signature
        subscriber_lists: list[list[int]] = []
        for cs in topic_classes:
            sig = by_signature.get(tuple(cs))
            if sig is None:
                sig = by_signature[tuple(cs)] = len(subscriber_lists)
                subscriber_lists.append(
                    classes[cs[0]]
                    if len(cs) == 1
                    else sorted(chain.from_iterable(classes[c] for c in cs))
                )
            self.signature.append(sig)
            self.subscribers.append(subscriber_lists[sig])

        self.loads = [0] * n
        self.kept: list[MemberAssignment] = []
        self.extra: list[list[tuple[int, Seq]]] = [[] for _ in range(n)]
        self.flat: dict[tuple[int, int], list[int]] = {}
        self.changed: set[int] = set()
        self.unassigned: dict[int, Seq] = {}
        self.version = 0  # bumped whenever balancing changes a load
        self.minmax_cache: dict[int, tuple[int, int, int]] = {}

    # -- (1) keep what is still subscribed, find what is unassigned -----------------------------

    def keep(self, repair: bool) -> None:
        amap = self.group.assignment
        topic_ids, counts, tindex = self.topic_ids, self.counts, self.tindex
        prevs: list[MemberAssignment] = list(map(amap.get, self.member_ids, repeat(_EMPTY)))
        loads = self.loads
        released: list[list[Collection[int]]] = [[] for _ in topic_ids]
        if repair:
            prevs, repaired, released = _sanitize(  # type: ignore[assignment]
                topic_ids, counts, tindex, prevs, self.subs
            )
            self.changed.update(repaired)
            for i, d in enumerate(prevs):
                loads[i] = sum(map(len, d.values()))
        else:
            class_topic_ids, member_class, subs = (
                self.class_topic_ids,
                self.member_class,
                self.subs,
            )
            for i, d in enumerate(prevs):
                if not d:
                    continue
                if class_topic_ids[member_class[i]].issuperset(map(id, d)):
                    loads[i] = sum(map(len, d.values()))
                    continue
                # Some topic is not subscribed, or is an equal but distinct UUID object.
                s_i = subs[i]
                kept: dict[TopicId, Iterable[int]] = {}
                for t, ps in d.items():
                    if t in s_i:
                        kept[t] = ps
                    elif ps:
                        k = tindex.get(t)
                        if k is not None:
                            released[k].append(ps)
                if len(kept) != len(d):
                    prevs[i] = kept  # type: ignore[assignment]
                    self.changed.add(i)
                loads[i] = sum(map(len, kept.values()))  # type: ignore[arg-type]
        self.kept = prevs

        def buckets() -> list[list[Collection[int]]]:
            out: list[list[Collection[int]]] = [list(r) for r in released]
            for d in prevs:
                for t, ps in d.items():
                    out[tindex[t]].append(ps)
            return out

        claimed = sum(loads) + sum(len(s) for r in released for s in r)
        missing = _find_missing(
            None if repair else self.group, topic_ids, counts, tindex, claimed, buckets
        )
        for k, freed in enumerate(released):
            if not freed:
                continue
            union = set().union(*freed)
            if len(union) != sum(map(len, freed)) or max(union) >= counts[k]:
                raise _Inconsistent
            gone = missing.get(k)
            if gone:
                union.update(gone)
            missing[k] = sorted(union)
        self.unassigned = missing

    # -- (2) hand out the unassigned partitions -------------------------------------------------

    def _topic_order(self, ks: Iterable[int]) -> list[int]:
        counts, subscribers, topic_ids = self.counts, self.subscribers, self.topic_ids
        return sorted(
            ks, key=lambda k: (-counts[k] / len(subscribers[k]), len(subscribers[k]), topic_ids[k])
        )

    def assign_unassigned(self) -> None:
        loads, extra = self.loads, self.extra
        for k in self._topic_order(self.unassigned):
            todo = self.unassigned[k]
            u = len(todo)
            order = sorted(self.subscribers[k], key=loads.__getitem__)
            levels = [loads[i] for i in order]
            prefix = list(accumulate(levels, initial=0))

            def cost(level: int, levels: list[int] = levels, prefix: list[int] = prefix) -> int:
                below = bisect_left(levels, level)
                return below * level - prefix[below]

            # The highest level all subscribers can be raised to with u partitions.
            lo, hi = levels[0], levels[0] + u
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if cost(mid) <= u:
                    lo = mid
                else:
                    hi = mid - 1
            level = lo
            remainder = u - cost(level)
            # Members below `level` are raised to it; the first `remainder` members at or
            # below it (by load at the start of the topic, then index) get one more.
            receivers = max(bisect_left(levels, level), remainder)
            recipients = order[:receivers]
            grants = [level - lv for lv in levels[:receivers]]
            for j in range(remainder):
                grants[j] += 1
            ends = list(accumulate(grants))
            for i, grant, end in zip(recipients, grants, ends, strict=True):
                loads[i] += grant
                extra[i].append((k, todo[end - grant : end]))
            self.changed.update(recipients)

    # -- (3) balance ----------------------------------------------------------------------------

    def _minmax(self, k: int) -> tuple[int, int]:
        sig = self.signature[k]
        cached = self.minmax_cache.get(sig)
        if cached is not None and cached[0] == self.version:
            return cached[1], cached[2]
        values = list(map(self.loads.__getitem__, self.subscribers[k]))
        low, high = min(values), max(values)
        self.minmax_cache[sig] = (self.version, low, high)
        return low, high

    def _holds(self, i: int, k: int) -> bool:
        flat = self.flat.get((i, k))
        if flat is not None:
            return bool(flat)
        if self.kept[i].get(self.topic_ids[k]):
            return True
        return any(kk == k for kk, _ in self.extra[i])

    def _flat(self, i: int, k: int) -> list[int]:
        key = (i, k)
        flat = self.flat.get(key)
        if flat is None:
            parts: list[Iterable[int]] = [p for kk, p in self.extra[i] if kk == k]
            s = self.kept[i].get(self.topic_ids[k])
            if s:
                parts.append(s)
            else:
                self.extra[i].append((k, range(0)))  # marks that (i, k) may hold some now
            flat = self.flat[key] = sorted(chain.from_iterable(parts))
        return flat

    def _balance_topic(self, k: int) -> int:
        low, high = self._minmax(k)
        if high - low <= 1:
            return 0
        loads = self.loads
        subscribers = self.subscribers[k]
        # Candidates only: whether a donor holds partitions of k is checked when it comes up.
        receivers = [(loads[i], i) for i in subscribers if loads[i] < high - 1]
        donors = [(-loads[i], -i) for i in subscribers if loads[i] > low + 1]
        heapq.heapify(receivers)
        heapq.heapify(donors)
        moved = 0
        while donors and receivers:
            neg_load, neg_d = donors[0]
            d = -neg_d
            if -neg_load != loads[d] or not self._holds(d, k):
                heapq.heappop(donors)
                continue
            load_r, r = receivers[0]
            if load_r != loads[r]:
                heapq.heappop(receivers)
                continue
            if loads[d] - load_r <= 1:
                break
            heapq.heappop(donors)
            heapq.heappop(receivers)
            partition = self._flat(d, k).pop()  # Kafka moves the donor's highest partition
            insort(self._flat(r, k), partition)
            loads[d] -= 1
            loads[r] += 1
            self.changed.add(d)
            self.changed.add(r)
            heapq.heappush(donors, (-loads[d], -d))
            heapq.heappush(receivers, (loads[d], d))
            heapq.heappush(donors, (-loads[r], -r))
            heapq.heappush(receivers, (loads[r], r))
            moved += 1
        if moved:
            self.version += 1
        return moved

    def balance(self) -> None:
        movable = self._topic_order(k for k, s in enumerate(self.subscribers) if len(s) >= 2)
        if not movable:
            return
        last = -1
        for _ in range(MAX_BALANCE_PASSES):
            for idx, k in enumerate(movable):
                if idx == last:
                    return
                if self._balance_topic(k) or last == -1:
                    last = idx

    # -- result ---------------------------------------------------------------------------------

    def _build(self, i: int) -> Mapping[TopicId, frozenset[int]]:
        kept = self.kept[i]
        if i not in self.changed:
            return {t: frozenset(s) for t, s in kept.items() if s}
        flat, tindex, topic_ids = self.flat, self.tindex, self.topic_ids
        given: dict[int, list[Seq]] = {}
        for k, piece in self.extra[i]:
            given.setdefault(k, []).append(piece)
        out: dict[TopicId, frozenset[int]] = {}
        for t, s in kept.items():
            if not s:
                continue
            k = tindex[t]
            flat_k = flat.get((i, k))
            if flat_k is not None:
                if flat_k:
                    out[t] = frozenset(flat_k)
                continue
            pieces = given.pop(k, None)
            out[t] = frozenset(s) if not pieces else frozenset(chain(s, *pieces))
        for k, pieces in given.items():
            t = topic_ids[k]
            if t in out:
                continue
            held: Collection[int] | None = flat.get((i, k))
            if held is None:
                held = pieces[0] if len(pieces) == 1 else list(chain.from_iterable(pieces))
            if held:
                out[t] = frozenset(held)
        return out

    def result(self) -> Assignment:
        changed = self.changed
        return LazyAssignment(self.member_ids, self._build, self.loads, lambda: sorted(changed))

"""The server-side assignor interface (Kafka's `ConsumerGroupPartitionAssignor`, KIP-848).

An assignor is a pure function of a `GroupSpec` (the members, their subscriptions and the
previous *target* assignment) and a `TopicDescriber` (partition counts): it returns the new
target assignment, member id -> topic id -> partitions. It keeps no state between calls, reads
no clock and draws no randomness, so the same input always gives the same output.

Assumptions the assignors share with Kafka's:

* The previous target assigns each partition to at most one member and only partitions that
  exist. That holds for every target an assignor produced, because Kafka never shrinks a
  topic and a re-created topic gets a new id. The uniform builders never look at single
  partitions on their fast paths, so they trust it as Kafka's do; they repair what they do
  notice (first holder in member order wins), e.g. counts that cannot add up.
* Entries of the previous target for topics a member no longer subscribes to are dropped.

Results are `Assignment`s: read-only mappings member id -> topic id -> frozenset of
partitions, holding every member of the group (members without partitions map to an empty
mapping). The assignors return a `LazyAssignment`, which keeps each member's assignment in
a compact form (the previous target's sets kept by reference, ranges, slices of a pool of
unassigned partitions) and builds a member's dict of frozensets only when it is read:
building all of them costs more than computing the assignment at 10,000 members, and a
caller that diffs the new target against the old one only needs the members whose
assignment changed, `LazyAssignment.changed_members()`.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

TopicId = uuid.UUID
MemberAssignment = Mapping[TopicId, AbstractSet[int]]
"""One member's (previous) target: topic id -> partitions (sets or frozensets)."""

Assignment = Mapping[str, Mapping[TopicId, frozenset[int]]]
"""An assignor's result: member id -> topic id -> partitions. Every member of the group is a
key; members with nothing assigned map to an empty mapping. `dict(result)` or
`LazyAssignment.to_dict()` makes a plain dict of it."""

EMPTY_MEMBER_ASSIGNMENT: Mapping[TopicId, frozenset[int]] = {}


class PartitionAssignorError(Exception):
    """The assignor cannot compute an assignment (Kafka's PartitionAssignorException; the
    coordinator answers UNKNOWN_SERVER_ERROR). Raised when a member subscribes to a topic the
    describer does not know."""


class SubscriptionType(enum.Enum):
    """Kafka's SubscriptionType. HOMOGENEOUS: every member subscribes to the same topics (B.10:
    the same names and no regex, or the same single regex and no names; both resolve to the
    same topic-id sets). Otherwise HETEROGENEOUS."""

    HOMOGENEOUS = "HOMOGENEOUS"
    HETEROGENEOUS = "HETEROGENEOUS"


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What the assignor knows of a member (Kafka's MemberSubscriptionSpec). `rack_id` is
    carried for completeness: no built-in assignor is rack aware."""

    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: frozenset[TopicId]


def subscription_type_of(members: Mapping[str, MemberSubscription]) -> SubscriptionType:
    """HOMOGENEOUS iff all members subscribe to the same topic ids (an empty group counts as
    homogeneous, as in Kafka)."""
    first: frozenset[TopicId] | None = None
    for sub in members.values():
        topics = sub.subscribed_topic_ids
        if first is None:
            first = topics
        elif topics is not first and topics != first:
            return SubscriptionType.HETEROGENEOUS
    return SubscriptionType.HOMOGENEOUS


class GroupSpec:
    """The input of an assignment (Kafka's GroupSpec).

    `members`: member id -> MemberSubscription. `assignment`: the group's previous target,
    member id -> topic id -> partitions; members without an entry had nothing. Pass the whole
    previous target: entries for ids that are no longer members (members that left) are not
    kept, but they say which partitions were freed, which spares the uniform assignor a scan
    of every previous set to find them (Kafka's GroupSpec answers isPartitionAssigned for the
    same reason). `subscription_type` is computed from the subscriptions unless given (a
    consumer group can maintain it incrementally, as Kafka does).

    Two optional hints, which a coordinator maintains as target records are replayed, spare
    the uniform assignor a pass over every member's previous sets (an incremental assignment
    otherwise costs more than a full one, which reads none): `assignment_sizes`, member id ->
    the number of partitions of its entry in `assignment` (exact; members without one may be
    left out), and `assignment_topics`, a collection holding every topic id that appears in
    `assignment` (more is allowed). They must agree with `assignment`: they are trusted.

    The spec does not copy its inputs: do not mutate them while an assignment is computed, or
    while a `LazyAssignment` computed from them is still read (it refers to the previous
    target's sets it kept).
    """

    __slots__ = (
        "members",
        "assignment",
        "subscription_type",
        "assignment_sizes",
        "assignment_topics",
        "_member_ids",
        "_owners",
    )

    def __init__(
        self,
        members: Mapping[str, MemberSubscription],
        assignment: Mapping[str, MemberAssignment] | None = None,
        subscription_type: SubscriptionType | None = None,
        assignment_sizes: Mapping[str, int] | None = None,
        assignment_topics: Collection[TopicId] | None = None,
    ) -> None:
        self.members = members
        self.assignment: Mapping[str, MemberAssignment] = assignment if assignment else {}
        self.assignment_sizes = assignment_sizes
        self.assignment_topics = assignment_topics
        self.subscription_type = (
            subscription_type if subscription_type is not None else subscription_type_of(members)
        )
        self._member_ids: tuple[str, ...] | None = None
        self._owners: dict[TopicId, dict[int, str]] | None = None

    @property
    def member_ids(self) -> tuple[str, ...]:
        """The member ids, sorted: the canonical iteration order of the assignors (Kafka
        iterates a HashMap; sorting makes equal specs give equal results whatever order the
        mappings were built in)."""
        ids = self._member_ids
        if ids is None:
            ids = self._member_ids = tuple(sorted(self.members))
        return ids

    def member_subscription(self, member_id: str) -> MemberSubscription:
        return self.members[member_id]

    def member_assignment(self, member_id: str) -> MemberAssignment:
        """The member's previous target; empty if it had none."""
        return self.assignment.get(member_id) or EMPTY_MEMBER_ASSIGNMENT

    def is_partition_assigned(self, topic_id: TopicId, partition: int) -> bool:
        """Whether a current member holds the partition in the previous target (Kafka's
        GroupSpec.isPartitionAssigned). Builds an index of all partitions on first use: meant
        for custom assignors and tests, the built-in ones do not need it."""
        owners = self._owners
        if owners is None:
            owners = self._owners = {}
            for member_id in self.members:
                for topic_id_, partitions in self.member_assignment(member_id).items():
                    by_partition = owners.setdefault(topic_id_, {})
                    for p in partitions:
                        by_partition.setdefault(p, member_id)
        return partition in owners.get(topic_id, ())


class TopicDescriber(Protocol):
    """Partition counts of the subscribed topics (Kafka's SubscribedTopicDescriber)."""

    def num_partitions(self, topic_id: TopicId) -> int:
        """The topic's partition count, or -1 if the topic is unknown."""
        ...


class TopicMetadata:
    """A TopicDescriber over a mapping topic id -> partition count."""

    __slots__ = ("partitions",)

    def __init__(self, partitions: Mapping[TopicId, int]) -> None:
        self.partitions = partitions

    def num_partitions(self, topic_id: TopicId) -> int:
        return self.partitions.get(topic_id, -1)


class PartitionAssignor(Protocol):
    """A server-side assignor. `name` is what ConsumerGroupHeartbeat's ServerAssignor and the
    `group.consumer.assignors` config name."""

    @property
    def name(self) -> str: ...

    def assign(self, group: GroupSpec, topics: TopicDescriber) -> Assignment:
        """The new target assignment. Raises PartitionAssignorError for a subscribed topic the
        describer does not know."""
        ...


class LazyAssignment(Mapping[str, Mapping[TopicId, frozenset[int]]]):
    """An Assignment whose per-member dicts are built on first read (then cached).

    `member_ids` fixes the iteration order; `build(i)` returns member i's assignment;
    `counts[i]` is its number of partitions; `changed()` returns the (sorted) indices of the
    members whose assignment may differ from their previous target (None: any may have).
    """

    __slots__ = ("_member_ids", "_index", "_build", "_counts", "_changed", "_cache")

    def __init__(
        self,
        member_ids: Sequence[str],
        build: Callable[[int], Mapping[TopicId, frozenset[int]]],
        counts: Sequence[int],
        changed: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        self._member_ids = member_ids
        self._index: dict[str, int] | None = None
        self._build = build
        self._counts = counts
        self._changed = changed
        self._cache: dict[int, Mapping[TopicId, frozenset[int]]] = {}

    def _position(self, member_id: str) -> int:
        index = self._index
        if index is None:
            index = self._index = {m: i for i, m in enumerate(self._member_ids)}
        return index[member_id]

    def __getitem__(self, member_id: str) -> Mapping[TopicId, frozenset[int]]:
        i = self._position(member_id)
        result = self._cache.get(i)
        if result is None:
            result = self._cache[i] = self._build(i)
        return result

    def __contains__(self, member_id: object) -> bool:
        try:
            self._position(member_id)  # type: ignore[arg-type]
        except (KeyError, TypeError):
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._member_ids)

    def __len__(self) -> int:
        return len(self._member_ids)

    def partition_count(self, member_id: str) -> int:
        """The member's number of assigned partitions, without building its assignment."""
        return self._counts[self._position(member_id)]

    def changed_members(self) -> list[str]:
        """The members whose assignment may differ from their previous target (a superset of
        those that do). Every other member's assignment equals its previous target (minus
        empty partition sets)."""
        if self._changed is None:
            return list(self._member_ids)
        member_ids = self._member_ids
        return [member_ids[i] for i in self._changed()]

    def to_dict(self) -> dict[str, dict[TopicId, frozenset[int]]]:
        """Every member's assignment as plain dicts."""
        return {m: dict(self[m]) for m in self._member_ids}

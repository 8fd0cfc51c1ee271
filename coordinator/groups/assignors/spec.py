"""The server-side assignor interface (Kafka's `ConsumerGroupPartitionAssignor`, KIP-848): the
public extension point for assignors of your own.

What an assignor is. An object with a `name` (what members ask for with ConsumerGroupHeartbeat's
ServerAssignor, i.e. a client's `group.remote.assignor`, and what `group_consumer_assignors`
lists) and `assign(group, topics) -> Assignment`, called whenever a consumer group needs a new
target assignment: a member joined or left, a subscription changed, a subscribed topic was
created, deleted or grew, or the group's preferred assignor changed. A group uses the
assignor most of its members ask for; when none asks, its `consumer.assignor` group config,
else the first of `group_consumer_assignors`.

What comes in.
* `group: GroupSpec`: `members` (member id -> MemberSubscription: instance id, rack id, the ids
  of the existing topics it subscribes to, by name or through its regex), `member_ids` (sorted:
  iterate in that order for results that do not depend on dict order), and the hints:
  `subscription_type` (HOMOGENEOUS when every member subscribes to the same topics, else
  HETEROGENEOUS), `assignment`: the group's previous *target* (member id -> topic id ->
  partitions; `member_assignment(m)` reads one member's, empty if none; entries of members
  that left say what they freed), `is_partition_assigned(t, p)`, and two size hints the
  built-in assignors use (`assignment_sizes`, `assignment_topics`).
* `topics: TopicDescriber`: `num_partitions(topic id)` (-1: unknown) and `topic_name(topic id)`
  of the subscribed topics. Partitions have no racks here (one node), so there is no
  `racksForPartition`; members' `rack_id` is passed as the client sent it.

What goes out. The new target: member id -> topic id -> frozenset of partitions (other
collections of ints are converted). Members left out get nothing. A partition goes to at most
one member, only to a member subscribed to its topic, and must exist. Raise
PartitionAssignorError (or anything) when no target can be computed.

The contract.
* Pure and deterministic: the same spec gives the same target; no clock, no randomness, no
  state kept between calls (the coordinator calls it for any group, any number of times, and
  may discard a result).
* Must not mutate its inputs (the coordinator hands assignors it did not ship read-only views).
* May run in a worker thread, and for assignors of your own always does: the coordinator
  computes their targets off its event loop, one computation per group at a time, while the
  group keeps its previous target (members keep heartbeating and consuming). CPU-bound pure
  Python is fine (the interpreter switches threads every 100 us); C code that holds the GIL
  for long is not. A result that breaks the rules above is refused like a failure: the group
  stays on its previous target, the error is logged with the group and assignor names, and
  the computation is tried again later (after 1 s, doubling up to 60 s while it keeps
  failing; README, Decisions). The built-in `uniform` and `range` run on the loop for small
  groups, and a failure of theirs fails the heartbeat with UNKNOWN_SERVER_ERROR, as Kafka.

How it is installed. A distribution declares the assignor as an entry point in the group
`groupcoord.assignors` (entry point name = the assignor's `name`; the object: a class or a
zero-argument factory returning the assignor, or the assignor itself), and the server lists
the name in `group_consumer_assignors` (the first is the default). The server loads them at
start-up (coordinator/assignor_plugins.py) and refuses to start when one is missing. `uniform`
and `range` are reserved. An example: tests/assignor_plugin/.

The built-in assignors' shared assumptions, as Kafka's:

* The previous target assigns each partition to at most one member and only partitions that
  exist. That holds for every target an assignor produced, because Kafka never shrinks a
  topic and a re-created topic gets a new id. The uniform builders never look at single
  partitions on their fast paths, so they trust it as Kafka's do; they repair what they do
  notice (first holder in member order wins), e.g. counts that cannot add up.
* Entries of the previous target for topics a member no longer subscribes to are dropped.

The built-in assignors' results hold every member of the group (members without partitions
map to an empty mapping), as a `LazyAssignment`, which keeps each member's
assignment in a compact form (the previous target's sets kept by reference, ranges, slices
of a pool of unassigned partitions) and builds a member's dict of frozensets only when it is
read: building all of them costs more than computing the assignment at 10,000 members, and
a caller that diffs the new target against the old one only needs the members whose
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
"""An assignor's result: member id -> topic id -> partitions. The built-in assignors give
every member of the group a key (an empty mapping for nothing); members an assignor leaves out
get nothing. `dict(result)` or `LazyAssignment.to_dict()` makes a plain dict of it."""

EMPTY_MEMBER_ASSIGNMENT: Mapping[TopicId, frozenset[int]] = {}


class PartitionAssignorError(Exception):
    """The assignor cannot compute an assignment (Kafka's PartitionAssignorException). The
    built-in assignors raise it when a member subscribes to a topic the describer does not
    know (the heartbeat then gets UNKNOWN_SERVER_ERROR, as in Kafka); for an assignor of your
    own it is one failure among others (see above: the group keeps its previous target)."""


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
    """The subscribed topics (Kafka's SubscribedTopicDescriber, plus names)."""

    def num_partitions(self, topic_id: TopicId) -> int:
        """The topic's partition count, or -1 if the topic is unknown."""
        ...

    def topic_name(self, topic_id: TopicId) -> str | None:
        """The topic's name, None if unknown (ours: Kafka's describer has no names)."""
        ...


class TopicMetadata:
    """A TopicDescriber over mappings topic id -> partition count (and -> name)."""

    __slots__ = ("partitions", "names")

    def __init__(
        self, partitions: Mapping[TopicId, int], names: Mapping[TopicId, str] | None = None
    ) -> None:
        self.partitions = partitions
        self.names: Mapping[TopicId, str] = names if names is not None else {}

    def num_partitions(self, topic_id: TopicId) -> int:
        return self.partitions.get(topic_id, -1)

    def topic_name(self, topic_id: TopicId) -> str | None:
        return self.names.get(topic_id)


class PartitionAssignor(Protocol):
    """A server-side assignor (see the module docstring for the contract). `name` is what
    ConsumerGroupHeartbeat's ServerAssignor (a client's `group.remote.assignor`) and the
    `group_consumer_assignors` setting name."""

    @property
    def name(self) -> str: ...

    def assign(self, group: GroupSpec, topics: TopicDescriber) -> Assignment:
        """The new target assignment: member id -> topic id -> frozenset of partitions
        (members left out get nothing). Pure; must not mutate `group`. Raises
        PartitionAssignorError (or anything else) when it cannot compute one."""
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

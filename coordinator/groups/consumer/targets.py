"""Target assignments of consumer groups (KIP-848, B.4.7): what the assignor is given and
the target it computes on the loop. A mixin of ConsumerGroupManager (manager.py).

The assignor's inputs are the members' subscriptions as the heartbeat's change leaves them
(regexes as last resolved, regex_refresh.py; the group's cached
MemberSubscription view, `_spec_members`), the previous target with the hints it takes
(`_previous_target`), and the assignor the members prefer. `_compute_target` runs it and
emits the TargetAssignmentMember records of the members whose target changed, then the
TargetAssignmentMetadata. The group's metadata hash (`metadata_hash`) is what moves the
group epoch when a subscribed topic changes. Large groups, and groups whose assignor is not
a built-in one, compute off the loop instead (offload.py).
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

from ..assignors import (
    GroupSpec,
    LazyAssignment,
    MemberSubscription,
    PartitionAssignor,
    checked_assignment,
    read_only_spec,
)
from ..assignors.spec import PartitionAssignorError, TopicDescriber
from ..result import Record
from ..topics import TopicImage
from .change import GroupChange, HeartbeatError
from .group import ConsumerGroup, TopicAssignment, most_popular, target_to_record
from .keys import assignment_key

if TYPE_CHECKING:
    from ..shard_view import ShardView


class TargetAssignment:
    """Mixin: the manager's shard, assignors and default assignor are set by its __init__."""

    shard: ShardView
    assignors: dict[str, PartitionAssignor]
    default_assignor: str

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.shard.consumer_groups

    def _subscribed_names(self, group: ConsumerGroup, change: GroupChange) -> set[str]:
        """Every topic name the group subscribes to once `change` applies."""
        counts = Counter(group.subscribed_names)
        regexes = regex_users(group, change)
        # By subscription first (members mostly share one: a mass expiry's slice is then a
        # dict step a member, not a Counter.subtract call), then by topic.
        moved: Counter[tuple[str, ...]] = Counter()
        for member_id, meta in change.metadata.items():
            old = group.metadata.get(member_id)
            if old is not None:
                moved[old.subscribed_topic_names] -= 1
            if meta is not None:
                moved[meta.subscribed_topic_names] += 1
        for subscribed, n in moved.items():
            for name in subscribed:
                counts[name] += n
        names = {name for name, n in counts.items() if n > 0}
        for regex in regexes:
            names.update(self._resolved(group, change, regex))
        return names

    def _resolved(self, group: ConsumerGroup, change: GroupChange, regex: str) -> tuple[str, ...]:
        if regex in change.resolved:
            return change.resolved[regex] or ()
        known = group.resolved_regexes.get(regex)
        return known.topics if known is not None else ()

    def metadata_hash(self, group: ConsumerGroup, change: GroupChange | None = None) -> int:
        """A stable 64-bit hash of the subscribed topics' names, ids and partition counts
        (Kafka hashes the same facts, plus racks, which we do not have): it changes when a
        subscribed topic is created, deleted, re-created or grows."""
        image = self.shard.topics
        change = change or GroupChange()
        digest = hashlib.blake2b(digest_size=8)
        any_topic = False
        for name in sorted(self._subscribed_names(group, change)):
            topic_id = image.topic_id(name)
            if topic_id is None:
                continue
            any_topic = True
            digest.update(f"{name}\0{topic_id}\0{image.num_partitions(topic_id)}\n".encode())
        if not any_topic:
            return 0
        return int.from_bytes(digest.digest(), "big", signed=True)

    def _subscribed_ids(
        self, group: ConsumerGroup, change: GroupChange, meta: ConsumerGroupMemberMetadataValue
    ) -> frozenset[uuid.UUID]:
        return topic_ids_of(
            meta, lambda regex: self._resolved(group, change, regex), self.shard.topics
        )

    def _compute_target(
        self,
        group: ConsumerGroup,
        change: GroupChange,
        group_epoch: int,
        now_ms: int,
        records: list[Record],
    ) -> Mapping[str, TopicAssignment]:
        """Run the group's assignor over every member (with `change` applied) and emit the
        members whose target changed plus the new TargetAssignmentMetadata (B.4.7)."""
        gid = group.group_id
        members, previous, assignor = self._target_inputs(group, change)
        try:
            assignment, member_records = compute_assignment(
                gid, members, previous, assignor, self.shard.topics
            )
        except PartitionAssignorError as e:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"Failed to compute a new target assignment for epoch {group_epoch}: {e}",
            ) from None
        records.extend(member_records)
        records.append(
            (
                ConsumerGroupTargetAssignmentMetadataKey(gid),
                ConsumerGroupTargetAssignmentMetadataValue(group_epoch, now_ms),
            )
        )
        self.shard.timer.cancel(assignment_key(gid))
        group.assignment_failures = group.assignment_retry_ms = 0
        return assignment

    def _target_inputs(
        self, group: ConsumerGroup, change: GroupChange
    ) -> tuple[dict[str, MemberSubscription], PreviousTarget, PartitionAssignor]:
        """The assignor's inputs: the members, the previous target, the assignor."""
        return (self._spec_members(group, change), *self._previous_target(group, change))

    def _previous_target(
        self, group: ConsumerGroup, change: GroupChange
    ) -> tuple[PreviousTarget, PartitionAssignor]:
        """The group's target with `change` applied (copies the caller may hand to another
        thread: members' targets are replaced, never mutated), plus the entries of departed
        members, with the hints the assignor takes (sizes, topics), and the assignor to use."""
        previous: dict[str, TopicAssignment] = dict(group.target)
        sizes = dict(group.target_sizes)
        topics = set(group.target_topics)  # a superset of the topics in `previous` will do
        departed = dict(group.departed_targets)
        moved = False
        for member_id, member_target in change.target.items():
            if member_target is None:
                held = previous.pop(member_id, None)
                sizes.pop(member_id, None)
                if held:
                    departed[member_id] = held
            else:
                previous[member_id] = member_target
                sizes[member_id] = sum(map(len, member_target.values()))
                topics.update(member_target)
                moved = True
        if moved:  # what departed members held may be someone's now (as in group.py)
            departed.clear()

        def gone(member_id: str) -> bool:
            if member_id in change.metadata:
                return change.metadata[member_id] is None
            return member_id not in group.metadata

        add_departed(previous, topics, departed, gone)
        return PreviousTarget(previous, sizes, topics), self._assignor(group, change)

    def _assignor(self, group: ConsumerGroup, change: GroupChange) -> PartitionAssignor:
        """The assignor most members ask for once `change` applies, else the default. A
        member's assignor may have left group.consumer.assignors since it asked for it (a
        restart with another config): the default one serves then."""
        default = self._default_assignor(group.group_id)
        name = preferred_assignor(group, change) or default
        return self.assignors.get(name) or self.assignors[default]

    def _default_assignor(self, group_id: str) -> str:
        """The group's consumer.assignor, else the first of group.consumer.assignors."""
        name = self.shard.consumer_settings(group_id).assignor
        return name if name in self.assignors else self.default_assignor

    def _spec_members(
        self, group: ConsumerGroup, change: GroupChange
    ) -> dict[str, MemberSubscription]:
        """The assignors' view of the members with `change` applied, from the group's cache
        (group.spec_members, rebuilt here when the topic image moved). Members with the same
        subscription share one id set, resolved once (the uniform assignor also recognises
        a homogeneous group by that identity)."""
        if change.resolved:  # regexes re-resolved now: nothing cached applies
            ids: dict[tuple[tuple[str, ...], str | None], frozenset[uuid.UUID]] = {}
            return {
                member_id: self._member_spec(group, change, meta, ids)
                for member_id, meta in metadata_after(group, change).items()
            }
        version = self.shard.topics.version
        if group.spec_members is None or group.spec_image_version != version:
            group.spec_ids = {}
            # In member-id order, the assignors' iteration order: members joining later are
            # appended, and the assignor's sort of a nearly sorted view is linear.
            metadata = group.metadata
            group.spec_members = {
                member_id: self._member_spec(group, change, metadata[member_id], group.spec_ids)
                for member_id in sorted(metadata)
            }
            group.spec_image_version = version
        if not change.metadata:
            return group.spec_members
        members = dict(group.spec_members)
        for member_id, meta in change.metadata.items():
            if meta is None:
                members.pop(member_id, None)
            else:
                members[member_id] = self._member_spec(group, change, meta, group.spec_ids)
        return members

    def _member_spec(
        self,
        group: ConsumerGroup,
        change: GroupChange,
        meta: ConsumerGroupMemberMetadataValue,
        ids_cache: dict[tuple[tuple[str, ...], str | None], frozenset[uuid.UUID]],
    ) -> MemberSubscription:
        key = (meta.subscribed_topic_names, meta.subscribed_topic_regex)
        ids = ids_cache.get(key)
        if ids is None:
            ids = ids_cache[key] = self._subscribed_ids(group, change, meta)
        return MemberSubscription(meta.instance_id, meta.rack_id, ids)


def metadata_after(
    group: ConsumerGroup, change: GroupChange
) -> dict[str, ConsumerGroupMemberMetadataValue]:
    metadata = dict(group.metadata)
    for member_id, meta in change.metadata.items():
        if meta is None:
            metadata.pop(member_id, None)
        else:
            metadata[member_id] = meta
    return metadata


def add_departed(
    previous: dict[str, TopicAssignment],
    topics: set[uuid.UUID],
    departed: Mapping[str, TopicAssignment],
    gone: Callable[[str], bool],
) -> None:
    """What members that are gone held (no one holds it now) into `previous`: entries of
    non-members tell the assignor what is unassigned (ConsumerGroup.departed_targets)."""
    for member_id, held in departed.items():
        if gone(member_id) and member_id not in previous:
            previous[member_id] = held
            topics.update(held)


def regex_users(group: ConsumerGroup, change: GroupChange) -> set[str]:
    """The regexes some member subscribes to once `change` applies."""
    if not group.regex_subscribers:
        # Nobody subscribes by regex now (no member's old regex to subtract): the new
        # ones only, no step per departing member of a mass expiry.
        return {
            meta.subscribed_topic_regex
            for meta in change.metadata.values()
            if meta is not None and meta.subscribed_topic_regex
        }
    counts = Counter(group.regex_subscribers)
    for member_id, meta in change.metadata.items():
        old = group.metadata.get(member_id)
        if old is not None and old.subscribed_topic_regex:
            counts[old.subscribed_topic_regex] -= 1
        if meta is not None and meta.subscribed_topic_regex:
            counts[meta.subscribed_topic_regex] += 1
    return {regex for regex, n in counts.items() if n > 0}


def preferred_assignor(group: ConsumerGroup, change: GroupChange) -> str | None:
    if not change.metadata:
        return group.preferred_assignor()
    counts = Counter(group.assignor_counts)
    for member_id, meta in change.metadata.items():
        old = group.metadata.get(member_id)
        if old is not None and old.server_assignor:
            counts[old.server_assignor] -= 1
        if meta is not None and meta.server_assignor:
            counts[meta.server_assignor] += 1
    return most_popular(counts)


class PreviousTarget(NamedTuple):
    """A group's previous target as the assignor gets it (GroupSpec's assignment and its
    hints): member id -> target, entries of departed members included; partitions per
    member entry; a superset of the topics in it."""

    target: dict[str, TopicAssignment]
    sizes: dict[str, int]
    topics: set[uuid.UUID]


def compute_assignment(
    group_id: str,
    members: dict[str, MemberSubscription],
    previous: PreviousTarget,
    assignor: PartitionAssignor,
    topics: TopicDescriber,
    plugin: bool = False,
) -> tuple[Mapping[str, TopicAssignment], list[Record]]:
    """The new target and the TargetAssignmentMember records of the members whose target
    changed (or who had none). Touches nothing but its arguments: it may run in a thread.
    A `plugin` assignor (not a built-in one) gets read-only inputs and its result is
    checked (assignors/checked.py). Raises what the assignor raises (PartitionAssignorError
    from the built-in ones), and InvalidAssignment for a plugin's invalid result."""
    if plugin:
        spec = read_only_spec(members, previous.target, previous.sizes, previous.topics)
        assignment: Mapping[str, TopicAssignment] = checked_assignment(
            assignor.assign(spec, topics), spec, topics
        )
    else:
        spec = GroupSpec(members, previous.target, None, previous.sizes, previous.topics)
        assignment = assignor.assign(spec, topics)
    # Only members whose target changed get a record (the lazy result knows which may
    # have: building every member's target costs more than assigning at 10,000 members).
    candidates = set(
        assignment.changed_members() if isinstance(assignment, LazyAssignment) else assignment
    )
    target = previous.target
    candidates.update(m for m in members if m not in target)
    records: list[Record] = []
    for member_id in sorted(candidates):
        new = assignment[member_id]
        if member_id in target and _same_target(new, target.get(member_id)):
            continue
        records.append(
            (ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), target_to_record(new))
        )
    return assignment, records


def topic_ids_of(
    meta: ConsumerGroupMemberMetadataValue,
    regex_topics: Callable[[str], tuple[str, ...]],
    image: TopicImage,
) -> frozenset[uuid.UUID]:
    """The ids of the existing topics a member subscribes to, by name or by its regex
    (`regex_topics` gives a regex's resolved topics; an unresolved one matches nothing)."""
    names: Iterable[str] = meta.subscribed_topic_names
    if meta.subscribed_topic_regex:
        names = (*names, *regex_topics(meta.subscribed_topic_regex))
    ids = (image.topic_id(name) for name in names)
    return frozenset(i for i in ids if i is not None)


def target_of(group: ConsumerGroup, change: GroupChange, member_id: str) -> TopicAssignment:
    if member_id in change.target:
        return change.target[member_id] or {}
    return group.target.get(member_id, {})


def _same_target(new: TopicAssignment, old: TopicAssignment | None) -> bool:
    if old is None:
        return not new
    return {t: p for t, p in new.items() if p} == {t: p for t, p in old.items() if p}

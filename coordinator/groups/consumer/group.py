"""A consumer group (KIP-848) as its records build it: Kafka's ConsumerGroup.

Theory of operation. Every field here changes only through `replay` of one of the
consumer-group records (ConsumerGroupMetadata, MemberMetadata, TargetAssignmentMetadata,
TargetAssignmentMember, CurrentMemberAssignment, RegularExpression, the legacy
PartitionMetadata), so a group rebuilt from its log is the live group. Handlers
(manager.py) read the group, compute new member snapshots and records, and leave the
change to the runtime's replay.

A member exists while its MemberMetadata does (`metadata`); its current assignment
(`members`, a ConsumerGroupMember snapshot) comes from its CurrentMemberAssignment record,
written in the same batch. `owners` indexes every partition held (assigned or pending
revocation) by its member: a partition held twice is a broken invariant, and replay refuses
it. The group's state (Empty/Assigning/Reconciling/Stable) is derived on demand: only
describe, list and metrics read it.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from typing import Any

from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    TopicPartitions,
)

from ..assignors.spec import MemberSubscription
from .member import ConsumerGroupMember

__all__ = [
    "ConsumerGroup",
    "ConsumerGroupState",
    "DoubleOwnership",
    "most_popular",
    "target_from_record",
    "target_to_record",
]

TopicAssignment = Mapping[uuid.UUID, frozenset[int]]

# New groups start at epoch 1 (Kafka 4.3, KIP-1263): the first bump gives 2.
INITIAL_GROUP_EPOCH = 1


class ConsumerGroupState(Enum):
    """Kafka's ConsumerGroup.ConsumerGroupState, by the name clients see."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class DoubleOwnership(RuntimeError):
    """Replay would give a partition to a second member: the log breaks the invariant that
    reconciliation keeps (Kafka throws IllegalStateException)."""


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = INITIAL_GROUP_EPOCH
        self.metadata_hash = 0
        self.assignment_epoch = INITIAL_GROUP_EPOCH
        self.assignment_timestamp_ms = 0
        self.metadata: dict[str, ConsumerGroupMemberMetadataValue] = {}
        self.members: dict[str, ConsumerGroupMember] = {}
        self.target: dict[str, TopicAssignment] = {}
        # The targets of members removed (target tombstones) since a target last moved:
        # partitions that no member's target holds. The assignor is handed them as the
        # entries of departed members, which tells it what is unassigned without scanning
        # every partition (uniform.py _find_missing: 47 ms -> 3 ms at 500,000 partitions).
        self.departed_targets: dict[str, TopicAssignment] = {}
        # Hints for the assignor, kept with `target` (GroupSpec.assignment_sizes and
        # assignment_topics): partitions per member, and members per topic in the target.
        self.target_sizes: dict[str, int] = {}
        self.target_topics: Counter[uuid.UUID] = Counter()
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.owners: dict[uuid.UUID, dict[int, str]] = {}  # topic -> partition -> member
        self.subscribed_names: Counter[str] = Counter()
        self.regex_subscribers: Counter[str] = Counter()
        self.resolved_regexes: dict[str, ConsumerGroupRegularExpressionValue] = {}
        self.has_legacy_partition_metadata = False
        # The topic-image version the metadata hash was last checked at (not persisted: a
        # loaded group checks again on its first heartbeat, as Kafka's refresh deadline).
        self.checked_image_version = -1
        self.dead = False
        self.assignor_counts: Counter[str] = Counter()  # members' ServerAssignor choices
        # Members using the classic protocol (derived from `metadata`): whether only they
        # remain after a removal is then O(removed), not O(members).
        self.classic_members = 0
        self.classic_protocols: Counter[str] = Counter()  # classic members supporting each
        # Members whose session (or rebalance, join, sync) timeout fired, waiting for the
        # next slice of removals (departures.py): member id -> the keys of the timers that
        # fired. Not replayed: a loaded group re-arms its timers.
        self.fencing: dict[str, list[str]] = {}
        # The group epoch whose target is being computed off the loop (not replayed).
        self.assigning_epoch: int | None = None
        # Moves at every replay that changes what a target is computed from (members'
        # metadata, targets, regexes): a snapshot taken over several events (offload.py)
        # is valid while it stays (not replayed).
        self.inputs_version = 0
        # Off-loop computations that failed in a row, and when the next may start (not
        # replayed: a loaded group tries again at once).
        self.assignment_failures = 0
        self.assignment_retry_ms = 0
        # Derived, not replayed: the assignors' view of the members (member id ->
        # MemberSubscription) at topic-image version `spec_image_version`, and the topic ids
        # of each distinct subscription (names, regex) at that version. Kept up to date by
        # metadata replay when a member's subscription is already known, dropped otherwise
        # (the manager rebuilds it: resolving names needs the topic image).
        self.spec_members: dict[str, MemberSubscription] | None = None
        self.spec_ids: dict[tuple[tuple[str, ...], str | None], frozenset[uuid.UUID]] = {}
        self.spec_image_version = -1

    # -- views -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.metadata)

    def is_empty(self) -> bool:
        return not self.metadata

    def member(self, member_id: str) -> ConsumerGroupMember | None:
        """The member's current snapshot, or None if it is not a member."""
        meta = self.metadata.get(member_id)
        if meta is None:
            return None
        member = self.members.get(member_id)
        if member is None:
            # Metadata without a current assignment yet (both come in one batch).
            member = ConsumerGroupMember(
                member_id,
                instance_id=meta.instance_id,
                rebalance_timeout_ms=meta.rebalance_timeout_ms,
            )
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member holding the partition, -1 if nobody does."""
        owner = self.owners.get(topic_id, {}).get(partition)
        if owner is None:
            return -1
        member = self.members.get(owner)
        return -1 if member is None else member.member_epoch

    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.metadata:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member_id in self.metadata:
            member = self.members.get(member_id)
            if member is None or not member.is_reconciled_to(self.assignment_epoch):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topic_names(self) -> set[str]:
        """Every topic name a member subscribes to, by name or through a resolved regex."""
        names = set(self.subscribed_names)
        for regex in self.regex_subscribers:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                names.update(resolved.topics)
        return names

    def preferred_assignor(self) -> str | None:
        """The ServerAssignor most members ask for, None if none (see most_popular)."""
        return most_popular(self.assignor_counts)

    def iter_members(
        self,
    ) -> Iterator[tuple[ConsumerGroupMemberMetadataValue, ConsumerGroupMember]]:
        for member_id, meta in self.metadata.items():
            member = self.member(member_id)
            assert member is not None
            yield meta, member

    # -- replay ----------------------------------------------------------------------------

    def replay_group_metadata(self, epoch: int, metadata_hash: int) -> None:
        self.group_epoch = epoch
        self.metadata_hash = metadata_hash

    def replay_member_metadata(
        self, member_id: str, value: ConsumerGroupMemberMetadataValue | None
    ) -> None:
        self.inputs_version += 1
        old = self.metadata.pop(member_id, None)
        if old is not None:
            self._unsubscribe(old)
            if (
                old.instance_id is not None
                and self.static_members.get(old.instance_id) == member_id
            ):
                del self.static_members[old.instance_id]
        if old is not None and old.server_assignor:
            self.assignor_counts[old.server_assignor] -= 1
        if old is not None and old.classic_member_metadata is not None:
            self.classic_members -= 1
            self.classic_protocols.subtract(_protocol_names(old))
        if value is None:
            # Kafka's removeMember: the member, its assignment and its ownerships go.
            self._set_current(member_id, None)
            if self.spec_members is not None:
                self.spec_members.pop(member_id, None)
            return
        if value.server_assignor:
            self.assignor_counts[value.server_assignor] += 1
        if value.classic_member_metadata is not None:
            self.classic_members += 1
            self.classic_protocols.update(_protocol_names(value))
        self._update_spec(member_id, value)
        self.metadata[member_id] = value
        self.subscribed_names.update(value.subscribed_topic_names)
        if value.subscribed_topic_regex:
            self.regex_subscribers[value.subscribed_topic_regex] += 1
        if value.instance_id is not None:
            self.static_members[value.instance_id] = member_id
        current = self.members.get(member_id)
        if current is not None and (
            current.instance_id != value.instance_id
            or current.rebalance_timeout_ms != value.rebalance_timeout_ms
        ):
            self.members[member_id] = _with_metadata(current, value)

    def _update_spec(self, member_id: str, meta: ConsumerGroupMemberMetadataValue) -> None:
        if self.spec_members is None:
            return
        ids = self.spec_ids.get((meta.subscribed_topic_names, meta.subscribed_topic_regex))
        if ids is None:
            self.spec_members = None  # a new subscription: the manager resolves it
        else:
            self.spec_members[member_id] = MemberSubscription(meta.instance_id, meta.rack_id, ids)

    def _unsubscribe(self, meta: ConsumerGroupMemberMetadataValue) -> None:
        names = self.subscribed_names
        for name in meta.subscribed_topic_names:  # (Counter.subtract is a Python loop too)
            left = names[name] - 1
            if left > 0:
                names[name] = left
            else:
                del names[name]
        regex = meta.subscribed_topic_regex
        if regex:
            self.regex_subscribers[regex] -= 1
            if self.regex_subscribers[regex] <= 0:
                del self.regex_subscribers[regex]

    def replay_current_assignment(
        self, member_id: str, value: ConsumerGroupCurrentMemberAssignmentValue | None
    ) -> None:
        if value is None:
            self._set_current(member_id, None)
            return
        meta = self.metadata.get(member_id)
        old = self.members.get(member_id)
        if old is not None:
            new = old.updated_with(value)
        else:
            new = ConsumerGroupMember(
                member_id,
                instance_id=meta.instance_id if meta else None,
                rebalance_timeout_ms=meta.rebalance_timeout_ms if meta else -1,
            ).updated_with(value)
        self._set_current(member_id, new)

    def _set_current(self, member_id: str, member: ConsumerGroupMember | None) -> None:
        """Install the member's snapshot and move the ownership index by the difference
        between its old and new partitions (a member keeps most of them from one record to
        the next: only what moved is touched)."""
        old = self.members.pop(member_id, None)
        if old is None and member is None:
            return  # (a removal's second record: the member is gone already)
        before = _held(old) if old is not None else {}
        after = _held(member) if member is not None else {}
        owners = self.owners
        for topic, parts in before.items():
            by_partition = owners.get(topic)
            if by_partition is None:
                continue
            gone = parts - after[topic] if topic in after else parts
            for p in gone:
                if by_partition.get(p) == member_id:
                    del by_partition[p]
            if not by_partition:
                del owners[topic]
        for topic, parts in after.items():
            by_partition = owners.setdefault(topic, {})
            new = parts - before[topic] if topic in before else parts
            for p in new:
                holder = by_partition.get(p)
                if holder is not None and holder != member_id:
                    raise DoubleOwnership(
                        f"group {self.group_id}: partition {topic}-{p} is held by "
                        f"{holder}, cannot also be given to {member_id}"
                    )
                by_partition[p] = member_id
        if member is not None:
            self.members[member_id] = member

    def replay_target_member(
        self, member_id: str, value: ConsumerGroupTargetAssignmentMemberValue | None
    ) -> None:
        self.inputs_version += 1
        held = self.target.pop(member_id, None)
        if held is not None:
            del self.target_sizes[member_id]
            topics = self.target_topics
            for topic in held:
                topics[topic] -= 1
                if not topics[topic]:
                    del topics[topic]
        if value is None:
            if held:
                self.departed_targets[member_id] = held
            return
        # Targets move now: what departed members held may be someone's from here on.
        # (Writers put a member's target tombstone before the targets that take over its
        # partitions, as a static replacement does; tests check departed targets are
        # held by no target: consumer_support.assert_target_hints.)
        self.departed_targets.clear()
        target = self.target[member_id] = target_from_record(value.topic_partitions)
        self.target_sizes[member_id] = sum(map(len, target.values()))
        self.target_topics.update(target.keys())

    def replay_target_metadata(self, assignment_epoch: int, timestamp_ms: int) -> None:
        self.assignment_epoch = assignment_epoch
        self.assignment_timestamp_ms = timestamp_ms

    def apply(self, key: Any, value: Any) -> None:
        """Replay one of this group's records (the group's own creation and deletion, by
        its ConsumerGroupMetadata, are the shard's part). Dispatched on the key's exact
        type (record keys are final classes): a mass expiry replays three member records
        per member, and a chain of isinstance tests was a third of this call's lines."""
        _APPLY[type(key)](self, key, value)

    def _apply_group_metadata(self, key: ConsumerGroupMetadataKey, value: Any) -> None:
        if value is not None:
            self.replay_group_metadata(value.epoch, value.metadata_hash)

    def _apply_member_metadata(self, key: ConsumerGroupMemberMetadataKey, value: Any) -> None:
        self.replay_member_metadata(key.member_id, value)

    def _apply_current(self, key: ConsumerGroupCurrentMemberAssignmentKey, value: Any) -> None:
        self.replay_current_assignment(key.member_id, value)

    def _apply_target_member(self, key: ConsumerGroupTargetAssignmentMemberKey, value: Any) -> None:
        self.replay_target_member(key.member_id, value)

    def _apply_target_metadata(
        self, key: ConsumerGroupTargetAssignmentMetadataKey, value: Any
    ) -> None:
        if value is None:
            self.replay_target_metadata(-1, 0)
        else:
            self.replay_target_metadata(value.assignment_epoch, value.assignment_timestamp)

    def _apply_regex(self, key: ConsumerGroupRegularExpressionKey, value: Any) -> None:
        self.replay_regex(key.regular_expression, value)

    def _apply_partition_metadata(self, key: ConsumerGroupPartitionMetadataKey, value: Any) -> None:
        self.has_legacy_partition_metadata = value is not None

    def replay_regex(self, regex: str, value: ConsumerGroupRegularExpressionValue | None) -> None:
        self.inputs_version += 1
        known = self.resolved_regexes.get(regex)
        if value is None or known is None or known.topics != value.topics:
            # The members' resolved subscriptions change (a refresh finding the same topics
            # keeps the assignors' cached view).
            self.spec_members = None
            self.spec_ids = {}
        if value is None:
            self.resolved_regexes.pop(regex, None)
        else:
            self.resolved_regexes[regex] = value


# ConsumerGroup.apply's dispatch: each consumer-group record key type to its replay.
_APPLY: dict[type, Callable[[ConsumerGroup, Any, Any], None]] = {
    ConsumerGroupMetadataKey: ConsumerGroup._apply_group_metadata,
    ConsumerGroupMemberMetadataKey: ConsumerGroup._apply_member_metadata,
    ConsumerGroupCurrentMemberAssignmentKey: ConsumerGroup._apply_current,
    ConsumerGroupTargetAssignmentMemberKey: ConsumerGroup._apply_target_member,
    ConsumerGroupTargetAssignmentMetadataKey: ConsumerGroup._apply_target_metadata,
    ConsumerGroupRegularExpressionKey: ConsumerGroup._apply_regex,
    ConsumerGroupPartitionMetadataKey: ConsumerGroup._apply_partition_metadata,
}


def most_popular(counts: Counter[str]) -> str | None:
    """The ServerAssignor most members ask for, None if none. Ties go to the smallest name:
    the choice must depend on the members' choices only, not on the order their records
    were replayed in (which a metadata update changes), or a replayed group could disagree
    with the live one on the assignor it last used."""
    live = [name for name, n in counts.items() if n > 0]
    return min(live, key=lambda name: (-counts[name], name)) if live else None


def _held(member: ConsumerGroupMember) -> dict[uuid.UUID, set[int]]:
    """topic -> partitions the member holds (assigned or pending revocation)."""
    held = {topic: set(parts) for topic, parts in member.assigned_partitions.items()}
    for topic, parts in member.partitions_pending_revocation.items():
        held.setdefault(topic, set()).update(parts)
    return held


def target_to_record(target: TopicAssignment) -> ConsumerGroupTargetAssignmentMemberValue:
    """A member's target as its TargetAssignmentMember value (topics by id, sorted)."""
    return ConsumerGroupTargetAssignmentMemberValue(
        tuple(
            TopicPartitions(topic_id, tuple(sorted(target[topic_id])))
            for topic_id in sorted(target, key=lambda t: t.int)
            if target[topic_id]
        )
    )


def target_from_record(topics: tuple[TopicPartitions, ...]) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in topics:
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def _protocol_names(meta: ConsumerGroupMemberMetadataValue) -> set[str]:
    """The protocols a classic member supports (each once)."""
    classic = meta.classic_member_metadata
    assert classic is not None
    return {p.name for p in classic.supported_protocols}


def _with_metadata(
    member: ConsumerGroupMember, meta: ConsumerGroupMemberMetadataValue
) -> ConsumerGroupMember:
    return dataclasses.replace(
        member, instance_id=meta.instance_id, rebalance_timeout_ms=meta.rebalance_timeout_ms
    )

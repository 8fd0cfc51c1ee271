"""Reconciliation of a member's current assignment towards its target: Kafka's
CurrentAssignmentBuilder (trunk, with KIP-1251 assignment epochs), as a pure function.

Theory of operation. The assignor gives every member a *target* assignment stamped with
the target assignment epoch. A member may not simply jump to it: a partition must never be
used by two consumers at once. So reconciliation is revoke-then-assign:

* Partitions the member holds but the target does not (``revoke = current - target``) are
  moved to *pending revocation*, and the member stays at its epoch in
  UNREVOKED_PARTITIONS until a heartbeat's owned partitions (``TopicPartitions``) no longer
  list any of them. An omitted owned list (null: "unchanged") counts as still owning them.
* Only then does the member move to the target epoch and get the target partitions that
  are free (``current_partition_epoch == -1``; a partition it is itself revoking counts as
  free, since it just released it). Partitions still owned by another member are withheld:
  the member sits at the target epoch in UNRELEASED_PARTITIONS and picks them up on later
  heartbeats, as their owners release them.
* Revocations the client has already made (it no longer reports them) skip the wait.
* A newer target arriving mid-way simply restarts the computation from the member's
  current state: UNREVOKED members recompute once they have revoked, UNRELEASED members on
  every heartbeat.

Assignment epochs: a partition newly added to the assigned set gets the target epoch (the
member epoch it is assigned at); retained and pending-revocation partitions keep theirs.
A static member's temporary leave (epoch -2) resets them all to 0
(:func:`static_member_temporary_leave`).

Subscriptions: a topic the member is no longer subscribed to is treated as absent from its
target even if the (possibly stale) target still has it. Pass ``subscribed_topic_ids``
(see :func:`subscribed_topic_ids`; an unresolved regex matches nothing) to apply that;
None means "every topic is subscribed". ``enforce_subscription_consistency`` makes a member
already at the target epoch drop the partitions of unsubscribed topics straight away.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import TypeAlias

from groupcoord.coordinator.groups.consumer.member import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupMember,
    MemberState,
    PartitionEpochs,
)
from groupcoord.protocol.errors import ErrorCode

__all__ = [
    "FencedMemberEpoch",
    "OwnedPartitions",
    "PartitionEpochFn",
    "UNKNOWN_STATE_MESSAGE",
    "compute_next_assignment",
    "replace_static_member",
    "reset_assignment_epochs",
    "static_member_temporary_leave",
    "subscribed_topic_ids",
]

# Owned partitions from a heartbeat: {topic_id: partitions} or [(topic_id, partitions)];
# None means the request did not say (TopicPartitions null).
OwnedPartitions: TypeAlias = (
    Mapping[uuid.UUID, Iterable[int]] | Iterable[tuple[uuid.UUID, Iterable[int]]]
)
# (topic_id, partition) -> the epoch of the member owning it, or -1 if free.
PartitionEpochFn: TypeAlias = Callable[[uuid.UUID, int], int]

UNKNOWN_STATE_MESSAGE = (
    "The consumer group member is in a unknown state. "
    "The member must abandon all its partitions and rejoin."
)


class FencedMemberEpoch(Exception):
    """The member must rejoin (heartbeat error FENCED_MEMBER_EPOCH, message in args[0])."""

    error = ErrorCode.FENCED_MEMBER_EPOCH

    def __init__(self, message: str = UNKNOWN_STATE_MESSAGE) -> None:
        super().__init__(message)
        self.message = message


def compute_next_assignment(
    member: ConsumerGroupMember,
    target_assignment_epoch: int,
    target_partitions: Mapping[uuid.UUID, Collection[int]],
    owned_partitions_reported: OwnedPartitions | None,
    current_partition_epoch: PartitionEpochFn,
    *,
    subscribed_topic_ids: AbstractSet[uuid.UUID] | None = None,
    enforce_subscription_consistency: bool = False,
) -> ConsumerGroupMember:
    """The member's next state (Kafka's ``CurrentAssignmentBuilder.build``).

    Returns ``member`` itself when nothing changes (so ``is`` tells whether a record is
    due). Raises :class:`FencedMemberEpoch` for a member in the UNKNOWN state that still
    reports owned partitions (or does not say).
    """
    new = _build(
        member,
        target_assignment_epoch,
        target_partitions,
        owned_partitions_reported,
        current_partition_epoch,
        subscribed_topic_ids,
        enforce_subscription_consistency,
    )
    return member if new is member or new == member else new


def _build(
    member: ConsumerGroupMember,
    target_assignment_epoch: int,
    target_partitions: Mapping[uuid.UUID, Collection[int]],
    owned_partitions_reported: OwnedPartitions | None,
    current_partition_epoch: PartitionEpochFn,
    subscribed_topic_ids: AbstractSet[uuid.UUID] | None,
    enforce_subscription_consistency: bool,
) -> ConsumerGroupMember:
    owned, reported_any = _owned_index(owned_partitions_reported)
    state = member.state

    if state is MemberState.STABLE:
        # A newer target: reconcile towards it. Otherwise only keep the assignment
        # consistent with the subscription, if asked to.
        if member.member_epoch != target_assignment_epoch:
            return _next_assignment(
                member,
                member.member_epoch,
                target_assignment_epoch,
                target_partitions,
                owned,
                current_partition_epoch,
                subscribed_topic_ids,
            )
        if enforce_subscription_consistency:
            return _drop_unsubscribed(member, member.member_epoch, owned, subscribed_topic_ids)
        return member

    if state is MemberState.UNREVOKED_PARTITIONS:
        # Wait until the client has revoked everything pending; partitions of topics it
        # unsubscribed from may be added to the pending set meanwhile.
        if _owns_any(owned, member.partitions_pending_revocation):
            if enforce_subscription_consistency:
                return _drop_unsubscribed(member, member.member_epoch, owned, subscribed_topic_ids)
            return member
        return _next_assignment(
            member,
            member.member_epoch,
            target_assignment_epoch,
            target_partitions,
            owned,
            current_partition_epoch,
            subscribed_topic_ids,
        )

    if state is MemberState.UNRELEASED_PARTITIONS:
        # Picks up withheld partitions as their owners release them.
        return _next_assignment(
            member,
            member.member_epoch,
            target_assignment_epoch,
            target_partitions,
            owned,
            current_partition_epoch,
            subscribed_topic_ids,
        )

    # UNKNOWN: written by a newer coordinator we were downgraded from. Fence the member so
    # that it rejoins with nothing, then reconcile it from scratch at the target epoch.
    if owned is None or reported_any:
        raise FencedMemberEpoch()
    return _next_assignment(
        member,
        target_assignment_epoch,
        target_assignment_epoch,
        target_partitions,
        owned,
        current_partition_epoch,
        subscribed_topic_ids,
    )


def _owned_index(
    reported: OwnedPartitions | None,
) -> tuple[dict[uuid.UUID, set[int]] | None, bool]:
    """({topic: partitions} without empty topics, or None; whether the list had entries)."""
    if reported is None:
        return None, False
    items = list(reported.items() if isinstance(reported, Mapping) else reported)
    out: dict[uuid.UUID, set[int]] = {}
    for topic, partitions in items:
        out.setdefault(topic, set()).update(partitions)
    return {topic: parts for topic, parts in out.items() if parts}, bool(items)


def _owns_any(owned: dict[uuid.UUID, set[int]] | None, partitions: PartitionEpochs) -> bool:
    """Kafka's ownsRevokedPartitions: does the client still report any of ``partitions``?
    Not knowing (owned None) counts as yes."""
    if owned is None:
        return True
    for topic, reported in owned.items():
        pending = partitions.get(topic)
        if pending and not reported.isdisjoint(pending):
            return True
    return False


def _drop_unsubscribed(
    member: ConsumerGroupMember,
    member_epoch: int,
    owned: dict[uuid.UUID, set[int]] | None,
    subscribed: AbstractSet[uuid.UUID] | None,
) -> ConsumerGroupMember:
    """Kafka's updateCurrentAssignment: move the partitions of unsubscribed topics to
    pending revocation (UNREVOKED_PARTITIONS), or drop them outright if the client already
    released them. Unchanged member if every assigned topic is still subscribed."""
    if subscribed is None:
        return member
    removed = [topic for topic in member.assigned_partitions if topic not in subscribed]
    if not removed:
        return member
    assigned = {
        topic: epochs for topic, epochs in member.assigned_partitions.items() if topic in subscribed
    }
    pending = {
        topic: dict(epochs) for topic, epochs in member.partitions_pending_revocation.items()
    }
    for topic in removed:
        pending.setdefault(topic, {}).update(member.assigned_partitions[topic])
    if pending and _owns_any(owned, pending):
        return dataclasses.replace(
            member.update_member_epoch(member_epoch),
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=assigned,
            partitions_pending_revocation=pending,
        )
    # Already released by the client: shrink in place, state unchanged.
    return dataclasses.replace(
        member.update_member_epoch(member_epoch), assigned_partitions=assigned
    )


def _next_assignment(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target_partitions: Mapping[uuid.UUID, Collection[int]],
    owned: dict[uuid.UUID, set[int]] | None,
    current_partition_epoch: PartitionEpochFn,
    subscribed: AbstractSet[uuid.UUID] | None,
) -> ConsumerGroupMember:
    """Kafka's computeNextAssignment(memberEpoch, member.assignedPartitions())."""
    has_unreleased = False
    new_assigned: dict[uuid.UUID, dict[int, int]] = {}
    new_revoking: dict[uuid.UUID, dict[int, int]] = {}
    to_assign: dict[uuid.UUID, list[int]] = {}

    current_all = member.assigned_partitions
    own_pending = member.partitions_pending_revocation
    # Deterministic iteration (Kafka's is HashSet order; the result does not depend on it).
    topics = sorted(set(target_partitions) | set(current_all), key=lambda t: t.int)
    for topic in topics:
        target: Collection[int] = target_partitions.get(topic, ())
        if subscribed is not None and topic not in subscribed:
            target = ()  # no longer subscribed: revoke even if the stale target has it
        target_set = target if isinstance(target, AbstractSet) else set(target)
        current = current_all.get(topic, {})

        kept = {p: e for p, e in current.items() if p in target_set}
        revoking = {p: e for p, e in current.items() if p not in target_set}
        self_revoking = own_pending.get(topic, {})
        assignable = []
        for p in sorted(target_set):
            if p in kept:
                continue
            # Owned elsewhere -> withheld; a partition this member is itself revoking is
            # not "unreleased" (only one member can own a partition at a time).
            if current_partition_epoch(topic, p) != -1 and p not in self_revoking:
                has_unreleased = True
            else:
                assignable.append(p)

        if kept:
            new_assigned[topic] = kept
        if revoking:
            new_revoking[topic] = revoking
        if assignable:
            to_assign[topic] = assignable

    if new_revoking and _owns_any(owned, new_revoking):
        # Revoke first: stay at the current epoch until the client acknowledges.
        return dataclasses.replace(
            member.update_member_epoch(member_epoch),
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned_partitions=new_assigned,
            partitions_pending_revocation=new_revoking,
        )
    for topic, partitions in to_assign.items():
        epochs = new_assigned.setdefault(topic, {})
        for p in partitions:
            epochs[p] = target_epoch
    return dataclasses.replace(
        member.update_member_epoch(target_epoch),
        state=MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE,
        assigned_partitions=new_assigned,
        partitions_pending_revocation={},
    )


# -------------------------------------------------------------------- static membership


def reset_assignment_epochs(member: ConsumerGroupMember) -> ConsumerGroupMember:
    """Every assigned and pending-revocation partition's assignment epoch set to 0 (KIP-1251:
    a static member's temporary leave; its replacement inherits the zeros)."""

    def zeroed(partitions: PartitionEpochs) -> dict[uuid.UUID, dict[int, int]]:
        return {topic: dict.fromkeys(epochs, 0) for topic, epochs in partitions.items()}

    return dataclasses.replace(
        member,
        assigned_partitions=zeroed(member.assigned_partitions),
        partitions_pending_revocation=zeroed(member.partitions_pending_revocation),
    )


def static_member_temporary_leave(member: ConsumerGroupMember) -> ConsumerGroupMember:
    """Heartbeat epoch -2: member kept at epoch -2 (previous epoch untouched, as Kafka's
    setMemberEpoch), pending revocation cleared, assignment epochs reset to 0."""
    left = dataclasses.replace(
        member,
        member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
        partitions_pending_revocation={},
    )
    return reset_assignment_epochs(left)


def replace_static_member(old: ConsumerGroupMember, new_member_id: str) -> ConsumerGroupMember:
    """A static member rejoining under a new member id takes over the old one's state at
    MemberEpoch 0 / PreviousMemberEpoch 0 (assignment epochs are whatever the old had: 0
    after a temporary leave)."""
    return dataclasses.replace(
        old, member_id=new_member_id, member_epoch=0, previous_member_epoch=0
    )


# -------------------------------------------------------------------- subscriptions


def subscribed_topic_ids(
    subscribed_topic_names: Iterable[str],
    subscribed_topic_regex: str | None,
    resolved_regular_expressions: Mapping[str, Iterable[str]],
    topic_id: Callable[[str], uuid.UUID | None],
) -> frozenset[uuid.UUID]:
    """The ids of the topics a member is subscribed to: its names plus its regex's resolved
    topics (an unresolved regex matches nothing, to be conservative); topics unknown to
    ``topic_id`` (which returns None for them) are left out."""
    names = set(subscribed_topic_names)
    if subscribed_topic_regex:
        names.update(resolved_regular_expressions.get(subscribed_topic_regex, ()))
    ids = (topic_id(name) for name in names)
    return frozenset(i for i in ids if i is not None)

"""Group events derived from the records a shard writes (events.py has the theory): the
same functions run when a record is written and when it is replayed at load.

Classic groups: a GroupMetadata value is compared with the group's previous one (members
that appeared or went, a new generation = a completed rebalance, no members = emptied; the
partitions moved come from the consumer-protocol assignments of both); a tombstone is the
group's deletion. Consumer groups (KIP-848), record by record against the group before it
applies: a member's metadata appearing or going, a group epoch bump (a rebalance starts),
the target assignment's members (partitions moved from whom to whom, gathered until the
TargetAssignmentMetadata record that ends the new target: assignment changed), and after a
member's current assignment applies, every member reconciled to the target epoch: the
rebalance completed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)

from .classic.consumer_protocol import ConsumerProtocolError, decode_assignment
from .consumer.group import ConsumerGroup, ConsumerGroupState
from .events import MOVED_LISTED, GroupEvents
from .topics import TopicImage

REPLAYED = "replayed from the log: "
_REMOVED = "removed (left, or its session or rebalance timed out)"


def _removed_cause(events: GroupEvents) -> str:
    return REPLAYED + _REMOVED if events.replay_time_ms is not None else _REMOVED


# -- classic groups ------------------------------------------------------------------------


def derive_classic(
    events: GroupEvents,
    group_id: str,
    old: GroupMetadataValue | None,
    new: GroupMetadataValue | None,
    known: bool,
    now_ms: int,
    old_ids: frozenset[str] | None = None,
) -> None:
    """The events of a GroupMetadata record `new` (None: a tombstone) of a group whose last
    record was `old` (None: its first record, the group is created); `known`: the group
    exists (a simple group, made by commits, has no record; its tombstone deletes it).
    `old_ids`: the member ids of `old`, if the caller keeps them: then a record that
    empties a group whose members were all announced gone (a mass expiry) takes set
    operations only, not a Python step per member."""
    if new is None:
        if old is not None or known:
            found = events.take_cause(group_id, "")
            event, cause = found if found else ("group_deleted", _deleted_cause(events))
            generation = old.generation if old is not None else 0
            events.emit(group_id, event, generation, None, cause, now_ms)
        events.forget(group_id)
        return
    generation = new.generation
    # Members came and went during the old generation (as when announced live).
    old_generation = old.generation if old is not None else 0
    if old is None and events.announced(group_id, "", "created") is None:
        events.emit(group_id, "group_created", generation, None, "JoinGroup", now_ms)
    if old is None:
        old_ids = frozenset()
    elif old_ids is None:
        old_ids = frozenset(m.member_id for m in old.members)
    new_members = {m.member_id: m for m in new.members}
    # (An emptied group, as after a mass expiry, has nobody joining.)
    joined = [m for m in new.members if m.member_id not in old_ids] if new.members else []
    rejoined_as = {m.group_instance_id: m.member_id for m in joined if m.group_instance_id}
    gone_ids = old_ids.difference(new_members) if new_members else old_ids
    found_all = events.take_causes(group_id, gone_ids)
    said_all = events.announced_all(group_id, "removed")
    # The members that went and were not announced live, in the old record's order; those
    # announced (each member of a mass expiry) are settled by set operations.
    unsaid: dict[str, MemberMetadata] = {}
    if not events.all_removed_announced(group_id, gone_ids):
        assert old is not None
        unsaid = {
            m.member_id: m
            for m in old.members
            if m.member_id in gone_ids and m.member_id not in said_all
        }
    derived: dict[str, str] = {}
    for member in unsaid.values():
        found = found_all.get(member.member_id)
        if found is not None:
            event, cause = found
        elif member.group_instance_id in rejoined_as:
            event = "member_fenced"
            cause = (
                f"static member {member.group_instance_id} rejoined as "
                f"{rejoined_as[member.group_instance_id]}"
            )
        else:
            event, cause = "member_left", _removed_cause(events)
        derived[member.member_id] = cause
        events.emit(
            group_id, event, old_generation, member.member_id, cause, now_ms, _classic(member)
        )
    for member in joined:
        if events.announced(group_id, member.member_id, "joined") is None:
            events.emit(
                group_id,
                "member_joined",
                old_generation,
                member.member_id,
                "JoinGroup",
                now_ms,
                _classic(member),
            )
    if new.members and generation != old_generation:
        moved = _classic_moves(old, new) if new.protocol_type == "consumer" else []
        cause = f"generation {generation}"
        if joined:
            cause += f"; joined: {', '.join(m.member_id for m in joined)}"
        if gone_ids:
            assert old is not None
            left = [
                (
                    m.member_id,
                    said_all[m.member_id] if m.member_id in said_all else derived[m.member_id],
                )
                for m in old.members
                if m.member_id in gone_ids
            ]
            cause += "; left: " + ", ".join(f"{m} ({why})" for m, why in left)
        events.emit(
            group_id,
            "rebalance_completed",
            generation,
            None,
            cause,
            now_ms,
            {
                "members": len(new.members),
                "leader": new.leader,
                "protocol": new.protocol,
                "partitions_moved": len(moved),
                "moved": moved[:MOVED_LISTED],
            },
        )
    elif not new.members and old_ids:
        events.emit(group_id, "group_emptied", generation, None, "no member left", now_ms)
    events.settle(group_id, new_members)


def _deleted_cause(events: GroupEvents) -> str:
    why = "empty, and its offsets expired or were deleted"
    return REPLAYED + why if events.replay_time_ms is not None else why


def _classic(member: MemberMetadata) -> dict[str, Any]:
    return {
        "instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
    }


def _owners(value: GroupMetadataValue | None) -> dict[tuple[str, int], str]:
    owners: dict[tuple[str, int], str] = {}
    if value is None:
        return owners
    for member in value.members:
        try:
            assignment = decode_assignment(member.assignment)
        except ConsumerProtocolError:
            continue
        for topic, partitions in assignment.partitions:
            for partition in partitions:
                owners[(topic, partition)] = member.member_id
    return owners


def _classic_moves(old: GroupMetadataValue | None, new: GroupMetadataValue) -> list[dict[str, Any]]:
    """Partitions whose owner changed between the two generations' assignments."""
    before, after = _owners(old), _owners(new)
    moved = []
    for tp in sorted(before.keys() | after.keys()):
        source, target = before.get(tp), after.get(tp)
        if source != target:
            moved.append({"topic": tp[0], "partition": tp[1], "from": source, "to": target})
    return moved


# -- consumer groups -----------------------------------------------------------------------


def before_consumer(
    events: GroupEvents,
    topics: TopicImage,
    group: ConsumerGroup | None,
    key: Any,
    value: Any,
    now_ms: int,
) -> None:
    """The events of a consumer-group record, derived before `group` (None: not there yet)
    applies it."""
    kind = type(key)
    if kind is ConsumerGroupCurrentMemberAssignmentKey and group is not None:
        return  # derived once it applies (after_consumer); the commonest record
    group_id = key.group_id
    if group is None:
        if value is None:
            return  # a tombstone of a group that is not there: a no-op
        events.emit(group_id, "group_created", 0, None, "a ConsumerGroupHeartbeat", now_ms)
    epoch = group.group_epoch if group is not None else 0
    if kind is ConsumerGroupMemberMetadataKey:
        member_id = key.member_id
        known = group is not None and member_id in group.metadata
        if value is None:
            if known:
                assert group is not None
                found = events.take_cause(group_id, member_id)
                event, cause = (
                    found if found is not None else ("member_left", _removed_cause(events))
                )
                details = _consumer(group.metadata[member_id])
                events.emit(group_id, event, epoch, member_id, cause, now_ms, details)
                events.reason(group_id, f"{member_id} {event.removeprefix('member_')}: {cause}")
        elif not known:
            cause = "ConsumerGroupHeartbeat"
            if value.classic_member_metadata is not None:
                cause = "JoinGroup (a classic member of a consumer group)"
            events.emit(
                group_id, "member_joined", epoch, member_id, cause, now_ms, _consumer(value)
            )
            events.reason(group_id, f"{member_id} joined")
        elif group is not None and _subscription(group.metadata[member_id]) != _subscription(value):
            events.reason(group_id, f"{member_id} changed its subscription")
    elif kind is ConsumerGroupMetadataKey:
        if value is None:
            assert group is not None
            found = events.take_cause(group_id, "")
            event, cause = found if found else ("group_deleted", _deleted_cause(events))
            events.emit(group_id, event, epoch, None, cause, now_ms)
            events.forget(group_id)
        elif value.epoch > epoch:
            cause = events.take_reasons(group_id, "the subscribed topics changed")
            if group is not None and group.metadata:
                # (An emptied group's epoch bump starts nothing: group_emptied said it.)
                events.emit(group_id, "rebalance_started", value.epoch, None, cause, now_ms)
    elif kind is ConsumerGroupTargetAssignmentMemberKey:
        old = group.target.get(key.member_id, {}) if group is not None else {}
        _gather_moves(events, group_id, key.member_id, old, value)
    elif kind is ConsumerGroupTargetAssignmentMetadataKey:
        if (
            group is not None
            and value is not None
            and value.assignment_epoch != group.assignment_epoch
        ):
            _assignment_changed(events, topics, group, value.assignment_epoch, now_ms)


def after_consumer(
    events: GroupEvents, group: ConsumerGroup, key: Any, value: Any, now_ms: int
) -> None:
    """The events of a consumer-group record seen once `group` applied it: the rebalance
    completed (every member reconciled to the target), or the group emptied."""
    kind = type(key)
    if kind is ConsumerGroupCurrentMemberAssignmentKey:
        epoch = group.assignment_epoch
        if (
            value is not None
            and value.member_epoch == epoch
            and events.completed.get(group.group_id) != epoch
            and group.state() is ConsumerGroupState.STABLE
        ):
            events.completed[group.group_id] = epoch
            moved = events.moved_since_completed.pop(group.group_id, 0)
            events.emit(
                group.group_id,
                "rebalance_completed",
                epoch,
                None,
                f"every member reconciled to epoch {epoch}",
                now_ms,
                {"members": len(group.metadata), "partitions_moved": moved},
            )
    elif kind is ConsumerGroupMemberMetadataKey and value is None and not group.metadata:
        events.emit(
            group.group_id, "group_emptied", group.group_epoch, None, "no member left", now_ms
        )


def _consumer(meta: ConsumerGroupMemberMetadataValue) -> dict[str, Any]:
    return {
        "instance_id": meta.instance_id,
        "client_id": meta.client_id,
        "client_host": meta.client_host,
        "subscribed_topics": list(meta.subscribed_topic_names),
        "subscribed_regex": meta.subscribed_topic_regex,
    }


def _subscription(meta: ConsumerGroupMemberMetadataValue) -> tuple[Any, ...]:
    return (meta.subscribed_topic_names, meta.subscribed_topic_regex)


def _gather_moves(
    events: GroupEvents,
    group_id: str,
    member_id: str,
    old: Mapping[uuid.UUID, frozenset[int]],
    value: Any,
) -> None:
    """A member's new target (`old`: its previous one): its partitions revoked and
    assigned, gathered per partition as [from, to] until the target is complete."""
    if value is None and not old:
        return  # a departing member that held no target: nothing moves
    new: dict[uuid.UUID, set[int]] = {}
    if value is not None:
        for tp in value.topic_partitions:
            new.setdefault(tp.topic_id, set()).update(tp.partitions)
    moves = events.moves.setdefault(group_id, {})
    for topic_id, held in old.items():
        for partition in held - new.get(topic_id, set()):
            moves.setdefault((topic_id, partition), [None, None])[0] = member_id
    for topic_id, taken in new.items():
        for partition in taken - old.get(topic_id, frozenset()):
            moves.setdefault((topic_id, partition), [None, None])[1] = member_id


def _assignment_changed(
    events: GroupEvents, topics: TopicImage, group: ConsumerGroup, epoch: int, now_ms: int
) -> None:
    moves = events.moves.pop(group.group_id, {})
    if not group.metadata:
        return  # the target of an emptied group: group_emptied said it
    changed = [(tp, move) for tp, move in moves.items() if move[0] != move[1]]
    revoked = sum(1 for _, move in changed if move[0] is not None)
    assigned = sum(1 for _, move in changed if move[1] is not None)
    gid = group.group_id
    events.moved_since_completed[gid] = events.moved_since_completed.get(gid, 0) + len(changed)
    listed = [
        {
            "topic": topics.topic_name(topic_id) or str(topic_id),
            "partition": partition,
            "from": move[0],
            "to": move[1],
        }
        for (topic_id, partition), move in sorted(changed, key=_move_order)[:MOVED_LISTED]
    ]
    events.emit(
        gid,
        "assignment_changed",
        epoch,
        None,
        f"target assignment of group epoch {epoch}",
        now_ms,
        {
            "members": len(group.metadata),
            "assigned": assigned,
            "revoked": revoked,
            "partitions_moved": len(changed),
            "moved": listed,
        },
    )


def _move_order(item: tuple[tuple[uuid.UUID, int], list[str | None]]) -> tuple[int, int]:
    return (item[0][0].int, item[0][1])

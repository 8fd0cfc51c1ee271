"""How members leave a consumer group (B.6, B.7): a leave heartbeat (epoch -1, or -2 for a
static member's temporary leave), or fenced by a timer: the session timeout
(`session-timeout-<group>-<member>`) or the rebalance timeout of a member slow to revoke
(`rebalance-timeout-<group>-<member>`). A removal is one write: the members' tombstones,
unused regexes' tombstones, one group epoch bump (or the downgrade to a classic group when
only classic members remain). A mixin of ConsumerGroupManager (manager.py); its timer
callbacks re-check that the group and member are still the ones they were armed for.

Mass expiry. A fired timer does not remove its member at once: it queues it in the
group's `fencing`, and the `fence-<group>` timer (a 0-delay one, so it runs after every
timer due now has queued its member) removes the queued members FENCE_SLICE at a time, one
write and one epoch bump per slice, each slice its own shard event, as an offloaded target
is written (offload.py). 20,000 members whose sessions end together were 20,000 removals
of one member each, each O(members) (7.5 s of loop); now they are 100 writes of O(slice),
none holding the loop more than a few milliseconds. A member is removed only if, when its
slice runs, it is still a member and the timer that queued it was not armed again since
(a heartbeat re-arms the session: that member stays).
"""

from __future__ import annotations

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.frozen import fast_new
from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

from ..result import Record, Result
from .change import GroupChange, HeartbeatError
from .group import ConsumerGroup
from .keys import fence_key, rebalance_timeout_key, session_timeout_key
from .member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupMember,
    MemberState,
)
from .messages import HeartbeatRequest, HeartbeatResponse
from .migration import ClassicMembers
from .offload import TargetScheduling
from .reconcile import static_member_temporary_leave
from .targets import regex_users

# Members removed per shard event of a mass expiry, records' replay and encoding included
# (~35 us of loop CPU a member: a slice of 50 is ~1.8 ms). Each slice also pays a fixed
# ~0.3-0.4 ms around it (its commit round, its group-event log line, the loop turns between
# slices): at 20 a member, 1,000 slices of 20,000 members spent a third of the expiry's
# loop time there, and the last member went 1.1 s after the sessions ended (issue 16's
# target: within 1 s). Measured with tests/bench/bench_mass_expiry.py (session 18).
FENCE_SLICE = 50
# The removal's three tombstone keys, built without a frozen __init__'s setattr per field.
_current_key = fast_new(ConsumerGroupCurrentMemberAssignmentKey)
_target_key = fast_new(ConsumerGroupTargetAssignmentMemberKey)
_metadata_key = fast_new(ConsumerGroupMemberMetadataKey)


class MemberDepartures(TargetScheduling):
    """Mixin: `migration` is set by the manager's __init__."""

    migration: ClassicMembers

    def _leave(self, request: HeartbeatRequest, result: Result, now_ms: int) -> HeartbeatResponse:
        """Epoch -1 (leave: the member is removed, the group epoch moves) or -2 (a static
        member's temporary leave: it keeps its place and partitions, with assignment epochs
        reset to 0, until it rejoins or its session times out)."""
        group_id = request.group_id
        group = self.groups.get(group_id)
        if group is None:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        member_id = request.member_id
        if request.instance_id is None:
            if group.member(member_id) is None:
                raise HeartbeatError(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {group_id}.",
                )
        else:
            owner = group.static_member_id(request.instance_id)
            check_static_owner(owner, member_id, request.instance_id)
        member = group.member(member_id)
        assert member is not None
        if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            left = static_member_temporary_leave(member)
            if left != member:
                result.records.append(
                    (ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), left.to_record())
                )
            self.shard.timer.cancel(rebalance_timeout_key(group_id, member_id))
            return HeartbeatResponse(
                member_id=member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH
            )
        self.shard.events.cause(group_id, member_id, "member_left", "left (heartbeat epoch -1)")
        result.records.extend(self.removal_records(group, [member_id], now_ms))
        return HeartbeatResponse(member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)

    def removal_records(
        self, group: ConsumerGroup, member_ids: list[str], now_ms: int
    ) -> list[Record]:
        """Remove (fence) members (B.7) in one write: their three tombstones each, the
        tombstones of regexes nobody uses any more, one group epoch bump with the hash of
        what is left, the target epoch moved too when the group is now empty; or, when
        only classic-protocol members remain, the downgrade to a classic group
        (migration.py). Cancels their timers."""
        gid = group.group_id
        change = GroupChange()
        records: list[Record] = []
        for member_id in member_ids:
            self.cancel_member_timers(gid, member_id)
            records.extend(
                (
                    (_current_key(gid, member_id), None),
                    (_target_key(gid, member_id), None),
                    (_metadata_key(gid, member_id), None),
                )
            )
            change.metadata[member_id] = None
        if group.resolved_regexes:
            used = regex_users(group, change)
            for regex in group.resolved_regexes:
                if regex not in used:
                    records.append((ConsumerGroupRegularExpressionKey(gid, regex), None))
                    change.resolved[regex] = None
        epoch = group.group_epoch + 1
        if self.migration.maybe_downgrade(group, member_ids, epoch, records, now_ms):
            return records
        records.append(
            (
                ConsumerGroupMetadataKey(gid),
                ConsumerGroupMetadataValue(epoch, self.metadata_hash(group, change)),
            )
        )
        if len(group) == len(member_ids):
            records.append(
                (
                    ConsumerGroupTargetAssignmentMetadataKey(gid),
                    ConsumerGroupTargetAssignmentMetadataValue(epoch, 0),
                )
            )
        return records

    def schedule_session_timeout(
        self, group_id: str, member_id: str, timeout_ms: int | None = None
    ) -> None:
        """(Re)arm the member's session: the group's consumer session timeout, or the
        classic member's own (`timeout_ms`)."""
        if timeout_ms is None:
            timeout_ms = self.shard.consumer_settings(group_id).session_timeout_ms

        def expire(now_ms: int) -> Result:
            group = self.groups.get(group_id)
            if group is not None and member_id in group.metadata:
                self.fence_later(group, member_id, session_timeout_key(group_id, member_id))
            return Result()

        self.shard.timer.schedule(session_timeout_key(group_id, member_id), timeout_ms, expire)

    def fence_later(self, group: ConsumerGroup, member_id: str, fired_key: str) -> None:
        """Queue a member whose timer `fired_key` fired (session, rebalance, or a classic
        member's join or sync timeout) for removal by the group's next fence slice."""
        group.fencing.setdefault(member_id, []).append(fired_key)
        key = fence_key(group.group_id)
        if not self.shard.timer.is_scheduled(key):
            self.shard.timer.schedule(key, 0, lambda now_ms: self._fence_slice(group, now_ms))

    def _fence_slice(self, group: ConsumerGroup, now_ms: int) -> Result:
        """Remove up to FENCE_SLICE of the queued members, in one write; the rest in the
        next shard event. A member is skipped if the timer that queued it was armed
        again since (its session re-armed by a heartbeat, a new rebalance timeout)."""
        result = Result()
        gid = group.group_id
        if self.groups.get(gid) is not group:
            group.fencing.clear()  # deleted or converted meanwhile: nothing left to fence
            return result
        queued = group.fencing
        timer = self.shard.timer
        removed: list[str] = []
        while queued and len(removed) < FENCE_SLICE:
            member_id, fired = queued.popitem()
            if member_id in group.metadata and not all(map(timer.is_scheduled, fired)):
                removed.append(member_id)
                self.shard.events.cause(gid, member_id, "member_expired", _expiry_cause(fired))
        if removed:
            result.records.extend(self.removal_records(group, removed, now_ms))
        if queued:
            timer.schedule(fence_key(gid), 0, lambda now_ms: self._fence_slice(group, now_ms))
        return result

    def _schedule_rebalance_timeout(
        self,
        group_id: str,
        member: ConsumerGroupMember,
        meta: ConsumerGroupMemberMetadataValue,
    ) -> None:
        member_id = member.member_id
        epoch = member.member_epoch

        def expire(now_ms: int) -> Result:
            group = self.groups.get(group_id)
            current = None if group is None else group.member(member_id)
            if (
                group is not None
                and current is not None
                and current.member_epoch == epoch
                and current.state is MemberState.UNREVOKED_PARTITIONS
            ):
                self.fence_later(group, member_id, key)
            return Result()

        timeout_ms = meta.rebalance_timeout_ms
        if timeout_ms < 0:
            timeout_ms = self.shard.consumer_settings(group_id).session_timeout_ms
        key = rebalance_timeout_key(group_id, member_id)
        self.shard.timer.schedule(key, timeout_ms, expire)

    def cancel_member_timers(self, group_id: str, member_id: str) -> None:
        self.shard.timer.cancel(session_timeout_key(group_id, member_id))
        self.shard.timer.cancel(rebalance_timeout_key(group_id, member_id))
        self.migration.cancel_timers(group_id, member_id)


def _expiry_cause(fired: list[str]) -> str:
    """Why a queued member is fenced, from the keys of the timers that queued it."""
    if any(key.startswith("session-timeout-") for key in fired):
        return "session timeout"
    if any(key.startswith("rebalance-timeout-") for key in fired):
        return "rebalance timeout: partitions not revoked in time"
    return "rebalance timeout: a classic member did not rejoin or sync"


def check_static_owner(owner: str | None, member_id: str, instance_id: str | None) -> None:
    """A static member's request must come from the member that holds the instance id:
    UNKNOWN_MEMBER_ID when nobody does, FENCED_INSTANCE_ID when another member does."""
    if owner is None:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if owner != member_id:
        raise HeartbeatError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{owner}.",
        )

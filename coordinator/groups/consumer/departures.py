"""How members leave a consumer group (B.6, B.7): a leave heartbeat (epoch -1, or -2 for a
static member's temporary leave), or fenced by a timer: the session timeout
(`session-timeout-<group>-<member>`) or the rebalance timeout of a member slow to revoke
(`rebalance-timeout-<group>-<member>`). A removal is one write: the members' tombstones,
unused regexes' tombstones, one group epoch bump (or the downgrade to a classic group when
only classic members remain). A mixin of ConsumerGroupManager (manager.py); its timer
callbacks re-check that the group and member are still the ones they were armed for.
"""

from __future__ import annotations

from groupcoord.protocol.errors import ErrorCode
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
from .keys import rebalance_timeout_key, session_timeout_key
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
                [
                    (ConsumerGroupCurrentMemberAssignmentKey(gid, member_id), None),
                    (ConsumerGroupTargetAssignmentMemberKey(gid, member_id), None),
                    (ConsumerGroupMemberMetadataKey(gid, member_id), None),
                ]
            )
            change.metadata[member_id] = None
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
            result = Result()
            group = self.groups.get(group_id)
            if group is not None and member_id in group.metadata:
                result.records.extend(self.removal_records(group, [member_id], now_ms))
            return result

        self.shard.timer.schedule(session_timeout_key(group_id, member_id), timeout_ms, expire)

    def _schedule_rebalance_timeout(
        self,
        group_id: str,
        member: ConsumerGroupMember,
        meta: ConsumerGroupMemberMetadataValue,
    ) -> None:
        member_id = member.member_id
        epoch = member.member_epoch

        def expire(now_ms: int) -> Result:
            result = Result()
            group = self.groups.get(group_id)
            current = None if group is None else group.member(member_id)
            if (
                group is not None
                and current is not None
                and current.member_epoch == epoch
                and current.state is MemberState.UNREVOKED_PARTITIONS
            ):
                result.records.extend(self.removal_records(group, [member_id], now_ms))
            return result

        timeout_ms = meta.rebalance_timeout_ms
        if timeout_ms < 0:
            timeout_ms = self.shard.consumer_settings(group_id).session_timeout_ms
        self.shard.timer.schedule(rebalance_timeout_key(group_id, member_id), timeout_ms, expire)

    def cancel_member_timers(self, group_id: str, member_id: str) -> None:
        self.shard.timer.cancel(session_timeout_key(group_id, member_id))
        self.shard.timer.cancel(rebalance_timeout_key(group_id, member_id))
        self.migration.cancel_timers(group_id, member_id)


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

"""The rebalance phases of classic groups (reference A.3-A.5): a rebalance prepared, the
join phase completed (every parked JoinGroup answered with the next generation, or the
group Empty), the parked SyncGroups answered with their assignments, members removed, and
the timers that drive it: `join-<group>` (the initial rebalance delay, then the rebalance
timeout), `sync-<group>` (members that never sent SyncGroup), `heartbeat-<group>-<member>`
(sessions). A mixin of ClassicGroupManager (manager.py), which handles the requests; a
timer's callback first checks that its group is still the live one and in the state it
expects.
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import TYPE_CHECKING

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import GroupMetadataKey, GroupMetadataValue

from ..config import GroupConfig
from ..event_records import derive_classic
from ..result import Result
from .group import ClassicGroup, ClassicMember, GroupState
from .messages import JoinGroupMember, JoinGroupResponse, SyncGroupResponse

if TYPE_CHECKING:
    from ..shard_view import ShardView

UNKNOWN_MEMBER_ID = ""

# Why members are removed (events.py: the event and its cause).
_SESSION_TIMEOUT = ("member_expired", "session timeout")
_NOT_REJOINED = ("member_expired", "rebalance timeout: did not rejoin")
_NO_SYNC = ("member_expired", "rebalance timeout: no SyncGroup")


def member_ids(value: GroupMetadataValue) -> frozenset[str]:
    """The member ids of a GroupMetadata value."""
    return frozenset(map(_MEMBER_ID, value.members))


_MEMBER_ID = attrgetter("member_id")


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


class RebalancePhases:
    """Mixin: the manager's shard and persisted records are set by its __init__."""

    shard: ShardView
    _persisted: dict[str, GroupMetadataValue]
    _persisted_ids: dict[str, frozenset[str]]
    rebalances_from: Counter[str]

    @property
    def _config(self) -> GroupConfig:
        return self.shard.config

    def _join_members(self, group: ClassicGroup) -> list[JoinGroupMember]:
        return [
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
            for m in group.members.values()
        ]

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, now_ms: int) -> Result:
        if group.can_rebalance():
            return self._prepare_rebalance(group, now_ms)
        return self._maybe_complete_join_phase(group, now_ms)

    def _maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int) -> Result:
        """Complete the join phase if everyone is in, except during the initial delay."""
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.all_members_joined()
            and group.previous_state is not GroupState.EMPTY
        ):
            return self._complete_join_phase(group, now_ms)
        return Result()

    def _prepare_rebalance(self, group: ClassicGroup, now_ms: int) -> Result:
        result = Result()
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Parked SyncGroups are told to rejoin.
            for member in group.members.values():
                member.assignment = b""
            self._propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS, result)
        group.pending_sync_members.clear()
        self.shard.timer.cancel(sync_key(group.group_id))
        self.shard.events.rebalance_started(group.group_id, group.generation_id, now_ms)

        self.rebalances_from[group.state.value] += 1
        initial = group.state is GroupState.EMPTY
        if initial:
            group.initial_join_started_ms = group.last_join_ms = now_ms
            self._schedule_initial_delay(group, self._config.initial_rebalance_delay_ms)
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)
        if not initial:
            result.extend(self._maybe_complete_join_else_schedule(group, now_ms))
        return result

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup, now_ms: int) -> Result:
        if group.all_members_joined():
            return self._complete_join_phase(group, now_ms)
        self._schedule_join_timeout(group)
        return Result()

    def _schedule_initial_delay(self, group: ClassicGroup, delay_ms: int) -> None:
        """The initial rebalance of a new group waits for more members (A.3).

        Deliberately better than Kafka: the join completes once no member has joined for one
        initial delay (a debounce), instead of adding a whole further window whenever anyone
        joined during the last one. A burst of members starting together is answered one
        delay after the last of them joined (Kafka: two delays); members trickling in keep
        it open, and, as in Kafka, never past max(rebalance timeout, delay) from the start.
        """

        def fire(now_ms: int) -> Result:
            if not self._is_live(group) or group.state is not GroupState.PREPARING_REBALANCE:
                return Result()
            initial_delay_ms = self._config.initial_rebalance_delay_ms
            cap_ms = group.initial_join_started_ms + max(
                group.rebalance_timeout_ms(), initial_delay_ms
            )
            quiet_until_ms = min(group.last_join_ms + initial_delay_ms, cap_ms)
            if now_ms < quiet_until_ms:
                self._schedule_initial_delay(group, quiet_until_ms - now_ms)
                return Result()
            return self._complete_join_phase(group, now_ms)

        self.shard.timer.schedule(join_key(group.group_id), delay_ms, fire)

    def _schedule_join_timeout(self, group: ClassicGroup) -> None:
        def fire(now_ms: int) -> Result:
            if not self._is_live(group) or group.state is not GroupState.PREPARING_REBALANCE:
                return Result()
            return self._complete_join_phase(group, now_ms)

        self.shard.timer.schedule(join_key(group.group_id), group.rebalance_timeout_ms(), fire)

    def _complete_join_phase(self, group: ClassicGroup, now_ms: int) -> Result:
        """End the join phase: drop dynamic members that did not rejoin (static ones stay),
        then either answer every parked JoinGroup with the next generation and wait for
        SyncGroups, or, with nobody left, go Empty and write that."""
        result = Result()
        self.shard.timer.cancel(join_key(group.group_id))
        for member in [
            m for m in group.members.values() if m.awaiting_join is None and not m.is_static
        ]:
            self._remove_member(group, member.member_id, result, _NOT_REJOINED, now_ms)

        if group.state is GroupState.DEAD:
            return result
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only absent static members remain): try again after another
            # rebalance timeout, while session timeouts clear the absentees.
            self._schedule_join_timeout(group)
            return result

        group.init_next_generation(now_ms)
        if group.state is GroupState.EMPTY:
            self._write(result, group.to_record(), now_ms)
            return result

        for member in group.members.values():
            response = JoinGroupResponse(
                ErrorCode.NONE,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=group.leader_id or "",
                skip_assignment=False,
                member_id=member.member_id,
                members=self._join_members(group) if group.leader_id == member.member_id else [],
            )
            self._complete_join(group, member, response, result)
            self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)
        return result

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        generation = group.generation_id

        def fire(now_ms: int) -> Result:
            if not self._is_live(group) or group.generation_id != generation:
                return Result()
            if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
                return Result()
            if not group.pending_sync_members:
                return Result()
            # Members that never sent SyncGroup are gone (heartbeats do not save them).
            result = Result()
            for member_id in list(group.pending_sync_members):
                self._remove_member(group, member_id, result, _NO_SYNC, now_ms)
                group.pending_sync_members.discard(member_id)
            result.extend(self._prepare_rebalance(group, now_ms))
            return result

        self.shard.timer.schedule(sync_key(group.group_id), group.rebalance_timeout_ms(), fire)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode, result: Result) -> None:
        """Answer every parked SyncGroup with its member's assignment (or the error)."""
        ok = error is ErrorCode.NONE
        for member in group.members.values():
            if member.awaiting_sync is None:
                continue
            result.reply(
                member.awaiting_sync,
                SyncGroupResponse(
                    error,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                    assignment=member.assignment,
                ),
            )
            member.awaiting_sync = None
            # Sessions restart once the assignment is out: an expiry while the member was
            # parked was ignored and scheduled nothing.
            self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)

    @staticmethod
    def _complete_join(
        group: ClassicGroup, member: ClassicMember, response: JoinGroupResponse, result: Result
    ) -> None:
        if member.awaiting_join is not None:
            result.reply(member.awaiting_join, response)
            group.set_awaiting_join(member, None)

    def _remove_member(
        self,
        group: ClassicGroup,
        member_id: str,
        result: Result,
        why: tuple[str, str],
        now_ms: int,
    ) -> None:
        """Remove a member (or a pending member id) and its heartbeat timer. A parked
        JoinGroup is answered UNKNOWN_MEMBER_ID so that a live client joins again. `why`:
        the removal's event and cause (events.py), announced for a member."""
        member = group.members.get(member_id)
        if member is not None:
            event, cause = why
            self.shard.events.announce(
                group.group_id,
                event,
                group.generation_id,
                member_id,
                cause,
                now_ms,
                {"instance_id": member.group_instance_id, "client_id": member.client_id},
            )
            self._complete_join(
                group,
                member,
                JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID),
                result,
            )
            if member.awaiting_sync is not None:
                result.reply(member.awaiting_sync, SyncGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID))
                member.awaiting_sync = None
            group.remove(member_id)
        group.pending_members.discard(member_id)
        group.pending_sync_members.discard(member_id)
        self.shard.timer.cancel(heartbeat_key(group.group_id, member_id))

    def _schedule_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        def fire(now_ms: int) -> Result:
            if not self._is_live(group):
                return Result()
            return self._expire_heartbeat(group, member_id, now_ms)

        self.shard.timer.schedule(heartbeat_key(group.group_id, member_id), timeout_ms, fire)

    def _expire_heartbeat(self, group: ClassicGroup, member_id: str, now_ms: int) -> Result:
        result = Result()
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            if group.state is GroupState.PREPARING_REBALANCE and group.all_members_joined():
                result.extend(self._complete_join_phase(group, now_ms))
            return result
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return result
        self._remove_member(group, member_id, result, _SESSION_TIMEOUT, now_ms)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            result.extend(self._maybe_prepare_rebalance_or_complete_join(group, now_ms))
        elif group.state is GroupState.PREPARING_REBALANCE and group.all_members_joined():
            result.extend(self._complete_join_phase(group, now_ms))
        return result

    def _is_live(self, group: ClassicGroup) -> bool:
        return self.shard.groups.get(group.group_id) is group and group.state is not GroupState.DEAD

    def _write(self, result: Result, record: tuple[object, object], now_ms: int) -> None:
        """Persist the group as it now stands (applied: never replayed live), and derive
        its events from the record. The previous record is freed over the next shard
        events (release.py): the record that empties a large group would otherwise free
        every member of the one before it at once."""
        key, value = record
        assert isinstance(key, GroupMetadataKey) and isinstance(value, GroupMetadataValue)
        result.applied_records.append((key, value))
        group_id = key.group
        old = self._persisted.get(group_id)
        derive_classic(
            self.shard.events,
            group_id,
            old,
            value,
            True,
            now_ms,
            self._persisted_ids.get(group_id),
        )
        self._persisted[group_id] = value
        self._persisted_ids[group_id] = ids = member_ids(value)
        self.shard.events.track_record(group_id, ids)
        if old is not None:
            self.shard.release.later(old.members)

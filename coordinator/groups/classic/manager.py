"""Classic group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup), following Kafka's
GroupMetadataManager (reference section A) decision by decision.

Theory of operation. Handlers run synchronously against the shard's classic groups and
mutate the in-memory rebalance state directly, as Kafka does; the GroupMetadata records they
write only persist it, so they go in `Result.applied_records` (never replayed live). A
record is written where Kafka writes one: when a JoinGroup creates the group (an empty
record), when the leader's SyncGroup brings the assignment, when a static member is
replaced in a Stable group, and when a join phase ends with nobody left (Empty).

A parked request keeps its `reply` callback in the member (`awaiting_join`/`awaiting_sync`)
and is answered from a later Result: the request or timer that completes the phase. Kafka
completes the leader's SyncGroup (and the static replacement's JoinGroup) only after the
record commits and then changes state; here the state change and the replies travel in the
same Result as the record, and the runtime releases the replies only once the record is
durable. A failed append fails the whole Result and the shard reloads from its log, which
is the state Kafka would have reverted to (A.6, A.5 "write failure").

Timers (keys as Kafka's; rebalance.py): `heartbeat-<group>-<member>` (session timeout;
5 min for a member still in its first join; the session timeout of a pending member id),
`join-<group>` (initial rebalance delay, then the rebalance timeout), `sync-<group>`
(pending SyncGroups). A timer's callback first checks that its group is still the live one
and in the state it expects.

Departures from Kafka, where Kafka would leave a request unanswered forever (which would
hold back every later response on that connection here): a JoinGroup or SyncGroup that a
newer one of the same member supersedes is answered REBALANCE_IN_PROGRESS, and a member
removed while its SyncGroup is parked (LeaveGroup) gets UNKNOWN_MEMBER_ID for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import GroupMetadataKey, GroupMetadataValue

from ..result import Reply, Result
from .group import ClassicGroup, ClassicMember, GroupState, Protocol
from .messages import (
    DescribedGroup,
    DescribedMember,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResponse,
    ListedGroup,
    SyncGroupRequest,
    SyncGroupResponse,
)
from .rebalance import UNKNOWN_MEMBER_ID, RebalancePhases, heartbeat_key, member_ids, sync_key

if TYPE_CHECKING:
    from ..shard_view import ShardView

JOIN_REQUIRES_KNOWN_MEMBER_ID_VERSION = 4  # JoinGroupRequest.requiresKnownMemberId
JOIN_SKIP_ASSIGNMENT_VERSION = 9  # JoinGroupRequest.supportsSkippingAssignment (KIP-814)
SYNC_REQUIRES_PROTOCOL_VERSION = 5
LEAVE_BATCH_VERSION = 3

# Why members are removed by a request (events.py: the event and its cause).
_MAX_SIZE = ("member_left", "removed: the group is at group.max.size")
_LEFT = ("member_left", "LeaveGroup")

DESCRIBE_GROUP_ID_NOT_FOUND_VERSION = 6


class ClassicGroupManager(RebalancePhases):
    """The classic groups of one shard: the requests (here) and the rebalance phases and
    their timers (rebalance.py)."""

    def __init__(self, shard: ShardView) -> None:
        self.shard = shard
        # The last GroupMetadata value written (or replayed) per group: what a reload
        # would rebuild. Maintained for persisted_view() and the property tests.
        self._persisted: dict[str, GroupMetadataValue] = {}
        # Its member ids, kept beside it: the record that empties a 20,000-member group
        # is compared with the previous one without a Python step per member.
        self._persisted_ids: dict[str, frozenset[str]] = {}
        # Kafka's CompletedRebalances sensor: the leader's assignment written, the group
        # Stable; and the rebalances started, by the state the group left (ours).
        self.completed_rebalances = 0
        self.rebalances_from: Counter[str] = Counter()

    # ========================================================================================
    # JoinGroup
    # ========================================================================================

    def join_group(self, request: JoinGroupRequest, reply: Reply, now_ms: int) -> Result:
        """JoinGroup. Parks the request until the join phase completes (answered by a later
        Result), or answers at once: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT,
        UNKNOWN_MEMBER_ID, GROUP_MAX_SIZE_REACHED, COORDINATOR_NOT_AVAILABLE,
        INCONSISTENT_GROUP_PROTOCOL, FENCED_INSTANCE_ID, MEMBER_ID_REQUIRED (v4+), or the
        current generation for an unchanged member; ours: UNKNOWN_SERVER_ERROR for protocol
        metadata over group_member_metadata_bytes_max (what Kafka answers when a group
        record outgrows its log's message size), GROUP_MAX_SIZE_REACHED for a new group past
        groups_max. Writes the empty GroupMetadata record when it creates the group, and
        the group's record on a static replacement in Stable."""
        result = Result()
        if not request.group_id:
            result.reply(
                reply,
                JoinGroupResponse(ErrorCode.INVALID_GROUP_ID, member_id=request.member_id),
            )
            return result
        if (
            sum(len(metadata) for _, metadata in request.protocols)
            > self._config.member_metadata_max_bytes
        ):
            # Refused before anything is kept: a member cannot grow the group's record
            # (written whole at every SyncGroup) past what one member may hold.
            result.reply(
                reply,
                JoinGroupResponse(ErrorCode.UNKNOWN_SERVER_ERROR, member_id=request.member_id),
            )
            return result
        if not (
            self._config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= self._config.max_session_timeout_ms
        ):
            result.reply(
                reply,
                JoinGroupResponse(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=request.member_id),
            )
            return result

        consumer_group = self.shard.consumer_group(request.group_id)
        if consumer_group is not None:
            if not consumer_group.is_empty():
                # A classic member of a consumer group (online migration, B.14).
                return self.shard.consumer.migration.join(consumer_group, request, reply, now_ms)
            # An empty consumer group becomes a classic group: deleted in the same write.
            result.records.extend(self.shard.consumer.deletion_records(consumer_group))
        return self.join_classic_group(request, reply, now_ms, result)

    def join_classic_group(
        self, request: JoinGroupRequest, reply: Reply, now_ms: int, result: Result
    ) -> Result:
        """JoinGroup against the classic group of the id (or a new one), into `result`."""
        is_unknown_member = request.member_id == UNKNOWN_MEMBER_ID
        group = self.shard.classic_group(request.group_id)
        is_new_group = group is None
        if group is None:
            # Created only for a member without id; otherwise the member cannot be known.
            if not is_unknown_member:
                result.reply(
                    reply,
                    JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=request.member_id),
                )
                return result
            if self.shard.groups_full() is not None:
                result.reply(
                    reply,
                    JoinGroupResponse(
                        ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=UNKNOWN_MEMBER_ID
                    ),
                )
                return result
            group = self.shard.get_or_create_classic_group(request.group_id, now_ms)
            self.shard.events.announce(
                group.group_id, "group_created", 0, None, "JoinGroup", now_ms
            )

        if not self._accept_joining_member(group, request.member_id):
            self._remove_member(group, request.member_id, result, _MAX_SIZE, now_ms)
            result.reply(
                reply,
                JoinGroupResponse(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=UNKNOWN_MEMBER_ID),
            )
            sub = Result()
        elif is_unknown_member:
            sub = self._join_new_member(request, group, reply, now_ms)
        else:
            sub = self._join_existing_member(request, group, reply, now_ms)
        result.extend(sub)

        if is_new_group and not sub.records and not sub.applied_records:
            # Commit the new group to the log (Kafka: "to the timeline data structure").
            self._write(result, group.empty_record(), now_ms)
        return result

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """group.max.size. While rebalancing, the count of members awaiting a join answer
        is used, so that the last members to rejoin an oversized group are the ones
        turned away."""
        max_size = self._config.max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.state is GroupState.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            if member is not None and member.awaiting_join is not None:
                return True
            return group.awaiting_join_count() < max_size
        return member_id in group.members or group.size < max_size

    def _join_new_member(
        self, request: JoinGroupRequest, group: ClassicGroup, reply: Reply, now_ms: int
    ) -> Result:
        result = Result()
        if group.state is GroupState.DEAD:
            result.reply(
                reply,
                JoinGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=UNKNOWN_MEMBER_ID),
            )
            return result
        if not self._supports_protocols(group, request.protocol_type, request.protocols):
            result.reply(
                reply,
                JoinGroupResponse(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=UNKNOWN_MEMBER_ID
                ),
            )
            return result

        instance_id = request.group_instance_id
        prefix = instance_id if instance_id is not None else request.client_id
        new_member_id = f"{prefix}-{self.shard.ids.new_uuid()}"

        if instance_id is not None:
            existing = group.static_member_id(instance_id)
            if existing is not None:
                return self._replace_static_member(
                    request, group, existing, new_member_id, reply, now_ms
                )
            return self._add_member_then_rebalance(request, group, new_member_id, reply, now_ms)

        if request.api_version >= JOIN_REQUIRES_KNOWN_MEMBER_ID_VERSION:
            # Hand out an id and ask the client to come back with it; the id lapses after a
            # session timeout without that second JoinGroup.
            group.pending_members.add(new_member_id)
            self._schedule_heartbeat(group, new_member_id, request.session_timeout_ms)
            result.reply(
                reply, JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_member_id)
            )
            return result
        return self._add_member_then_rebalance(request, group, new_member_id, reply, now_ms)

    def _join_existing_member(
        self, request: JoinGroupRequest, group: ClassicGroup, reply: Reply, now_ms: int
    ) -> Result:
        result = Result()
        member_id = request.member_id
        if group.state is GroupState.DEAD:
            result.reply(
                reply, JoinGroupResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
            )
            return result
        if not self._supports_protocols(group, request.protocol_type, request.protocols):
            result.reply(
                reply,
                JoinGroupResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id),
            )
            return result
        if member_id in group.pending_members:
            if request.group_instance_id is not None:
                # Kafka: IllegalStateException (a pending id was handed to a dynamic member).
                result.reply(
                    reply, JoinGroupResponse(ErrorCode.UNKNOWN_SERVER_ERROR, member_id=member_id)
                )
                return result
            return self._add_member_then_rebalance(request, group, member_id, reply, now_ms)

        error = group.validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            result.reply(reply, JoinGroupResponse(error, member_id=member_id))
            return result

        member = group.members[member_id]
        protocols = _protocols(request.protocols)
        if group.state is GroupState.PREPARING_REBALANCE:
            return self._update_member_then_rebalance(request, group, member, reply, now_ms)
        if group.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # Probably lost the JoinGroup answer: give the current generation again.
                result.reply(reply, self._current_generation_response(group, member_id))
                return result
            return self._update_member_then_rebalance(request, group, member, reply, now_ms)
        if group.state is GroupState.STABLE:
            # The leader rejoining always rebalances (it may have seen metadata changes
            # that do not show in its subscription); a follower only if it changed.
            if group.leader_id == member_id or not member.matches(protocols):
                return self._update_member_then_rebalance(request, group, member, reply, now_ms)
            result.reply(
                reply, self._current_generation_response(group, member_id, with_members=False)
            )
            return result
        # Empty with a known member id: let the client reset its generation and rejoin.
        result.reply(reply, JoinGroupResponse(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        return result

    def _current_generation_response(
        self, group: ClassicGroup, member_id: str, with_members: bool = True
    ) -> JoinGroupResponse:
        return JoinGroupResponse(
            ErrorCode.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=False,
            member_id=member_id,
            members=self._join_members(group)
            if with_members and group.leader_id == member_id
            else [],
        )

    def _add_member_then_rebalance(
        self,
        request: JoinGroupRequest,
        group: ClassicGroup,
        member_id: str,
        reply: Reply,
        now_ms: int,
    ) -> Result:
        member = ClassicMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=_rebalance_timeout(request),
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=_protocols(request.protocols),
            awaiting_join=reply,
            join_version=request.api_version,
            is_new=True,
        )
        # A member joining during the initial delay extends it (A.3, debounced: see
        # _schedule_initial_delay).
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.previous_state is GroupState.EMPTY
        ):
            group.last_join_ms = now_ms
        group.add(member)
        self.shard.events.announce(
            group.group_id,
            "member_joined",
            group.generation_id,
            member_id,
            "JoinGroup",
            now_ms,
            {"instance_id": member.group_instance_id, "client_id": member.client_id},
        )
        # A new member cannot heartbeat while parked and its disconnects go unnoticed, so
        # its first join is bounded by the new-member join timeout, not its session.
        self._schedule_heartbeat(group, member_id, self._config.new_member_join_timeout_ms)
        return self._maybe_prepare_rebalance_or_complete_join(group, now_ms)

    def _update_member_then_rebalance(
        self,
        request: JoinGroupRequest,
        group: ClassicGroup,
        member: ClassicMember,
        reply: Reply,
        now_ms: int,
    ) -> Result:
        result = Result()
        if group.can_rebalance():
            self.shard.events.reason(group.group_id, f"{member.member_id} rejoined (JoinGroup)")
        self._update_member(
            group,
            member,
            _protocols(request.protocols),
            _rebalance_timeout(request),
            request.session_timeout_ms,
            reply,
            request.api_version,
            result,
        )
        result.extend(self._maybe_prepare_rebalance_or_complete_join(group, now_ms))
        return result

    def _update_member(
        self,
        group: ClassicGroup,
        member: ClassicMember,
        protocols: list[Protocol],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        reply: Reply | None,
        api_version: int,
        result: Result,
    ) -> None:
        group.update_protocols(member, protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if reply is not None and member.awaiting_join is not None:
            # Kafka drops the older parked JoinGroup; we answer it so that nothing queued
            # behind it on its connection waits forever.
            result.reply(
                member.awaiting_join,
                JoinGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id),
            )
        group.set_awaiting_join(member, reply)
        if reply is not None:
            member.join_version = api_version

    def _replace_static_member(
        self,
        request: JoinGroupRequest,
        group: ClassicGroup,
        old_member_id: str,
        new_member_id: str,
        reply: Reply,
        now_ms: int,
    ) -> Result:
        """A known instance id joins without member id: the new instance takes over the
        member (KIP-345) and the old one is fenced. In Stable with an unchanged selected
        protocol the group keeps its generation and assignment (KIP-814)."""
        result = Result()
        assert request.group_instance_id is not None
        current_leader = group.leader_id
        old, new = group.replace_static_member(
            request.group_instance_id, old_member_id, new_member_id
        )
        if old.awaiting_join is not None:
            result.reply(
                old.awaiting_join,
                JoinGroupResponse(ErrorCode.FENCED_INSTANCE_ID, member_id=old_member_id, leader=""),
            )
            old.awaiting_join = None
        if old.awaiting_sync is not None:
            result.reply(old.awaiting_sync, SyncGroupResponse(ErrorCode.FENCED_INSTANCE_ID))
            old.awaiting_sync = None
        events = self.shard.events
        cause = f"static member {request.group_instance_id} rejoined as {new_member_id}"
        details = {"instance_id": request.group_instance_id, "client_id": request.client_id}
        events.announce(
            group.group_id, "member_fenced", group.generation_id, old_member_id, cause, now_ms
        )
        events.announce(
            group.group_id,
            "member_joined",
            group.generation_id,
            new_member_id,
            f"static member {request.group_instance_id} replaced {old_member_id}",
            now_ms,
            details,
        )
        # Kafka lets the old id's timer expire without effect; cancelling it is the same.
        self.shard.timer.cancel(heartbeat_key(group.group_id, old_member_id))
        self._schedule_heartbeat(group, new_member_id, new.session_timeout_ms)

        self._update_member(
            group,
            new,
            _protocols(request.protocols),
            _rebalance_timeout(request),
            request.session_timeout_ms,
            reply,
            request.api_version,
            result,
        )

        if group.state is GroupState.STABLE:
            if (group.protocol_name or "") == group.select_protocol():
                # No rebalance: persist the new member id with the current generation and
                # assignments, and answer the new instance once that is durable.
                self._write(result, group.to_record(), now_ms)
                if request.api_version >= JOIN_SKIP_ASSIGNMENT_VERSION:
                    is_leader = group.leader_id == new_member_id
                    response = JoinGroupResponse(
                        ErrorCode.NONE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        skip_assignment=is_leader,
                        member_id=new_member_id,
                        members=self._join_members(group) if is_leader else [],
                    )
                else:
                    # An old client must not believe it leads (it would run the assignor
                    # for a generation that is not rebalancing): name the old leader id.
                    response = JoinGroupResponse(
                        ErrorCode.NONE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader or "",
                        skip_assignment=False,
                        member_id=new_member_id,
                        members=[],
                    )
                self._complete_join(group, new, response, result)
                return result
            result.extend(self._maybe_prepare_rebalance_or_complete_join(group, now_ms))
            return result
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be computing an assignment for the old id: start over.
            result.extend(self._prepare_rebalance(group, now_ms))
            return result
        # PreparingRebalance (Empty/Dead cannot have a static member to replace).
        result.extend(self._maybe_complete_join_phase(group, now_ms))
        return result

    def _supports_protocols(
        self, group: ClassicGroup, protocol_type: str, protocols: Iterable[Protocol]
    ) -> bool:
        """Kafka's supportsProtocols: decided by the Empty *state* (not member count)."""
        names = [name for name, _ in protocols]
        if group.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        return group.protocol_type == protocol_type and any(
            group.supported_protocols.get(name, 0) == group.size for name in names
        )

    # ========================================================================================
    # SyncGroup
    # ========================================================================================

    def sync_group(self, request: SyncGroupRequest, reply: Reply, now_ms: int) -> Result:
        """SyncGroup. The leader's request (CompletingRebalance) writes the GroupMetadata
        record with every assignment and, in the same Result, answers every parked SyncGroup
        and makes the group Stable; followers before the leader are parked. Errors:
        INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
        COORDINATOR_NOT_AVAILABLE, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS; a leader's
        assignment over group_member_assignment_bytes_max writes nothing: the leader and
        the parked followers get UNKNOWN_SERVER_ERROR and the group rebalances (Kafka's
        answer when the group record is too large for its log)."""
        result = Result()

        def answer(error: ErrorCode) -> Result:
            result.reply(reply, SyncGroupResponse(error))
            return result

        if request.api_version >= SYNC_REQUIRES_PROTOCOL_VERSION and (
            request.protocol_type is None or request.protocol_name is None
        ):
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if not request.group_id:
            return answer(ErrorCode.INVALID_GROUP_ID)
        consumer_group = self.shard.consumer_group(request.group_id)
        if consumer_group is not None:
            return self.shard.consumer.migration.sync(consumer_group, request, reply, now_ms)
        group = self.shard.classic_group(request.group_id)
        if group is None or group.state is GroupState.EMPTY:
            return answer(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.state is GroupState.DEAD:
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return answer(error)
        if request.generation_id != group.generation_id:
            return answer(ErrorCode.ILLEGAL_GENERATION)
        if _inconsistent(request.protocol_type, group.protocol_type) or _inconsistent(
            request.protocol_name, group.protocol_name
        ):
            return answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is GroupState.PREPARING_REBALANCE:
            return answer(ErrorCode.REBALANCE_IN_PROGRESS)

        member = group.members[request.member_id]
        if group.state is GroupState.STABLE:
            self._remove_pending_sync_member(group, member.member_id)
            result.reply(
                reply,
                SyncGroupResponse(
                    ErrorCode.NONE,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                ),
            )
            return result

        # CompletingRebalance: park until the leader's assignment is in.
        if member.awaiting_sync is not None:
            result.reply(member.awaiting_sync, SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = reply
        self._remove_pending_sync_member(group, member.member_id)
        if group.leader_id == member.member_id:
            assignments = dict(request.assignments)
            for member_id in group.members:
                assignments.setdefault(member_id, b"")
            limit = self._config.member_assignment_max_bytes
            if any(len(assignments[member_id]) > limit for member_id in group.members):
                # As Kafka when the record cannot be appended: every parked SyncGroup
                # (the leader's included) gets the error, and the group rebalances.
                for m in group.members.values():
                    m.assignment = b""
                self._propagate_assignment(group, ErrorCode.UNKNOWN_SERVER_ERROR, result)
                result.extend(self._prepare_rebalance(group, now_ms))
                return result
            # The record is built in CompletingRebalance, as Kafka builds it before the
            # append; the state change below reaches clients only once it is durable.
            self._write(result, group.to_record(assignments), now_ms)
            for m in group.members.values():
                m.assignment = assignments[m.member_id]
            self._propagate_assignment(group, ErrorCode.NONE, result)
            group.transition(GroupState.STABLE, now_ms)
            self.completed_rebalances += 1
        return result

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if (
            group.state
            in (
                GroupState.DEAD,
                GroupState.EMPTY,
                GroupState.PREPARING_REBALANCE,
            )
            or not group.pending_sync_members
        ):
            self.shard.timer.cancel(sync_key(group.group_id))

    # ========================================================================================
    # Heartbeat
    # ========================================================================================

    def heartbeat(self, request: HeartbeatRequest, reply: Reply, now_ms: int) -> Result:
        """Heartbeat: restarts the member's session timer; writes nothing. Errors:
        INVALID_GROUP_ID, UNKNOWN_MEMBER_ID (also unknown group and Empty group),
        COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
        REBALANCE_IN_PROGRESS (PreparingRebalance: the member must rejoin)."""
        consumer_group = self.shard.consumer_group(request.group_id)
        if consumer_group is not None:
            return self.shard.consumer.migration.heartbeat(consumer_group, request, reply, now_ms)
        result = Result()
        result.reply(reply, HeartbeatResponse(self._heartbeat(request)))
        return result

    def _heartbeat(self, request: HeartbeatRequest) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self.shard.classic_group(request.group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[request.member_id]
        self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def touch_member(self, group: ClassicGroup | str, member_id: str, now_ms: int) -> None:
        """An offset commit from a member of a Stable or PreparingRebalance group counts as a
        heartbeat (Kafka's OffsetMetadataManager reschedules the session)."""
        if isinstance(group, str):
            found = self.shard.classic_group(group)
            if found is None:
                return
            group = found
        if group.state not in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            return
        member = group.members.get(member_id)
        if member is not None:
            self._schedule_heartbeat(group, member_id, member.session_timeout_ms)

    # ========================================================================================
    # LeaveGroup
    # ========================================================================================

    def leave_group(self, request: LeaveGroupRequest, reply: Reply, now_ms: int) -> Result:
        """LeaveGroup (v0-2 one member, v3+ a batch). Removes each valid member, answering
        its parked JoinGroup UNKNOWN_MEMBER_ID, then rebalances (or completes the join
        phase); writes a record only if that leaves the group Empty. Per-member errors:
        UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID; top-level: INVALID_GROUP_ID,
        COORDINATOR_NOT_AVAILABLE (Dead)."""
        result = Result()
        batch = request.api_version >= LEAVE_BATCH_VERSION

        def finish(error: ErrorCode, members: list[LeaveMemberResponse]) -> Result:
            if not batch and error is ErrorCode.NONE and members:
                error = members[0].error_code
            result.reply(reply, LeaveGroupResponse(error, members if batch else []))
            return result

        if not request.group_id:
            return finish(ErrorCode.INVALID_GROUP_ID, [])
        consumer_group = self.shard.consumer_group(request.group_id)
        if consumer_group is not None:
            return self.shard.consumer.migration.leave(consumer_group, request, reply, now_ms)
        group = self.shard.classic_group(request.group_id)
        if group is None:
            return finish(
                ErrorCode.NONE,
                [
                    LeaveMemberResponse(
                        m.member_id, m.group_instance_id, ErrorCode.UNKNOWN_MEMBER_ID
                    )
                    for m in request.members
                ],
            )
        if group.state is GroupState.DEAD:
            return finish(ErrorCode.COORDINATOR_NOT_AVAILABLE, [])

        responses: list[LeaveMemberResponse] = []
        any_left = False
        for leaving in request.members:
            error = ErrorCode.NONE
            if leaving.member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal by instance id.
                target = group.static_member_id(leaving.group_instance_id)
                if target is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    why = ("member_left", "LeaveGroup by instance id (an admin removal)")
                    self._remove_member(group, target, result, why, now_ms)
            elif leaving.member_id in group.pending_members:
                self._remove_member(group, leaving.member_id, result, _LEFT, now_ms)
            else:
                error = group.validate_member(leaving.member_id, leaving.group_instance_id)
                if error is ErrorCode.NONE:
                    why = ("member_left", f"LeaveGroup ({leaving.reason or 'no reason given'})")
                    self._remove_member(group, leaving.member_id, result, why, now_ms)
            any_left = any_left or error is ErrorCode.NONE
            responses.append(
                LeaveMemberResponse(leaving.member_id, leaving.group_instance_id, error)
            )

        if any_left:
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                result.extend(self._maybe_prepare_rebalance_or_complete_join(group, now_ms))
            elif group.state is GroupState.PREPARING_REBALANCE:
                result.extend(self._maybe_complete_join_phase(group, now_ms))
        return finish(ErrorCode.NONE, responses)

    # ========================================================================================
    # DescribeGroups / ListGroups / DeleteGroups validation
    # ========================================================================================

    def describe_groups(
        self, group_ids: Iterable[str], api_version: int = DESCRIBE_GROUP_ID_NOT_FOUND_VERSION
    ) -> list[DescribedGroup]:
        """DescribeGroups (A.9): a missing group is Dead (GROUP_ID_NOT_FOUND from v6);
        Stable shows the protocol and the members' subscriptions, other states only the
        assignments."""
        described: list[DescribedGroup] = []
        for group_id in group_ids:
            group = self.shard.classic_group(group_id)
            if group is None or group.state is GroupState.DEAD:
                not_found = api_version >= DESCRIBE_GROUP_ID_NOT_FOUND_VERSION
                described.append(
                    DescribedGroup(
                        group_id=group_id,
                        group_state=GroupState.DEAD.value,
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND if not_found else ErrorCode.NONE,
                        error_message=f"Group {group_id} not found." if not_found else None,
                    )
                )
                continue
            stable = group.state is GroupState.STABLE
            described.append(
                DescribedGroup(
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=(group.protocol_name or "") if stable else "",
                    members=[
                        DescribedMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata(group.protocol_name) if stable else b"",
                            member_assignment=m.assignment,
                        )
                        for m in group.members.values()
                    ],
                )
            )
        return described

    def list_groups(
        self,
        states_filter: Iterable[str] = (),
        types_filter: Iterable[str] = (),
    ) -> list[ListedGroup]:
        """ListGroups for classic groups: filters are case-insensitive, empty = all, and an
        unknown type matches nothing."""
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and "classic" not in types:
            return []
        return [
            ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
            for group in self.shard.groups.values()
            if not states or group.state.value.lower() in states
        ]

    # ========================================================================================
    # Replay and loading
    # ========================================================================================

    def replay(self, key: GroupMetadataKey, value: GroupMetadataValue | None, now_ms: int) -> None:
        """Rebuild a group from its GroupMetadata record (Stable with members, Empty without);
        a tombstone removes it. Used at load (classic handlers never need their records
        replayed) and for DeleteGroups tombstones."""
        if value is None:
            self.shard.remove_group(key.group)
            self._persisted.pop(key.group, None)
            self._persisted_ids.pop(key.group, None)
            return
        self.shard.groups[key.group] = ClassicGroup.from_record(key.group, value, now_ms)
        self._persisted[key.group] = value
        self._persisted_ids[key.group] = ids = member_ids(value)
        self.shard.events.track_record(key.group, ids)

    def adopt(self, group: ClassicGroup) -> None:
        """A classic group built by a downgrade: register it and start its members'
        sessions (the caller writes its GroupMetadata record)."""
        self.shard.groups[group.group_id] = group
        for member in group.members.values():
            self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)

    def after_downgrade(self, group_id: str, now_ms: int) -> Result:
        """A consumer group just became this classic group (its GroupMetadata record was
        replayed): its members' sessions start and a rebalance makes them rejoin."""
        group = self.shard.classic_group(group_id)
        if group is None or group.state is not GroupState.STABLE:
            return Result()
        for member in group.members.values():
            self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
        return self._prepare_rebalance(group, now_ms)

    def take_parked_replies(self) -> list[Reply]:
        """Every parked JoinGroup and SyncGroup reply, taken from their members: the shard is
        being unloaded (its log failed, or the server stops), and Kafka answers them
        NOT_COORDINATOR then (D.4), so the clients look the coordinator up and join again."""
        replies: list[Reply] = []
        for group in self.shard.groups.values():
            for member in group.members.values():
                if member.awaiting_join is not None:
                    replies.append(member.awaiting_join)
                    group.set_awaiting_join(member, None)
                if member.awaiting_sync is not None:
                    replies.append(member.awaiting_sync)
                    member.awaiting_sync = None
        return replies

    def on_loaded(self, now_ms: int) -> Result:
        """After a load: every member's session starts now; a group over group.max.size
        (lowered since it was written) rebalances, so its last joiners are turned away."""
        result = Result()
        for group in list(self.shard.groups.values()):
            for member in group.members.values():
                self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
            if group.size > self._config.max_size:
                result.extend(self._prepare_rebalance(group, now_ms))
        return result

    def persisted_view(self, group: ClassicGroup | str) -> GroupMetadataValue | None:
        """The group's last written GroupMetadata value: what a reload would rebuild."""
        group_id = group if isinstance(group, str) else group.group_id
        return self._persisted.get(group_id)

    def persisted_ids(self, group_id: str) -> frozenset[str] | None:
        """The member ids of persisted_view(group_id)."""
        return self._persisted_ids.get(group_id)


def _protocols(protocols: Iterable[Protocol]) -> list[Protocol]:
    return [(name, bytes(metadata)) for name, metadata in protocols]


def _rebalance_timeout(request: JoinGroupRequest) -> int:
    # JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout.
    if request.api_version == 0 or request.rebalance_timeout_ms < 0:
        return request.session_timeout_ms
    return request.rebalance_timeout_ms


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current

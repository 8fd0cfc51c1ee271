"""Classic and consumer members in one group (KIP-848 online migration, reference B.14).

Theory of operation. A group id names one group, classic or consumer. When a classic
client (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) meets a consumer group, it becomes a
*classic-protocol member* of that group: its JoinGroup runs the consumer protocol's
pipeline (ConsumerGroupManager.update_member) with the subscription and owned partitions
taken from its embedded ConsumerProtocol subscription, and it is answered with its member
epoch as the generation and no members to assign (the coordinator assigns). SyncGroup
hands it its current assignment; Heartbeat tells it REBALANCE_IN_PROGRESS whenever it
must rejoin to move on (a newer target, partitions to revoke, or awaited partitions now
free). Its session is its own session timeout; a JoinGroup it does not follow with a
SyncGroup, or a rejoin it does not make, fences it after its rebalance timeout.

Conversions (group.consumer.migration.policy):

* Upgrade: a ConsumerGroupHeartbeat joining a live classic group of protocol type
  "consumer" converts it: its members become classic-protocol members of a new consumer
  group at epoch = generation, keeping their assignments (GroupMetadata tombstone, then the
  consumer-group records). Parked JoinGroup/SyncGroup requests are answered
  REBALANCE_IN_PROGRESS: those members rejoin through the consumer group.
* Downgrade: when members leave or are fenced and only classic-protocol members remain,
  the consumer group is deleted and a classic group written in its place (Stable, the
  group epoch as generation, each member's target as its assignment); a rebalance then
  starts, so the members rejoin a plain classic group.
* An empty group of either type simply becomes the other type (the heartbeat or JoinGroup
  deletes it in the same write).

Everything here emits records (the runtime replays them) and arms timers; nothing changes
the groups directly, except answering the parked classic requests of a group being
converted.
"""

from __future__ import annotations

import struct
import uuid
from typing import TYPE_CHECKING

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)

from ..classic import messages as cm
from ..classic.consumer_protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from ..classic.group import ClassicGroup
from ..classic.rebalance import heartbeat_key
from ..classic.rebalance import join_key as classic_join_key
from ..classic.rebalance import sync_key as classic_sync_key
from ..result import Record, Reply, Result
from ..topics import named_partitions
from .change import GroupChange, HeartbeatError
from .group import ConsumerGroup, target_to_record
from .member import ConsumerGroupMember, MemberState
from .reconcile import replace_static_member

if TYPE_CHECKING:
    from ..shard_view import ConsumerManagerView

CONSUMER_PROTOCOL_TYPE = "consumer"
JOIN_REQUIRES_KNOWN_MEMBER_ID_VERSION = 4
SYNC_REQUIRES_PROTOCOL_VERSION = 5


def join_key(group_id: str, member_id: str) -> str:
    return f"join-{group_id}-{member_id}"


def sync_key(group_id: str, member_id: str) -> str:
    return f"sync-{group_id}-{member_id}"


def downgrade_key(group_id: str) -> str:
    return f"downgrade-{group_id}"


class ClassicMembers:
    """The classic protocol's requests against consumer groups, and the conversions."""

    def __init__(self, manager: ConsumerManagerView) -> None:
        self.manager = manager
        self.shard = manager.shard

    # -- policy ------------------------------------------------------------------------------

    @property
    def _policy(self) -> str:
        return str(self.shard.config.consumer_migration_policy).lower()

    def upgrade_allowed(self) -> bool:
        return self._policy in ("bidirectional", "upgrade")

    def downgrade_allowed(self) -> bool:
        return self._policy in ("bidirectional", "downgrade")

    # ========================================================================================
    # JoinGroup
    # ========================================================================================

    def join(
        self, group: ConsumerGroup, request: cm.JoinGroupRequest, reply: Reply, now_ms: int
    ) -> Result:
        """JoinGroup from a classic client to a consumer group. Answers at once (after the
        records are durable) with the member epoch as generation, protocol type "consumer",
        its first protocol, no leader and no members. Errors: INCONSISTENT_GROUP_PROTOCOL
        (migration disabled, another protocol type, no protocol every classic member
        supports, an unreadable subscription), GROUP_MAX_SIZE_REACHED, MEMBER_ID_REQUIRED
        (v4+ with a new id), UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID,
        FENCED_MEMBER_EPOCH (reconciliation), UNKNOWN_SERVER_ERROR (assignor)."""
        result = Result()

        def fail(error: ErrorCode, member_id: str = "") -> Result:
            out = Result()
            out.reply(reply, cm.JoinGroupResponse(error, member_id=member_id or request.member_id))
            return out

        config = self.shard.config
        if self._policy == "disabled":
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        names = [name for name, _ in request.protocols]
        if (
            request.protocol_type != CONSUMER_PROTOCOL_TYPE
            or not names
            or not _supported_by_all(group, names)
        ):
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        member_id = request.member_id
        instance_id = request.group_instance_id
        static_owner = group.static_member_id(instance_id)
        if (
            static_owner is None
            and len(group) >= config.consumer_max_size
            and (not member_id or member_id not in group.metadata)
        ):
            return fail(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if not member_id and instance_id is None:
            member_id = self.shard.ids.new_uuid()
            if request.api_version >= JOIN_REQUIRES_KNOWN_MEMBER_ID_VERSION:
                # Kafka remembers nothing for this round trip: the rejoin names the id.
                return fail(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        elif not member_id:
            member_id = self.shard.ids.new_uuid()
        try:
            subscription = decode_subscription(request.protocols[0][1])
        except ConsumerProtocolError:
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)

        change = GroupChange()
        member: ConsumerGroupMember | None
        old_meta: ConsumerGroupMemberMetadataValue | None = None
        if instance_id is not None and static_owner is None and request.member_id:
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        if instance_id is not None and static_owner not in (None, member_id):
            assert static_owner is not None
            if request.member_id:
                return fail(ErrorCode.FENCED_INSTANCE_ID)
            old = group.member(static_owner)
            assert old is not None
            # A classic JoinGroup replaces the instance's owner whatever its protocol and
            # epoch: Kafka's check for an unreleased instance applies only when both use
            # the consumer protocol (A.5: classic never returns UNRELEASED_INSTANCE_ID), so
            # a rolling downgrade of static members to the classic protocol goes through.
            if (
                group.metadata[static_owner].classic_member_metadata is None
                and self.downgrade_allowed()
                and len(group) <= config.max_size
                and group.classic_members == len(group) - 1  # every other member is classic
            ):
                downgraded = self._downgrade_on_replacement(
                    group, static_owner, request, reply, now_ms
                )
                if downgraded is not None:
                    return downgraded
            change.replaced = static_owner
            change.metadata[static_owner] = None
            change.target[static_owner] = None
            change.target[member_id] = group.target.get(static_owner, {})
            member = replace_static_member(old, member_id)
            old_meta = group.metadata[static_owner]
            result.records.extend(self.manager.replacement_records(group, static_owner, member))
        else:
            # As Kafka: an id handed out by MEMBER_ID_REQUIRED (or any id) makes a member.
            member = group.member(member_id)
            if member is None:
                member = ConsumerGroupMember(member_id)
            else:
                old_meta = group.metadata[member_id]

        image = self.shard.topics
        owned: list[tuple[uuid.UUID, list[int]]] = []
        for topic, partitions in subscription.owned_partitions:
            topic_id = image.topic_id(topic)
            if topic_id is not None:
                owned.append((topic_id, list(partitions)))
        new_meta = ConsumerGroupMemberMetadataValue(
            instance_id=instance_id,
            rack_id=subscription.rack_id,
            client_id=request.client_id,
            client_host=request.client_host,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            subscribed_topic_regex=None,
            rebalance_timeout_ms=_rebalance_timeout(request),
            server_assignor=None,
            classic_member_metadata=ClassicMemberMetadata(
                request.session_timeout_ms,
                tuple(ClassicProtocol(name, bytes(md)) for name, md in request.protocols),
            ),
        )
        try:
            new_member, _, _ = self.manager.update_member(
                group,
                change,
                member,
                old_meta,
                new_meta,
                owned,
                now_ms,
                result.records,
                session_timeout_ms=request.session_timeout_ms,
            )
        except HeartbeatError as e:
            return fail(e.error, member_id)
        gid = group.group_id
        self.shard.timer.cancel(join_key(gid, member_id))
        self._schedule_fence(
            sync_key(gid, member_id), gid, member_id, new_meta.rebalance_timeout_ms
        )
        result.reply(
            reply,
            cm.JoinGroupResponse(
                generation_id=new_member.member_epoch,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=names[0],
                leader="",
                member_id=member_id,
            ),
        )
        return result

    # ========================================================================================
    # SyncGroup, Heartbeat, LeaveGroup
    # ========================================================================================

    def _classic_member(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> tuple[ConsumerGroupMember | None, ErrorCode]:
        """Kafka's lookups for a classic request: the static member (UNKNOWN_MEMBER_ID,
        FENCED_INSTANCE_ID), then a member that must use the classic protocol."""
        if instance_id is not None:
            owner = group.static_member_id(instance_id)
            if owner is None:
                return None, ErrorCode.UNKNOWN_MEMBER_ID
            if owner != member_id:
                return None, ErrorCode.FENCED_INSTANCE_ID
        member = group.member(member_id)
        if member is None or group.metadata[member_id].classic_member_metadata is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        return member, ErrorCode.NONE

    def sync(
        self, group: ConsumerGroup, request: cm.SyncGroupRequest, reply: Reply, now_ms: int
    ) -> Result:
        """SyncGroup: the member's current assignment, ConsumerProtocol-encoded; writes
        nothing. Errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
        INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS (a newer target exists: rejoin)."""
        result = Result()
        member, error = self._classic_member(group, request.member_id, request.group_instance_id)
        meta = group.metadata.get(request.member_id)
        protocol = _protocol_name(meta)
        if member is not None and meta is not None:
            if request.generation_id != member.member_epoch:
                error = ErrorCode.ILLEGAL_GENERATION
            elif (
                request.protocol_type is not None
                and request.protocol_type != CONSUMER_PROTOCOL_TYPE
            ) or (request.protocol_name is not None and request.protocol_name != protocol):
                error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            elif (
                group.assignment_epoch > member.member_epoch
                and member.state is not MemberState.UNREVOKED_PARTITIONS
            ):
                error = ErrorCode.REBALANCE_IN_PROGRESS
                self._arm_join_timeout(group.group_id, member.member_id, meta)
        if error is not ErrorCode.NONE or member is None or meta is None:
            result.reply(reply, cm.SyncGroupResponse(error))
            return result
        gid = group.group_id
        self.shard.timer.cancel(sync_key(gid, member.member_id))
        self._touch(gid, member.member_id, meta)
        result.reply(
            reply,
            cm.SyncGroupResponse(
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=protocol,
                assignment=_assignment_bytes(
                    named_partitions(self.shard.topics, member.assigned_partitions),
                    _first_metadata(meta),
                ),
            ),
        )
        return result

    def heartbeat(
        self, group: ConsumerGroup, request: cm.HeartbeatRequest, reply: Reply, now_ms: int
    ) -> Result:
        """Heartbeat: refreshes the session; writes nothing. REBALANCE_IN_PROGRESS when the
        member must rejoin to make progress (and the join timeout starts). Errors:
        UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION."""
        result = Result()
        member, error = self._classic_member(group, request.member_id, request.group_instance_id)
        meta = group.metadata.get(request.member_id)
        if member is not None and meta is not None:
            if request.generation_id != member.member_epoch:
                error = ErrorCode.ILLEGAL_GENERATION
            else:
                self._touch(group.group_id, member.member_id, meta)
                if self._must_rejoin(group, member):
                    error = ErrorCode.REBALANCE_IN_PROGRESS
                    self._arm_join_timeout(group.group_id, member.member_id, meta)
        result.reply(reply, cm.HeartbeatResponse(error))
        return result

    def leave(
        self, group: ConsumerGroup, request: cm.LeaveGroupRequest, reply: Reply, now_ms: int
    ) -> Result:
        """LeaveGroup: removes the named members (of either protocol) in one write with one
        epoch bump (and a downgrade if only classic members remain). Per member:
        UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID."""
        result = Result()
        answers: list[cm.LeaveMemberResponse] = []
        leaving: list[str] = []
        for m in request.members:
            error = ErrorCode.NONE
            member_id = m.member_id
            if m.group_instance_id is not None:
                owner = group.static_member_id(m.group_instance_id)
                if owner is None:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
                elif member_id and owner != member_id:
                    error = ErrorCode.FENCED_INSTANCE_ID
                else:
                    member_id = owner
            elif member_id not in group.metadata:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            if error is ErrorCode.NONE and member_id not in leaving:
                leaving.append(member_id)
            answers.append(cm.LeaveMemberResponse(m.member_id, m.group_instance_id, error))
        if leaving:
            result.records.extend(self.manager.removal_records(group, leaving, now_ms))
        if request.api_version < 3:
            result.reply(reply, cm.LeaveGroupResponse(answers[0].error_code))
        else:
            result.reply(reply, cm.LeaveGroupResponse(ErrorCode.NONE, answers))
        return result

    def _must_rejoin(self, group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Kafka: a newer target, partitions to revoke, or every awaited partition free
        (`!waitingOnUnreleasedPartition`): a rejoin while some are still held would only
        hand over part of them and cost another rejoin for the rest."""
        if member.member_epoch < group.assignment_epoch:
            return True
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            return True
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            for topic, partitions in group.target.get(member.member_id, {}).items():
                held = member.assigned_partitions.get(topic, {})
                for p in partitions:
                    if p not in held and group.current_partition_epoch(topic, p) != -1:
                        return False  # still waiting for this one
            return True
        return False

    # -- timers --------------------------------------------------------------------------

    def _touch(self, group_id: str, member_id: str, meta: ConsumerGroupMemberMetadataValue) -> None:
        classic = meta.classic_member_metadata
        assert classic is not None
        self.manager.schedule_session_timeout(group_id, member_id, classic.session_timeout_ms)

    def _arm_join_timeout(
        self, group_id: str, member_id: str, meta: ConsumerGroupMemberMetadataValue
    ) -> None:
        key = join_key(group_id, member_id)
        if not self.shard.timer.is_scheduled(key):
            self._schedule_fence(key, group_id, member_id, meta.rebalance_timeout_ms)

    def _schedule_fence(self, key: str, group_id: str, member_id: str, delay_ms: int) -> None:
        """Fence the member when the timer fires (a JoinGroup or SyncGroup that never came),
        if it is still the same member of the same group."""

        def fire(now_ms: int) -> Result:
            group = self.manager.groups.get(group_id)
            if group is not None and member_id in group.metadata:
                self.manager.fence_later(group, member_id, key)
            return Result()

        self.shard.timer.schedule(key, max(0, delay_ms), fire)

    def cancel_timers(self, group_id: str, member_id: str) -> None:
        self.shard.timer.cancel(join_key(group_id, member_id))
        self.shard.timer.cancel(sync_key(group_id, member_id))

    # ========================================================================================
    # Upgrade: a consumer-protocol member joins a live classic group
    # ========================================================================================

    def upgrade(
        self, classic: ClassicGroup, records: list[Record], now_ms: int
    ) -> ConsumerGroup | str:
        """The consumer group a live classic group becomes (B.14), with its records
        appended to `records` (the classic group's tombstone first), or the reason it
        cannot (GROUP_ID_NOT_FOUND's message). The group returned is built from those
        records but not registered: replaying them does that."""
        gid = classic.group_id
        cannot = f"Cannot upgrade classic group {gid} to consumer group because"
        if not self.upgrade_allowed():
            return f"{cannot} the online upgrade is disabled."
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return f"{cannot} its protocol type is {classic.protocol_type}, not consumer."
        if classic.size > self.shard.config.consumer_max_size:
            return f"{cannot} its size exceeds group.consumer.max.size."
        image = self.shard.topics
        epoch = max(classic.generation_id, 1)
        converted: list[Record] = [(GroupMetadataKey(gid), None)]
        targets: list[Record] = []
        currents: list[Record] = []
        taken: set[tuple[uuid.UUID, int]] = set()
        for member in classic.members.values():
            try:
                subscription = decode_subscription(member.metadata(classic.protocol_name))
                assignment = decode_assignment(member.assignment)
            except ConsumerProtocolError:
                return f"{cannot} a member's subscription or assignment cannot be read."
            if assignment.user_data:
                return f"{cannot} an unsupported custom assignor is in use."
            partitions: dict[uuid.UUID, dict[int, int]] = {}
            for topic, parts in assignment.partitions:
                topic_id = image.topic_id(topic)
                if topic_id is None:
                    continue
                for p in parts:
                    if (topic_id, p) not in taken:  # never hand a partition out twice
                        taken.add((topic_id, p))
                        partitions.setdefault(topic_id, {})[p] = epoch
            converted.append(
                (
                    ConsumerGroupMemberMetadataKey(gid, member.member_id),
                    ConsumerGroupMemberMetadataValue(
                        instance_id=member.group_instance_id,
                        rack_id=subscription.rack_id,
                        client_id=member.client_id,
                        client_host=member.client_host,
                        subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                        subscribed_topic_regex=None,
                        rebalance_timeout_ms=member.rebalance_timeout_ms,
                        server_assignor=None,
                        classic_member_metadata=ClassicMemberMetadata(
                            member.session_timeout_ms,
                            tuple(ClassicProtocol(n, bytes(md)) for n, md in member.protocols),
                        ),
                    ),
                )
            )
            snapshot = ConsumerGroupMember(
                member.member_id,
                instance_id=member.group_instance_id,
                member_epoch=epoch,
                previous_member_epoch=epoch,
                assigned_partitions=partitions,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
            )
            targets.append(
                (
                    ConsumerGroupTargetAssignmentMemberKey(gid, member.member_id),
                    target_to_record({t: frozenset(ps) for t, ps in partitions.items()}),
                )
            )
            currents.append(
                (
                    ConsumerGroupCurrentMemberAssignmentKey(gid, member.member_id),
                    snapshot.to_record(),
                )
            )
        group = ConsumerGroup(gid)
        for key, value in converted[1:]:
            group.apply(key, value)
        metadata_hash = self.manager.metadata_hash(group)
        converted.append(
            (ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(epoch, metadata_hash))
        )
        converted.extend(targets)
        converted.append(
            (
                ConsumerGroupTargetAssignmentMetadataKey(gid),
                ConsumerGroupTargetAssignmentMetadataValue(epoch, now_ms),
            )
        )
        converted.extend(currents)
        for key, value in converted[len(classic.members) + 1 :]:
            group.apply(key, value)
        records.extend(converted)
        self.shard.events.cause(
            gid, "", "group_converted", "upgraded to a consumer group: a consumer-protocol member"
        )
        return group

    def finish_upgrade(
        self, classic: ClassicGroup, result: Result, replaced: str | None = None
    ) -> None:
        """Once the joining heartbeat succeeded: answer the classic group's parked
        requests (they rejoin through the consumer group), move its timers (not those of
        `replaced`, the static member the joining one took over: it is gone)."""
        gid = classic.group_id
        self.shard.timer.cancel(classic_join_key(gid))
        self.shard.timer.cancel(classic_sync_key(gid))
        for member in classic.members.values():
            self.shard.timer.cancel(heartbeat_key(gid, member.member_id))
            if member.awaiting_join is not None:
                result.reply(
                    member.awaiting_join,
                    cm.JoinGroupResponse(
                        ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id
                    ),
                )
                classic.set_awaiting_join(member, None)
            if member.awaiting_sync is not None:
                result.reply(
                    member.awaiting_sync, cm.SyncGroupResponse(ErrorCode.REBALANCE_IN_PROGRESS)
                )
                member.awaiting_sync = None
            if member.member_id != replaced:
                self.manager.schedule_session_timeout(
                    gid, member.member_id, member.session_timeout_ms
                )

    # ========================================================================================
    # Downgrade: only classic members are left
    # ========================================================================================

    def _classic_value(
        self,
        group: ConsumerGroup,
        member_ids: list[str],
        protocol: str,
        now_ms: int,
        joining: MemberMetadata | None = None,
    ) -> GroupMetadataValue:
        """The GroupMetadata of the classic group that replaces `group`: Stable at
        generation = the group epoch, its classic members (and `joining`) with their target
        as assignment, in the ConsumerProtocol version of their subscription."""
        members = []
        for member_id in member_ids:
            meta = group.metadata[member_id]
            classic = meta.classic_member_metadata
            assert classic is not None
            metadata = next(p.metadata for p in classic.supported_protocols if p.name == protocol)
            members.append(
                MemberMetadata(
                    member_id=member_id,
                    group_instance_id=meta.instance_id,
                    client_id=meta.client_id,
                    client_host=meta.client_host,
                    rebalance_timeout=meta.rebalance_timeout_ms,
                    session_timeout=classic.session_timeout_ms,
                    subscription=metadata,
                    assignment=_assignment_bytes(
                        named_partitions(self.shard.topics, group.target.get(member_id, {})),
                        metadata,
                    ),
                )
            )
        if joining is not None:
            members.append(joining)
        return GroupMetadataValue(
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            generation=group.group_epoch,
            protocol=protocol,
            leader=members[0].member_id,
            current_state_timestamp=now_ms,
            members=tuple(members),
        )

    def _downgrade_on_replacement(
        self,
        group: ConsumerGroup,
        replaced: str,
        request: cm.JoinGroupRequest,
        reply: Reply,
        now_ms: int,
    ) -> Result | None:
        """S82: a classic static member takes the place of the last consumer-protocol
        (static, temporarily left) member: the group becomes a classic group in which the
        newcomer inherits the replaced member's target, and its JoinGroup is then served
        by the classic group (a static rejoin: answered at once with that assignment).
        None when no protocol is common to everyone (the normal path then applies)."""
        others = [m for m in group.metadata if m != replaced]
        protocol = _first_common([name for name, _ in request.protocols], group, others)
        if protocol is None:
            return None
        gid = group.group_id
        subscription = next(md for name, md in request.protocols if name == protocol)
        joining = MemberMetadata(
            member_id=replaced,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout=_rebalance_timeout(request),
            session_timeout=request.session_timeout_ms,
            subscription=bytes(subscription),
            assignment=_assignment_bytes(
                named_partitions(self.shard.topics, group.target.get(replaced, {})), subscription
            ),
        )
        value = self._classic_value(group, others, protocol, now_ms, joining)
        for member_id in group.metadata:
            self.manager.cancel_member_timers(gid, member_id)
        self.shard.classic.adopt(ClassicGroup.from_record(gid, value, now_ms))
        result = Result(
            records=self.manager.deletion_records(group),
            applied_records=[(GroupMetadataKey(gid), value)],
        )
        return self.shard.classic.join_classic_group(request, reply, now_ms, result)

    def maybe_downgrade(
        self,
        group: ConsumerGroup,
        removed: list[str],
        new_epoch: int,
        records: list[Record],
        now_ms: int,
    ) -> bool:
        """After `removed` leave: if every remaining member uses the classic protocol (and
        the policy and group.max.size allow), replace the consumer group by a classic group
        and start its rebalance from a timer. True if it did; `records` (the removal's
        tombstones so far) are then replaced, as Kafka's convertToClassicGroup writes them:
        every tombstone of the group (the removed members' included), then the classic
        group's GroupMetadata at generation = the group epoch (no bump: `new_epoch` is
        unused), so a member at that epoch is told REBALANCE_IN_PROGRESS, not
        ILLEGAL_GENERATION, and rejoins keeping its partitions. O(removed) unless it
        downgrades: each of a mass expiry's removals asks."""
        metadata = group.metadata
        leaving = {m for m in removed if m in metadata}
        classic_leaving = sum(1 for m in leaving if metadata[m].classic_member_metadata is not None)
        remaining_count = len(metadata) - len(leaving)
        if (
            remaining_count == 0
            or group.classic_members - classic_leaving != remaining_count  # a consumer one stays
            or not self.downgrade_allowed()
            or remaining_count > self.shard.config.max_size
        ):
            return False
        remaining = [m for m in metadata if m not in leaving]
        protocol = _common_protocol(group, remaining)
        if protocol is None:
            return False
        gid = group.group_id
        value = self._classic_value(group, remaining, protocol, now_ms)
        for member_id in group.metadata:
            self.manager.cancel_member_timers(gid, member_id)
        # The consumer group goes (every member's records, regexes included), the classic
        # comes.
        records[:] = self.manager.deletion_records(group)
        records.append((GroupMetadataKey(gid), value))
        self.shard.events.cause(
            gid, "", "group_converted", "downgraded to a classic group: only classic members remain"
        )
        self.shard.timer.schedule(
            downgrade_key(gid),
            0,
            lambda now_ms: self.shard.classic.after_downgrade(gid, now_ms),
        )
        return True


def _rebalance_timeout(request: cm.JoinGroupRequest) -> int:
    if request.api_version == 0 or request.rebalance_timeout_ms < 0:
        return request.session_timeout_ms
    return request.rebalance_timeout_ms


def _protocol_name(meta: ConsumerGroupMemberMetadataValue | None) -> str | None:
    if meta is None or meta.classic_member_metadata is None:
        return None
    protocols = meta.classic_member_metadata.supported_protocols
    return protocols[0].name if protocols else None


def _first_metadata(meta: ConsumerGroupMemberMetadataValue) -> bytes:
    classic = meta.classic_member_metadata
    assert classic is not None and classic.supported_protocols
    return classic.supported_protocols[0].metadata


def _assignment_bytes(partitions: list[tuple[str, list[int]]], subscription: bytes) -> bytes:
    """A ConsumerProtocol assignment at the version of the member's subscription, as Kafka
    writes it (versions 0-3 share one layout: only the version header differs; above 3 it
    is 3, and unreadable metadata gets 0)."""
    data = encode_assignment(partitions)
    try:
        (version,) = struct.unpack_from(">h", subscription)
    except struct.error:
        version = 0
    return struct.pack(">h", min(max(version, 0), 3)) + data[2:]


def _supported_by_all(group: ConsumerGroup, names: list[str]) -> bool:
    """At least one of `names` is supported by every classic member (none: vacuous).
    O(names), from the group's counts (Kafka's classicProtocolMembersSupportedProtocols):
    every classic JoinGroup asks."""
    if not group.classic_members:
        return bool(names)
    return any(group.classic_protocols[name] == group.classic_members for name in set(names))


def _protocol_names(group: ConsumerGroup, member_id: str) -> list[str]:
    """The member's classic protocols in its order of preference (none: not classic)."""
    classic = group.metadata[member_id].classic_member_metadata
    return [] if classic is None else [p.name for p in classic.supported_protocols]


def _first_common(candidates: list[str], group: ConsumerGroup, member_ids: list[str]) -> str | None:
    """The first of `candidates` that every one of `member_ids` supports."""
    supported = [set(_protocol_names(group, m)) for m in member_ids]
    return next((name for name in candidates if all(name in s for s in supported)), None)


def _common_protocol(group: ConsumerGroup, member_ids: list[str]) -> str | None:
    """The first protocol of the first member that every member supports."""
    return _first_common(_protocol_names(group, member_ids[0]), group, member_ids)


__all__ = ["ClassicMembers"]

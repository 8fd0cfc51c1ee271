"""The consumer rebalance protocol (KIP-848): ConsumerGroupHeartbeat, its timers, and the
consumer-group side of describe/list/delete, following Kafka 4.3's GroupMetadataManager
(reference sections B.3-B.13).

Theory of operation. A heartbeat runs Kafka's pipeline against the group as its records
built it: validate, find or create the group and the member, check the member epoch,
update the member's subscription, decide whether the group epoch moves, compute a new
target assignment if one is due, reconcile the member towards its target
(reconcile.py: revoke before assign), arm its timers, answer. Each step only *emits*
records; the runtime replays them into the group (group.py) after the handler returns, so
the handler reads the group as it was and carries its own new values (the member snapshot,
its metadata, the target) along. An error raised by any step discards everything the
request emitted: nothing is written and no timer moved.

Where we deliberately differ from Kafka (README, Decisions):

* Regular expressions are resolved inside the heartbeat that needs them (and again when
  the topic image changed), not by a background task: RE2 matching over the topic names
  is fast, and the member gets its partitions in the same round trip instead of a later
  one. The epoch still moves only when the resolved topics change.
* A pending target assignment (group.consumer.assignment.interval.ms) is computed by a
  timer when the interval ends, not by whichever heartbeat comes next.
* Members that are reconciling (or whose group has a newer target) are asked to heartbeat
  every `consumer_reconciling_heartbeat_interval_ms` instead of the full interval, so a
  partition released by one member reaches the next within a fraction of a second.

Timers (keys as Kafka's): `session-timeout-<group>-<member>`,
`rebalance-timeout-<group>-<member>` (a member slow to revoke is fenced),
`assignment-<group>` (ours, above). Callbacks re-check that the group and member are still
the ones they were armed for.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
)

from ..assignors import (
    DEFAULT_ASSIGNORS,
    GroupSpec,
    LazyAssignment,
    MemberSubscription,
    PartitionAssignor,
)
from ..assignors.spec import PartitionAssignorError, TopicDescriber, TopicMetadata
from ..classic.group import GroupState
from ..classic.messages import ListedGroup
from ..result import Record, Reply, Result
from ..topics import TopicImage
from .change import GroupChange, HeartbeatError
from .group import (
    ConsumerGroup,
    TopicAssignment,
    most_popular,
    target_to_record,
)
from .member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupMember,
    MemberState,
)
from .messages import (
    DescribedConsumerGroup,
    DescribedConsumerMember,
    DescribedTopicPartitions,
    HeartbeatRequest,
    HeartbeatResponse,
    TopicPartitionList,
)
from .migration import ClassicMembers
from .reconcile import (
    FencedMemberEpoch,
    compute_next_assignment,
    replace_static_member,
    static_member_temporary_leave,
)
from .regex import resolve_regex, validate_regex

if TYPE_CHECKING:
    from ..shard import GroupShard

CONSUMER_PROTOCOL_TYPE = "consumer"
CONSUMER_GROUP_TYPE = "consumer"
# Members whose offloaded target is written per shard event (~1 ms of replay each).
OFFLOAD_SLICE = 200
OFFLOAD_SLICE_PARTITIONS = 20_000


def session_timeout_key(group_id: str, member_id: str) -> str:
    return f"session-timeout-{group_id}-{member_id}"


def rebalance_timeout_key(group_id: str, member_id: str) -> str:
    return f"rebalance-timeout-{group_id}-{member_id}"


def assignment_key(group_id: str) -> str:
    return f"assignment-{group_id}"


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


class ConsumerGroupManager:
    def __init__(self, shard: GroupShard) -> None:
        self.shard = shard
        by_name = {a.name: a for a in DEFAULT_ASSIGNORS}
        self.assignors: dict[str, PartitionAssignor] = {
            name: by_name[name] for name in shard.config.consumer_assignors if name in by_name
        }
        self.default_assignor = next(iter(self.assignors))
        self.rebalances = 0  # group epoch bumps from heartbeats (Kafka's sensor)
        self.migration = ClassicMembers(self)

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.shard.consumer_groups

    # ========================================================================================
    # ConsumerGroupHeartbeat
    # ========================================================================================

    def validate(self, request: HeartbeatRequest) -> HeartbeatError | None:
        """Kafka's request validation (B.3), in its order, with its messages."""
        epoch = request.member_epoch
        if (request.api_version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) and not (
            request.member_id or ""
        ).strip():
            return HeartbeatError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if not (request.group_id or "").strip():
            return HeartbeatError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if _blank(request.instance_id):
            return HeartbeatError(ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
        if _blank(request.rack_id):
            return HeartbeatError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        if epoch == 0:
            if request.rebalance_timeout_ms == -1:
                return HeartbeatError(
                    ErrorCode.INVALID_REQUEST,
                    "RebalanceTimeoutMs must be provided in first request.",
                )
            if request.topic_partitions is None or request.topic_partitions:
                return HeartbeatError(
                    ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."
                )
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                return HeartbeatError(
                    ErrorCode.INVALID_REQUEST,
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                    "(re-)joining.",
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                return HeartbeatError(ErrorCode.INVALID_REQUEST, "InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return HeartbeatError(ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.assignors:
            return HeartbeatError(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {request.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self.assignors)}.",
            )
        return None

    def heartbeat(self, request: HeartbeatRequest, reply: Reply, now_ms: int) -> Result:
        """ConsumerGroupHeartbeat v0-v1. Emits, as Kafka: MemberMetadata, RegularExpression,
        ConsumerGroupMetadata (epoch bump), TargetAssignmentMember/-Metadata (new target),
        CurrentMemberAssignment (reconciliation), tombstones on leave and static
        replacement, and a GroupMetadata tombstone when it converts an empty classic group.
        Errors (top level, nothing written): INVALID_REQUEST, UNSUPPORTED_ASSIGNOR,
        GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
        FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID, INVALID_REGULAR_EXPRESSION,
        UNKNOWN_SERVER_ERROR (the assignor failed)."""
        result = Result()
        steady = self._steady(request)
        if steady is not None:
            result.reply(reply, steady)
            return result
        try:
            error = self.validate(request)
            if error is not None:
                raise error
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                response = self._leave(request, result, now_ms)
            else:
                response = self._heartbeat(request, result, now_ms)
        except HeartbeatError as e:
            result = Result()
            # As Kafka's: a fresh response, MemberId null and MemberEpoch 0.
            response = HeartbeatResponse(error_code=e.error, error_message=e.message)
        result.reply(reply, response)
        return result

    def _steady(self, request: HeartbeatRequest) -> HeartbeatResponse | None:
        """`steady` for a request that sets no optional field."""
        if (
            request.rebalance_timeout_ms != -1
            or request.subscribed_topic_names is not None
            or request.subscribed_topic_regex is not None
            or request.server_assignor is not None
            or request.rack_id is not None
            or request.topic_partitions is not None
        ):
            return None
        return self.steady(
            request.group_id,
            request.member_id,
            request.member_epoch,
            request.instance_id,
            request.client_id,
            request.client_host,
        )

    def steady(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        client_id: str,
        client_host: str,
    ) -> HeartbeatResponse | None:
        """The common heartbeat, answered without the pipeline (see `is_steady`): re-arms
        the member's session. None when the heartbeat is not steady: the caller then takes
        the full path (`heartbeat`)."""
        if not self.is_steady(
            group_id, member_id, member_epoch, instance_id, client_id, client_host
        ):
            return None
        return self.steady_answer(group_id, member_id, member_epoch)

    def steady_answer(self, group_id: str, member_id: str, member_epoch: int) -> HeartbeatResponse:
        """The answer to a heartbeat `is_steady` accepted (nothing ran since): the member's
        session re-armed, its epoch and the heartbeat interval."""
        settings = self.shard.consumer_settings(group_id)
        self.schedule_session_timeout(group_id, member_id, settings.session_timeout_ms)
        return HeartbeatResponse(
            member_id=member_id,
            member_epoch=member_epoch,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
        )

    def is_steady(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        client_id: str,
        client_host: str,
    ) -> bool:
        """Whether a heartbeat that sets no optional field (the caller checked) is steady:
        a known member at its epoch, reconciled to a target that is current, same client.
        For such a heartbeat the pipeline would write nothing and change nothing but the
        member's session timer. Reads only."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        member = group.members.get(member_id)
        meta = group.metadata.get(member_id)
        return not (
            member is None
            or meta is None
            or member_epoch != member.member_epoch
            or member_epoch <= 0
            or (instance_id is not None and instance_id != meta.instance_id)
            or client_id != meta.client_id
            or client_host != meta.client_host
            or meta.classic_member_metadata is not None
            or group.group_epoch != group.assignment_epoch
            or group.assigning_epoch is not None
            or group.checked_image_version != self.shard.topics.version
            or not member.is_reconciled_to(group.assignment_epoch)
        )

    def _heartbeat(
        self, request: HeartbeatRequest, result: Result, now_ms: int
    ) -> HeartbeatResponse:
        config = self.shard.config
        records = result.records
        group = self._group_for_heartbeat(request, records, now_ms)
        change = GroupChange()

        # Group size (B.4.2): a static member taking its own place is not a new member.
        member_id = request.member_id
        static_owner = group.static_member_id(request.instance_id)
        if (
            static_owner is None
            and len(group) >= config.consumer_max_size
            and (not member_id or member_id not in group.metadata)
        ):
            raise HeartbeatError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of "
                f"{config.consumer_max_size} members.",
            )
        if not member_id:  # v0: the coordinator names the member
            member_id = self.shard.ids.new_uuid()

        member, old_meta = self._find_member(group, request, member_id, static_owner, change)
        if change.replaced is not None:
            records.extend(self.replacement_records(group, change.replaced, member))

        new_meta = _updated_metadata(old_meta, request)
        owned = None
        if request.topic_partitions is not None:
            owned = [(t, ps) for t, ps in request.topic_partitions]
        new_member, target_epoch, group_epoch = self.update_member(
            group, change, member, old_meta, new_meta, owned, now_ms, records
        )
        classic = self.shard.classic_group(group.group_id)
        if (
            classic is not None
            and classic.state is not GroupState.EMPTY
            and group.group_id not in self.groups
        ):
            self.migration.finish_upgrade(classic, result, replaced=change.replaced)

        send_assignment = (
            request.member_epoch == 0
            or request.is_full()
            or new_member.assigned_partitions != member.assigned_partitions
        )
        return HeartbeatResponse(
            member_id=member_id,
            member_epoch=new_member.member_epoch,
            heartbeat_interval_ms=self._heartbeat_interval(
                group.group_id, new_member, target_epoch, group_epoch
            ),
            assignment=_assignment_list(new_member) if send_assignment else None,
        )

    def update_member(
        self,
        group: ConsumerGroup,
        change: GroupChange,
        member: ConsumerGroupMember,
        old_meta: ConsumerGroupMemberMetadataValue | None,
        new_meta: ConsumerGroupMemberMetadataValue,
        owned: list[tuple[uuid.UUID, list[int]]] | None,
        now_ms: int,
        records: list[Record],
        session_timeout_ms: int | None = None,
    ) -> tuple[ConsumerGroupMember, int, int]:
        """Steps B.4.5-B.4.9 of a member's heartbeat (or a classic member's JoinGroup):
        its new metadata, the group epoch bump, a new target if one is due, the member's
        reconciliation with the partitions it reports owning (`owned`, None: unknown), its
        timers. Emits the records; returns (the member's new snapshot, target epoch, group
        epoch). Raises HeartbeatError (nothing it emitted is kept, no timer moved)."""
        # Subscription and metadata (B.4.5).
        member_id = member.member_id
        if new_meta != old_meta:
            records.append((ConsumerGroupMemberMetadataKey(group.group_id, member_id), new_meta))
        change.metadata[member_id] = new_meta
        old_names = old_meta.subscribed_topic_names if old_meta else ()
        old_regex = (old_meta.subscribed_topic_regex if old_meta else None) or ""
        new_regex = new_meta.subscribed_topic_regex or ""
        subscription_changed = (
            new_meta.subscribed_topic_names != old_names or new_regex != old_regex
        )
        if new_regex != old_regex and new_regex and group.regex_subscribers[new_regex] == 0:
            message = validate_regex(new_regex)
            if message is not None:
                raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION, message)
        bump = subscription_changed
        old_assignor = old_meta.server_assignor if old_meta else None
        if not bump and new_meta.server_assignor != old_assignor:
            # Only the most popular assignor counts (counting members costs O(members)).
            bump = _preferred_assignor(group, change) != group.preferred_assignor()
        image = self.shard.topics
        image_moved = group.checked_image_version != image.version
        if new_regex != old_regex or image_moved:
            self._refresh_regexes(group, change, records, now_ms)
        metadata_hash = group.metadata_hash
        if bump or image_moved or change.resolved:
            metadata_hash = self.metadata_hash(group, change)
            bump = bump or metadata_hash != group.metadata_hash or bool(change.resolved)
        group_epoch = group.group_epoch
        if bump:
            group_epoch += 1
            self.rebalances += 1
            records.append(
                (
                    ConsumerGroupMetadataKey(group.group_id),
                    ConsumerGroupMetadataValue(group_epoch, metadata_hash),
                )
            )
            if group.has_legacy_partition_metadata:
                records.append((ConsumerGroupPartitionMetadataKey(group.group_id), None))

        # Target assignment (B.4.7), unless the assignment interval holds it back.
        target_epoch = group.assignment_epoch
        member_target = _target_of(group, change, member_id)
        if group_epoch > group.assignment_epoch and group.assigning_epoch is None:
            if not self._assignment_due(group, now_ms):
                self._schedule_assignment(group, now_ms)
            elif self._should_offload(group, change):
                self._offload_target(group, change, group_epoch, now_ms)
            else:
                target = self._compute_target(group, change, group_epoch, now_ms, records)
                target_epoch = group_epoch
                member_target = target.get(member_id, {})

        # Reconciliation (B.4.8).
        new_member = member
        if subscription_changed or not member.is_reconciled_to(target_epoch):
            try:
                new_member = compute_next_assignment(
                    member,
                    target_epoch,
                    member_target,
                    owned,
                    group.current_partition_epoch,
                    subscribed_topic_ids=self._subscribed_ids(group, change, new_meta),
                    enforce_subscription_consistency=subscription_changed,
                )
            except FencedMemberEpoch as e:
                raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, e.message) from None
        if new_member is not member or member_id not in group.members:
            records.append(
                (
                    ConsumerGroupCurrentMemberAssignmentKey(group.group_id, member_id),
                    new_member.to_record(),
                )
            )
            if new_member.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group.group_id, new_member, new_meta)
            else:
                self.shard.timer.cancel(rebalance_timeout_key(group.group_id, member_id))
        if change.replaced is not None:
            # Only now that nothing can fail: a failed heartbeat keeps the old member.
            self.cancel_member_timers(group.group_id, change.replaced)
        self.schedule_session_timeout(group.group_id, member_id, session_timeout_ms)
        # Set last: a heartbeat that fails must leave the change to be noticed again.
        group.checked_image_version = image.version
        return new_member, target_epoch, group_epoch

    def _group_for_heartbeat(
        self, request: HeartbeatRequest, records: list[Record], now_ms: int
    ) -> ConsumerGroup:
        """The consumer group (B.4.1). Epoch 0 creates it (an empty classic group of the
        same id is deleted in the same write); otherwise it must exist. A new group is not
        registered here: replaying its first record does that."""
        group_id = request.group_id
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.shard.classic_group(group_id)
        if classic is not None and classic.state is not GroupState.DEAD:
            if request.member_epoch != 0:
                raise HeartbeatError(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."
                )
            if classic.state is not GroupState.EMPTY:
                upgraded = self.migration.upgrade(classic, records, now_ms)
                if isinstance(upgraded, str):
                    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, upgraded)
                return upgraded
            records.append((GroupMetadataKey(group_id), None))
        elif request.member_epoch != 0:
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found."
            )
        return ConsumerGroup(group_id)

    def _find_member(
        self,
        group: ConsumerGroup,
        request: HeartbeatRequest,
        member_id: str,
        static_owner: str | None,
        change: GroupChange,
    ) -> tuple[ConsumerGroupMember, ConsumerGroupMemberMetadataValue | None]:
        """The member the request speaks for and its current metadata (B.4.4); a static
        member rejoining under a new id takes over its predecessor (recorded in `change`)."""
        epoch = request.member_epoch
        group_id = group.group_id
        if request.instance_id is None or (epoch == 0 and static_owner in (None, member_id)):
            member = group.member(member_id)
            if member is None:
                if epoch != 0:
                    raise HeartbeatError(
                        ErrorCode.UNKNOWN_MEMBER_ID,
                        f"Member {member_id} is not a member of group {group_id}.",
                    )
                return ConsumerGroupMember(member_id), None
            if epoch != 0:
                _check_epoch(member, request)
            return member, group.metadata[member_id]
        if epoch == 0:
            assert static_owner is not None
            old = group.member(static_owner)
            assert old is not None
            # As Kafka: only a consumer-protocol owner must have released the instance
            # (epoch -2). A classic static member never does (it sends no LeaveGroup when
            # it restarts, KIP-345), so a rolling upgrade to group.protocol=consumer
            # replaces it whatever its epoch; UNRELEASED_INSTANCE_ID is fatal to the client.
            if (
                old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
                and group.metadata[static_owner].classic_member_metadata is None
            ):
                raise HeartbeatError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {request.instance_id} cannot "
                    f"join the group because the instance id is owned by {static_owner} member.",
                )
            change.replaced = static_owner
            change.metadata[static_owner] = None
            change.target[static_owner] = None
            change.target[member_id] = group.target.get(static_owner, {})
            return replace_static_member(old, member_id), group.metadata[static_owner]
        _check_static_owner(static_owner, member_id, request.instance_id)
        member = group.member(member_id)
        assert member is not None
        _check_epoch(member, request)
        return member, group.metadata[member_id]

    def replacement_records(
        self, group: ConsumerGroup, old_id: str, member: ConsumerGroupMember
    ) -> list[Record]:
        """A static replacement (B.4.4): tombstones for the old member id, then the new id
        with the old one's metadata, target and assignment at epoch 0. The old member's
        timers are cancelled by the caller once the heartbeat cannot fail any more."""
        gid = group.group_id
        new_id = member.member_id
        old_meta = group.metadata[old_id]
        return [
            (ConsumerGroupCurrentMemberAssignmentKey(gid, old_id), None),
            (ConsumerGroupTargetAssignmentMemberKey(gid, old_id), None),
            (ConsumerGroupMemberMetadataKey(gid, old_id), None),
            (ConsumerGroupMemberMetadataKey(gid, new_id), old_meta),
            (
                ConsumerGroupTargetAssignmentMemberKey(gid, new_id),
                target_to_record(group.target.get(old_id, {})),
            ),
            (ConsumerGroupCurrentMemberAssignmentKey(gid, new_id), member.to_record()),
        ]

    # -- leaving -----------------------------------------------------------------------------

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
            _check_static_owner(owner, member_id, request.instance_id)
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
        used = _regex_users(group, change)
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

    # -- timers ------------------------------------------------------------------------------

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

    def _assignment_due(self, group: ConsumerGroup, now_ms: int) -> bool:
        interval = self.shard.consumer_settings(group.group_id).assignment_interval_ms
        return (
            interval <= 0
            or group.assignment_timestamp_ms <= 0
            or now_ms >= group.assignment_timestamp_ms + interval
        )

    def _schedule_assignment(self, group: ConsumerGroup, now_ms: int) -> None:
        """Compute the held-back target when the assignment interval ends."""
        key = assignment_key(group.group_id)
        if self.shard.timer.is_scheduled(key):
            return
        group_id = group.group_id
        interval = self.shard.consumer_settings(group_id).assignment_interval_ms
        delay_ms = group.assignment_timestamp_ms + interval - now_ms

        def fire(now_ms: int) -> Result:
            result = Result()
            live = self.groups.get(group_id)
            if (
                live is not None
                and live.group_epoch > live.assignment_epoch
                and live.metadata
                and live.assigning_epoch is None
            ):
                if self._should_offload(live, GroupChange()):
                    self._offload_target(live, GroupChange(), live.group_epoch, now_ms)
                    return result
                try:
                    self._compute_target(
                        live, GroupChange(), live.group_epoch, now_ms, result.records
                    )
                except HeartbeatError:
                    return Result()  # the next heartbeat reports the assignor's failure
            return result

        self.shard.timer.schedule(key, max(0, delay_ms), fire)

    # -- subscriptions, hashes, targets -----------------------------------------------------

    def _refresh_regexes(
        self, group: ConsumerGroup, change: GroupChange, records: list[Record], now_ms: int
    ) -> None:
        """Resolve the regexes the group uses after this change: new ones now, all of them
        again when the topic image moved since they were resolved. Records a regex whose
        topics changed, and a tombstone for one nobody uses any more."""
        used = _regex_users(group, change)
        image = self.shard.topics
        names: list[str] | None = None
        for regex in used:
            known = group.resolved_regexes.get(regex)
            if known is not None and known.version == image.version:
                continue
            if names is None:
                names = list(image.topic_names())
            topics = resolve_regex(regex, names)
            if known is not None and known.topics == topics:
                continue
            change.resolved[regex] = topics
            records.append(
                (
                    ConsumerGroupRegularExpressionKey(group.group_id, regex),
                    ConsumerGroupRegularExpressionValue(topics, image.version, now_ms),
                )
            )
        for regex in group.resolved_regexes:
            if regex not in used:
                change.resolved[regex] = None
                records.append((ConsumerGroupRegularExpressionKey(group.group_id, regex), None))

    def _subscribed_names(self, group: ConsumerGroup, change: GroupChange) -> set[str]:
        """Every topic name the group subscribes to once `change` applies."""
        counts = Counter(group.subscribed_names)
        regexes = _regex_users(group, change)
        for member_id, meta in change.metadata.items():
            old = group.metadata.get(member_id)
            if old is not None:
                counts.subtract(old.subscribed_topic_names)
            if meta is not None:
                counts.update(meta.subscribed_topic_names)
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
        return _topic_ids(
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
        assignment, member_records = _assign(
            gid, members, previous, assignor, self.shard.topics, group_epoch
        )
        records.extend(member_records)
        records.append(
            (
                ConsumerGroupTargetAssignmentMetadataKey(gid),
                ConsumerGroupTargetAssignmentMetadataValue(group_epoch, now_ms),
            )
        )
        self.shard.timer.cancel(assignment_key(gid))
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
        # What members that are gone held (no one holds it now): entries of non-members
        # tell the assignor what is unassigned (ConsumerGroup.departed_targets).
        for member_id, held in departed.items():
            gone = (
                change.metadata[member_id] is None
                if member_id in change.metadata
                else member_id not in group.metadata
            )
            if gone and member_id not in previous:
                previous[member_id] = held
                topics.update(held)
        # A member's assignor may have left group.consumer.assignors since it asked for it
        # (a restart with another config): the default one serves then.
        default = self._default_assignor(group.group_id)
        name = _preferred_assignor(group, change) or default
        assignor = self.assignors.get(name) or self.assignors[default]
        return PreviousTarget(previous, sizes, topics), assignor

    def _should_offload(self, group: ConsumerGroup, change: GroupChange) -> bool:
        """Large groups compute their target off the loop: many members, or many
        partitions (the cost of a target is in the partition sets it writes and replays).
        A registered group only: a new one is small, and its object is not live yet."""
        if self.groups.get(group.group_id) is not group:
            return False
        if not self.shard.consumer_settings(group.group_id).assignor_offload:
            return False
        config = self.shard.config
        if len(group) + len(change.metadata) >= config.consumer_offload_min_members:
            return True
        image = self.shard.topics
        partitions = sum(
            max(0, image.num_partitions(topic_id))
            for name in self._subscribed_names(group, change)
            if (topic_id := image.topic_id(name)) is not None
        )
        return partitions >= config.consumer_offload_min_partitions

    def _offload_target(
        self, group: ConsumerGroup, change: GroupChange, group_epoch: int, now_ms: int
    ) -> None:
        """Compute the target for `group_epoch` in a worker thread; meanwhile the group
        keeps its current target (heartbeats go on against it, as during an assignment
        interval). The result is written in slices of OFFLOAD_SLICE members, one shard
        event each, TargetAssignmentMetadata last, so that no event blocks the loop long.
        Members that left meanwhile are skipped; those that joined meanwhile get their
        target from the next assignment (their join moved the group epoch); a static
        member replaced meanwhile (which moves no epoch) hands its target to the member
        that replaced it (`_write_target_slice`)."""
        gid = group.group_id
        image = self.shard.topics
        spec: dict[str, MemberSubscription] | None = None
        metadata: dict[str, ConsumerGroupMemberMetadataValue] = {}
        resolved: dict[str, tuple[str, ...]] = {}
        if (
            group.spec_members is not None
            and group.spec_image_version == image.version
            and not change.resolved
        ):
            # Warm: the cached view with the change. Copied, since the thread iterates it
            # while the loop may update the group's cache (a member's metadata replayed).
            spec = dict(self._spec_members(group, change))
        else:
            # Cold: the thread resolves the members' subscriptions from copies.
            metadata = _metadata_after(group, change)
            resolved = {r: self._resolved(group, change, r) for r in _regex_users(group, change)}
        previous, assignor = self._previous_target(group, change)
        group.assigning_epoch = group_epoch

        def compute() -> _Offloaded:
            # Runs in a worker thread: reads only its copies and the topic image (dict
            # reads, safe under the GIL; a topic created meanwhile moves the image version
            # and so the group epoch again).
            members = spec
            if members is None:
                ids: dict[tuple[tuple[str, ...], str | None], frozenset[uuid.UUID]] = {}
                members = {}
                for member_id in sorted(metadata):
                    meta = metadata[member_id]
                    key = (meta.subscribed_topic_names, meta.subscribed_topic_regex)
                    topic_ids = ids.get(key)
                    if topic_ids is None:
                        topic_ids = ids[key] = _topic_ids(
                            meta, lambda regex: resolved.get(regex, ()), image
                        )
                    members[member_id] = MemberSubscription(
                        meta.instance_id, meta.rack_id, topic_ids
                    )
            wanted = {t for sub in members.values() for t in sub.subscribed_topic_ids}
            counts = TopicMetadata({t: image.num_partitions(t) for t in wanted})
            records = _assign(gid, members, previous, assignor, counts, group_epoch)[1]
            instances = {m: s.instance_id for m, s in members.items() if s.instance_id}
            return _Offloaded(records, instances, frozenset(members))

        def finish(value: object, finish_ms: int) -> Result:
            if self.groups.get(gid) is not group or group.assigning_epoch != group_epoch:
                return Result()
            if isinstance(value, BaseException) or group.group_epoch < group_epoch:
                # Failed, or computed for an epoch that was never written (the heartbeat
                # that bumped it failed after starting the computation): writing it would
                # put the assignment epoch ahead of the group's. The next heartbeat or
                # epoch bump tries again.
                group.assigning_epoch = None
                return Result()
            assert isinstance(value, _Offloaded)
            return self._write_target_slice(group, group_epoch, now_ms, value, 0)

        self.shard.timer.offload(assignment_key(gid), compute, finish)

    def _write_target_slice(
        self,
        group: ConsumerGroup,
        group_epoch: int,
        started_ms: int,
        computed: _Offloaded,
        start: int,
    ) -> Result:
        """The next slice of an offloaded target: its members' TargetAssignmentMember
        records (those of members gone meanwhile dropped, those of static members
        replaced meanwhile renamed to their successor), TargetAssignmentMetadata last."""
        gid = group.group_id
        result = Result()
        records = computed.records
        end, partitions = start, 0
        # A slice ends at OFFLOAD_SLICE members or OFFLOAD_SLICE_PARTITIONS partitions.
        while end < len(records) and end - start < OFFLOAD_SLICE:
            key, value = records[end]
            end += 1
            if key.member_id in group.metadata:
                result.records.append((key, value))
            elif (successor := computed.successor(group, key.member_id)) is not None:
                # A static replacement (B.4.4) moved no epoch, so this target is the one
                # the group settles on: the successor inherited the replaced member's old
                # target and must take its new one, or it keeps partitions the new
                # layout gives to others (two targets holding a partition, for good).
                result.records.append(
                    (ConsumerGroupTargetAssignmentMemberKey(gid, successor), value)
                )
            partitions += sum(len(tp.partitions) for tp in value.topic_partitions)
            if partitions >= OFFLOAD_SLICE_PARTITIONS:
                break
        if end < len(records):

            def more(now_ms: int) -> Result:
                if self.groups.get(gid) is not group or group.assigning_epoch != group_epoch:
                    return Result()
                return self._write_target_slice(group, group_epoch, started_ms, computed, end)

            self.shard.timer.schedule(assignment_key(gid), 0, more)
            return result
        group.assigning_epoch = None
        result.records.append(
            (
                ConsumerGroupTargetAssignmentMetadataKey(gid),
                ConsumerGroupTargetAssignmentMetadataValue(group_epoch, started_ms),
            )
        )
        return result

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
                for member_id, meta in _metadata_after(group, change).items()
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

    def _heartbeat_interval(
        self, group_id: str, member: ConsumerGroupMember, target_epoch: int, group_epoch: int
    ) -> int:
        interval = self.shard.consumer_settings(group_id).heartbeat_interval_ms
        fast = self.shard.config.consumer_reconciling_heartbeat_interval_ms
        if fast > 0 and (
            member.state is not MemberState.STABLE
            or member.member_epoch != target_epoch
            or target_epoch != group_epoch
        ):
            return min(fast, interval)
        return interval

    # ========================================================================================
    # Describe, list, delete
    # ========================================================================================

    def describe_groups(self, group_ids: list[str], reply: Reply) -> Result:
        """ConsumerGroupDescribe of this shard's `group_ids`: replies with their
        DescribedConsumerGroup list (`describe`, in that order). Emits nothing; as a Result
        without records it is a read after pending writes: the runtime releases it only
        once the writes before it are durable (Kafka reads at the last committed offset,
        D.2), so it never shows state that a failed write takes back (the reply then
        fails with them)."""
        result = Result()
        result.reply(reply, [self.describe(group_id) for group_id in group_ids])
        return result

    def describe(self, group_id: str) -> DescribedConsumerGroup:
        """ConsumerGroupDescribe for one group: GROUP_ID_NOT_FOUND for a missing group or a
        classic one ("is not a consumer group", as Kafka)."""
        group = self.groups.get(group_id)
        if group is None:
            classic = self.shard.classic_group(group_id)
            message = (
                f"Group {group_id} is not a consumer group."
                if classic is not None and classic.state is not GroupState.DEAD
                else f"Group {group_id} not found."
            )
            return DescribedConsumerGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message)
        members = []
        for meta, member in group.iter_members():
            members.append(
                DescribedConsumerMember(
                    member_id=member.member_id,
                    instance_id=meta.instance_id,
                    rack_id=meta.rack_id,
                    member_epoch=member.member_epoch,
                    client_id=meta.client_id,
                    client_host=meta.client_host,
                    subscribed_topic_names=list(meta.subscribed_topic_names),
                    subscribed_topic_regex=meta.subscribed_topic_regex,
                    assignment=self._described(
                        _merge(member.assigned_partitions, member.partitions_pending_revocation)
                    ),
                    target_assignment=self._described(group.target.get(member.member_id, {})),
                    member_type=0 if meta.classic_member_metadata is not None else 1,
                )
            )
        return DescribedConsumerGroup(
            group_id=group_id,
            group_state=group.state().value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_assignor() or self._default_assignor(group.group_id),
            members=members,
        )

    def _described(
        self, partitions: Mapping[uuid.UUID, Iterable[int]]
    ) -> list[DescribedTopicPartitions]:
        image = self.shard.topics
        out = []
        for topic_id in sorted(partitions, key=lambda t: t.int):
            name = image.topic_name(topic_id)
            if name is not None:  # partitions of unknown topics are left out, as Kafka
                out.append(DescribedTopicPartitions(topic_id, name, sorted(partitions[topic_id])))
        return out

    def list_groups(
        self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
    ) -> list[ListedGroup]:
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and CONSUMER_GROUP_TYPE not in types:
            return []
        out = []
        for group in self.groups.values():
            state = group.state().value
            if not states or state.lower() in states:
                out.append(
                    ListedGroup(group.group_id, CONSUMER_PROTOCOL_TYPE, state, CONSUMER_GROUP_TYPE)
                )
        return out

    def deletion_records(self, group: ConsumerGroup) -> list[Record]:
        """Every tombstone that deletes the group, in Kafka's order (D.6)."""
        gid = group.group_id
        records: list[Record] = []
        records.extend(
            (ConsumerGroupCurrentMemberAssignmentKey(gid, m), None) for m in group.members
        )
        records.extend((ConsumerGroupTargetAssignmentMemberKey(gid, m), None) for m in group.target)
        records.append((ConsumerGroupTargetAssignmentMetadataKey(gid), None))
        records.extend((ConsumerGroupMemberMetadataKey(gid, m), None) for m in group.metadata)
        records.extend(
            (ConsumerGroupRegularExpressionKey(gid, r), None) for r in group.resolved_regexes
        )
        if group.has_legacy_partition_metadata:
            records.append((ConsumerGroupPartitionMetadataKey(gid), None))
        records.append((ConsumerGroupMetadataKey(gid), None))
        return records

    # ========================================================================================
    # Replay and loading
    # ========================================================================================

    def on_loaded(self, now_ms: int) -> None:
        """After a load: every member's session starts now, members still revoking get
        their rebalance timeout again, and held-back targets their timer."""
        for group in self.groups.values():
            for meta, member in group.iter_members():
                classic = meta.classic_member_metadata
                self.schedule_session_timeout(
                    group.group_id,
                    member.member_id,
                    classic.session_timeout_ms if classic is not None else None,
                )
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(group.group_id, member, meta)
            if group.group_epoch > group.assignment_epoch and group.metadata:
                self._schedule_assignment(group, now_ms)


# -- helpers -----------------------------------------------------------------------------------


def _check_static_owner(owner: str | None, member_id: str, instance_id: str | None) -> None:
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


def _check_epoch(member: ConsumerGroupMember, request: HeartbeatRequest) -> None:
    """Kafka's throwIfMemberEpochIsInvalid: an epoch ahead of the coordinator's, or behind
    it, fences the member; except the previous epoch with owned partitions all still
    assigned (the response that moved the member on was lost)."""
    epoch = request.member_epoch
    if epoch > member.member_epoch:
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({epoch}) than the one known "
            f"by the group coordinator ({member.member_epoch}). The member must abandon all "
            f"its partitions and rejoin.",
        )
    if epoch < member.member_epoch:
        owned = request.topic_partitions
        assigned = member.assigned_partitions
        # Kafka's isSubset: every reported topic must be assigned, even with no partitions.
        if (
            epoch == member.previous_member_epoch
            and owned is not None
            and all(
                topic in assigned and all(p in assigned[topic] for p in parts)
                for topic, parts in owned
            )
        ):
            return
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a smaller member epoch ({epoch}) than the one known "
            f"by the group coordinator ({member.member_epoch}). The member must abandon all "
            f"its partitions and rejoin.",
        )


class _Offloaded(NamedTuple):
    """A target computed off the loop: its TargetAssignmentMember records, the instance
    ids of the static members it was computed for, and all the member ids it covers."""

    records: list[Record]
    instances: dict[str, str]
    members: frozenset[str]

    def successor(self, group: ConsumerGroup, member_id: str) -> str | None:
        """The member that now holds the static instance `member_id` held, if it is one
        this target was not computed for (a member it covers has its own record)."""
        owner = group.static_member_id(self.instances.get(member_id))
        return owner if owner is not None and owner not in self.members else None


def _updated_metadata(
    old: ConsumerGroupMemberMetadataValue | None, request: HeartbeatRequest
) -> ConsumerGroupMemberMetadataValue:
    """The member's metadata with the request's non-null fields applied (B.4.5)."""
    names = request.subscribed_topic_names
    return ConsumerGroupMemberMetadataValue(
        instance_id=request.instance_id
        if request.instance_id is not None
        else (old.instance_id if old else None),
        rack_id=request.rack_id if request.rack_id is not None else (old.rack_id if old else None),
        client_id=request.client_id,
        client_host=request.client_host,
        subscribed_topic_names=tuple(sorted(set(names)))
        if names is not None
        else (old.subscribed_topic_names if old else ()),
        subscribed_topic_regex=request.subscribed_topic_regex
        if request.subscribed_topic_regex is not None
        else (old.subscribed_topic_regex if old else None),
        rebalance_timeout_ms=request.rebalance_timeout_ms
        if request.rebalance_timeout_ms != -1
        else (old.rebalance_timeout_ms if old else -1),
        server_assignor=request.server_assignor
        if request.server_assignor is not None
        else (old.server_assignor if old else None),
    )


def _metadata_after(
    group: ConsumerGroup, change: GroupChange
) -> dict[str, ConsumerGroupMemberMetadataValue]:
    metadata = dict(group.metadata)
    for member_id, meta in change.metadata.items():
        if meta is None:
            metadata.pop(member_id, None)
        else:
            metadata[member_id] = meta
    return metadata


def _regex_users(group: ConsumerGroup, change: GroupChange) -> set[str]:
    counts = Counter(group.regex_subscribers)
    for member_id, meta in change.metadata.items():
        old = group.metadata.get(member_id)
        if old is not None and old.subscribed_topic_regex:
            counts[old.subscribed_topic_regex] -= 1
        if meta is not None and meta.subscribed_topic_regex:
            counts[meta.subscribed_topic_regex] += 1
    return {regex for regex, n in counts.items() if n > 0}


def _preferred_assignor(group: ConsumerGroup, change: GroupChange) -> str | None:
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


def _assign(
    group_id: str,
    members: dict[str, MemberSubscription],
    previous: PreviousTarget,
    assignor: PartitionAssignor,
    topics: TopicDescriber,
    group_epoch: int,
) -> tuple[Mapping[str, TopicAssignment], list[Record]]:
    """The new target and the TargetAssignmentMember records of the members whose target
    changed (or who had none). Touches nothing but its arguments: it may run in a thread.
    Raises HeartbeatError(UNKNOWN_SERVER_ERROR) when the assignor fails."""
    spec = GroupSpec(members, previous.target, None, previous.sizes, previous.topics)
    try:
        assignment = assignor.assign(spec, topics)
    except PartitionAssignorError as e:
        raise HeartbeatError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"Failed to compute a new target assignment for epoch {group_epoch}: {e}",
        ) from None
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


def _topic_ids(
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


def _target_of(group: ConsumerGroup, change: GroupChange, member_id: str) -> TopicAssignment:
    if member_id in change.target:
        return change.target[member_id] or {}
    return group.target.get(member_id, {})


def _same_target(new: TopicAssignment, old: TopicAssignment | None) -> bool:
    if old is None:
        return not new
    return {t: p for t, p in new.items() if p} == {t: p for t, p in old.items() if p}


def _assignment_list(member: ConsumerGroupMember) -> TopicPartitionList:
    return [(topic, list(parts)) for topic, parts in member.assigned_topic_partitions()]


def _merge(*sources: Mapping[uuid.UUID, Mapping[int, int]]) -> dict[uuid.UUID, set[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for source in sources:
        for topic, parts in source.items():
            out.setdefault(topic, set()).update(parts)
    return out

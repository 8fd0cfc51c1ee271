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

* A pending target assignment (group.consumer.assignment.interval.ms) is computed by a
  timer when the interval ends, not by whichever heartbeat comes next.
* Members that are reconciling (or whose group has a newer target coming) are asked to
  heartbeat every `consumer_reconciling_heartbeat_interval_ms` instead of the full interval,
  so a partition released by one member reaches the next within a fraction of a second.
* A target computed off the loop that fails (a plugin assignor raised) fails no heartbeat:
  the group keeps its target and the computation is retried with backoff (offload.py).

Timers (keys as Kafka's, keys.py): `session-timeout-<group>-<member>`,
`rebalance-timeout-<group>-<member>` (a member slow to revoke is fenced; departures.py),
`assignment-<group>` (ours, above; offload.py). Callbacks re-check that the group and
member are still the ones they were armed for.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    GroupMetadataKey,
)

from ..assignors import DEFAULT_ASSIGNORS, PartitionAssignor
from ..classic.group import GroupState
from ..result import Record, Reply, Result
from .change import GroupChange, HeartbeatError
from .departures import MemberDepartures, check_static_owner
from .describe import GroupDescriptions
from .group import ConsumerGroup, target_to_record
from .keys import rebalance_timeout_key
from .member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupMember,
    MemberState,
)
from .messages import HeartbeatRequest, HeartbeatResponse, TopicPartitionList
from .migration import ClassicMembers
from .reconcile import FencedMemberEpoch, compute_next_assignment, replace_static_member
from .regex import validate_regex
from .regex_refresh import RegexRefresh
from .targets import preferred_assignor, target_of

if TYPE_CHECKING:
    from ..shard_view import ShardView


def _blank(value: str | None) -> bool:
    return value is not None and not value.strip()


class ConsumerGroupManager(MemberDepartures, GroupDescriptions, RegexRefresh):
    """The consumer groups of one shard. Its parts: the heartbeat pipeline (here), target
    assignments (targets.py, offload.py), departures and member timers (departures.py),
    regex resolutions (regex_refresh.py), describe/list/delete (describe.py)."""

    def __init__(self, shard: ShardView) -> None:
        self.shard = shard
        config = shard.config
        by_name = {a.name: a for a in (*DEFAULT_ASSIGNORS, *config.consumer_assignor_plugins)}
        missing = [name for name in config.consumer_assignors if name not in by_name]
        if missing or not config.consumer_assignors:
            raise ValueError(f"consumer_assignors {config.consumer_assignors}: missing {missing}")
        self.assignors: dict[str, PartitionAssignor] = {
            name: by_name[name] for name in config.consumer_assignors
        }
        self.default_assignor = next(iter(self.assignors))
        self.rebalances = 0  # group epoch bumps from heartbeats (Kafka's sensor)
        # By group: the topic filter of the latest full-path heartbeat that had one
        # (HeartbeatRequest.topic_visible; not persisted), what the group's next regex
        # resolution keeps (regex_refresh.py). No entry: every topic.
        self.regex_visible: dict[str, Callable[[str], bool]] = {}
        self.migration = ClassicMembers(self)

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
        # Ours: what a member makes the server keep and write (its MemberMetadata record).
        # Kafka's bound is its log's message size, and its answer past it this error.
        size = _subscription_bytes(request)
        limit = self.shard.config.member_metadata_max_bytes
        if size > limit:
            return HeartbeatError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"The member's subscription takes {size} bytes, more than the "
                f"{limit} the coordinator accepts (group_member_metadata_bytes_max).",
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
        UNKNOWN_SERVER_ERROR (the assignor failed, or ours: a subscription over
        group_member_metadata_bytes_max), GROUP_MAX_SIZE_REACHED (also ours: a new group
        past groups_max)."""
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
            if e.error is ErrorCode.FENCED_MEMBER_EPOCH:
                # Fenced by its epoch: it must give up its partitions and rejoin.
                self.shard.events.emit(
                    request.group_id,
                    "member_fenced",
                    request.member_epoch,
                    request.member_id,
                    e.message or "stale member epoch",
                    now_ms,
                )
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
        if request.topic_visible is not None:
            self.regex_visible[request.group_id] = request.topic_visible
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
                group, new_member, target_epoch, group_epoch, now_ms
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
        names_changed = new_meta.subscribed_topic_names != old_names
        regex_changed = new_regex != old_regex
        subscription_changed = names_changed or regex_changed
        if regex_changed and new_regex and group.regex_subscribers[new_regex] == 0:
            message = validate_regex(new_regex)
            if message is not None:
                raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION, message)
        # As Kafka: a new group moves off epoch 0; a regex moves the epoch only when it was
        # dropped or is already resolved: a new one does once it is (regex_refresh.py).
        bump = (
            names_changed
            or group.group_epoch == 0
            or (
                regex_changed
                and (
                    not new_regex
                    or (
                        group.regex_subscribers[new_regex] > 0
                        and new_regex in group.resolved_regexes
                    )
                )
            )
        )
        old_assignor = old_meta.server_assignor if old_meta else None
        if not bump and new_meta.server_assignor != old_assignor:
            # Only the most popular assignor counts (counting members costs O(members)).
            bump = preferred_assignor(group, change) != group.preferred_assignor()
        image = self.shard.topics
        image_moved = group.checked_image_version != image.version
        self._maybe_refresh_regexes(group, change, records, now_ms)
        metadata_hash = group.metadata_hash
        if bump or image_moved:
            metadata_hash = self.metadata_hash(group, change)
            bump = bump or metadata_hash != group.metadata_hash
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
        member_target = target_of(group, change, member_id)
        if group_epoch > group.assignment_epoch and group.assigning_epoch is None:
            if not self._assignment_due(group, now_ms):
                self._schedule_assignment(group, now_ms)
            elif not self._assign_off_loop(group, change, group_epoch, now_ms):
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
        else:
            full = self.shard.groups_full()
            if full is not None:
                raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED, full)
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
        check_static_owner(static_owner, member_id, request.instance_id)
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
        self.shard.events.cause(
            gid,
            old_id,
            "member_fenced",
            f"static member {old_meta.instance_id} rejoined as {new_id}",
        )
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

    def _heartbeat_interval(
        self,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        target_epoch: int,
        group_epoch: int,
        now_ms: int,
    ) -> int:
        interval = self.shard.consumer_settings(group.group_id).heartbeat_interval_ms
        fast = self.shard.config.consumer_reconciling_heartbeat_interval_ms
        if fast > 0 and (
            member.state is not MemberState.STABLE
            or member.member_epoch != target_epoch
            # A newer target is coming, unless a failed computation waits for its retry.
            or (target_epoch != group_epoch and now_ms >= group.assignment_retry_ms)
        ):
            return min(fast, interval)
        return interval

    # ========================================================================================
    # Replay and loading
    # ========================================================================================

    def on_loaded(self, now_ms: int) -> None:
        """After a load: every member's session starts now, members still revoking get
        their rebalance timeout again, held-back targets their timer, and regexes a
        resolution (regex_refresh.py)."""
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
            if group.regex_subscribers:
                self._arm_regex_resolution(group, now_ms)


# -- helpers -----------------------------------------------------------------------------------


def _subscription_bytes(request: HeartbeatRequest) -> int:
    """The UTF-8 size of what the request asks the member's metadata to hold that a
    client can grow: topic names, regex, rack and instance ids."""
    size = 0
    if request.subscribed_topic_names is not None:
        size += sum(len(name.encode()) for name in request.subscribed_topic_names)
    for text in (request.subscribed_topic_regex, request.rack_id, request.instance_id):
        if text is not None:
            size += len(text.encode())
    return size


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


def _assignment_list(member: ConsumerGroupMember) -> TopicPartitionList:
    return [(topic, list(parts)) for topic, parts in member.assigned_topic_partitions()]

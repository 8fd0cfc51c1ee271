"""When a consumer group's new target is computed, if not at once in the heartbeat that moved
the group epoch: when the assignment interval ends (the `assignment-<group>` timer), or off
the loop, in a worker thread, the result then written in slices of OFFLOAD_SLICE members,
one shard event each, so that no event holds the loop long. Off the loop go large groups
(many members, or many partitions) and every group whose assignor is not a built-in one (a
plugin: its cost is unknown, and it may fail or hang). A mixin of ConsumerGroupManager
(manager.py).

A computation off the loop that fails (the assignor raised, or a plugin returned an invalid
target) fails no request: the group keeps its previous target, the timer raises the error
with the group, assignor and epoch in its message (the runtime logs it), and the assignment
timer tries again after ASSIGNMENT_RETRY_MS, doubling while it keeps failing, up to
ASSIGNMENT_RETRY_MAX_MS (README, Decisions: Kafka fails the heartbeat instead).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import NamedTuple

from groupcoord.protocol.records import (
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    RecordType,
    decode_value,
    encode_value,
)

from ..assignors import BUILTIN_ASSIGNOR_NAMES, MemberSubscription, PartitionAssignor
from ..assignors.spec import TopicMetadata
from ..result import Result
from ..sliced_copy import SlicedCopy
from .change import GroupChange, HeartbeatError
from .group import ConsumerGroup, TopicAssignment
from .keys import assignment_key
from .targets import (
    PreviousTarget,
    TargetAssignment,
    add_departed,
    compute_assignment,
    metadata_after,
    regex_users,
    topic_ids_of,
)

# Members whose offloaded target is written per shard event (~1 ms of replay, plus the
# values' decoding, 3-6 us each: 200 members a slice before they came back as bytes).
OFFLOAD_SLICE = 150
OFFLOAD_SLICE_PARTITIONS = 20_000
# Entries of a large group's inputs copied per shard event before its computation starts
# (~0.2 us each when cold: about 1 ms an event).
SNAPSHOT_SLICE = 5_000
# The record type of TargetAssignmentMember values (decoded from the offload's bytes).
_TARGET_MEMBER = RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER.value
# A failed computation is tried again after this, doubled per failure in a row, up to the max.
ASSIGNMENT_RETRY_MS = 1_000
ASSIGNMENT_RETRY_MAX_MS = 60_000


def snapshot_entries(group: ConsumerGroup) -> int:
    """Entries a snapshot of the group's inputs copies (members, target, its sizes, the
    departed members' targets)."""
    return len(group.metadata) + 2 * len(group.target) + len(group.departed_targets)


class TargetAssignmentFailed(Exception):
    """A target computed off the loop failed: the message names the group, the assignor and
    the epoch (the runtime's timer logs it, with the assignor's exception as its cause)."""


def retry_delay_ms(failures: int) -> int:
    """How long after its `failures`-th failure in a row a computation is tried again."""
    return min(ASSIGNMENT_RETRY_MAX_MS, ASSIGNMENT_RETRY_MS << min(failures - 1, 16))


class TargetScheduling(TargetAssignment):
    """Mixin: when and where targets are computed (see above)."""

    def _assignment_due(self, group: ConsumerGroup, now_ms: int) -> bool:
        """The assignment interval has passed (or there is none), and no failed computation
        waits for its retry."""
        if now_ms < group.assignment_retry_ms:
            return False
        interval = self.shard.consumer_settings(group.group_id).assignment_interval_ms
        return (
            interval <= 0
            or group.assignment_timestamp_ms <= 0
            or now_ms >= group.assignment_timestamp_ms + interval
        )

    def _schedule_assignment(self, group: ConsumerGroup, now_ms: int) -> None:
        """Compute the held-back target when the assignment interval ends (or the retry of
        a failed computation is due)."""
        key = assignment_key(group.group_id)
        if self.shard.timer.is_scheduled(key):
            return
        group_id = group.group_id
        interval = self.shard.consumer_settings(group_id).assignment_interval_ms
        due_ms = max(group.assignment_timestamp_ms + interval, group.assignment_retry_ms)
        delay_ms = due_ms - now_ms

        def fire(now_ms: int) -> Result:
            result = Result()
            live = self.groups.get(group_id)
            if (
                live is not None
                and live.group_epoch > live.assignment_epoch
                and live.metadata
                and live.assigning_epoch is None
            ):
                if now_ms < live.assignment_retry_ms:  # armed before a failure: not yet
                    self._schedule_assignment(live, now_ms)
                    return result
                if self._assign_off_loop(live, GroupChange(), live.group_epoch, now_ms):
                    return result
                try:
                    self._compute_target(
                        live, GroupChange(), live.group_epoch, now_ms, result.records
                    )
                except HeartbeatError:
                    return Result()  # the next heartbeat reports the assignor's failure
            return result

        self.shard.timer.schedule(key, max(0, delay_ms), fire)

    def _assign_off_loop(
        self, group: ConsumerGroup, change: GroupChange, group_epoch: int, now_ms: int
    ) -> bool:
        """Start computing the target for `group_epoch` off the loop if it goes there (a
        plugin assignor, or a large group); False: the caller computes it at once. A new
        group (its object goes live when this event's records are replayed) starts its
        plugin's computation from the assignment timer, right after; meanwhile its first
        member gets the initial target (epoch 1, no partitions)."""
        plugin = self._assignor(group, change).name not in BUILTIN_ASSIGNOR_NAMES
        if not plugin and not self._should_offload(group, change):
            return False
        if self.groups.get(group.group_id) is not group:
            self._schedule_assignment(group, now_ms)
        else:
            self._offload_target(group, change, group_epoch, now_ms, plugin)
        return True

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
        self,
        group: ConsumerGroup,
        change: GroupChange,
        group_epoch: int,
        now_ms: int,
        plugin: bool = False,
    ) -> None:
        """Compute the target for `group_epoch` in a worker thread (a `plugin` assignor in
        one of the runtime's threads kept for plugins); meanwhile the group keeps its
        current target (heartbeats go on against it, as during an assignment interval).
        The thread works on copies of the group's inputs: a large group's are copied over
        several shard events, SNAPSHOT_SLICE entries each, from the next event on (once
        this one's records are replayed: `_snapshot_slice`). The result is written in
        slices of OFFLOAD_SLICE members, one shard event each, TargetAssignmentMetadata
        last, so that no event blocks the loop long. Members that left meanwhile are
        skipped; those that joined meanwhile get their target from the next assignment
        (their join moved the group epoch); a static member replaced meanwhile (which
        moves no epoch) hands its target to the member that replaced it
        (`_write_target_slice`). A failure is retried later (module docstring)."""
        group.assigning_epoch = group_epoch
        if snapshot_entries(group) + len(change.metadata) > SNAPSHOT_SLICE:
            key = assignment_key(group.group_id)
            self.shard.timer.schedule(
                key, 0, lambda at_ms: self._snapshot_slice(group, None, now_ms, plugin)
            )
            return
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
            metadata = metadata_after(group, change)
            resolved = {r: self._resolved(group, change, r) for r in regex_users(group, change)}
        previous, assignor = self._previous_target(group, change)
        inputs = _Inputs(spec, metadata, resolved, previous, {}, assignor)
        self._compute_off_loop(group, group_epoch, now_ms, plugin, inputs)

    def _snapshot_slice(
        self, group: ConsumerGroup, snapshot: _Snapshot | None, started_ms: int, plugin: bool
    ) -> Result:
        """The next SNAPSHOT_SLICE entries of a large group's inputs copied (one shard
        event); the computation starts once all are. A replay that changed the inputs
        between two slices (a member joined or left, a target record, a regex, a topic)
        starts the copy again, for the group's epoch then."""
        if self.groups.get(group.group_id) is not group or group.assigning_epoch is None:
            return Result()  # deleted, converted or reloaded meanwhile
        image = self.shard.topics
        version = (group.group_epoch, group.inputs_version, image.version)
        if snapshot is None or snapshot.version != version:
            if (
                group.group_epoch < group.assigning_epoch
                or group.group_epoch <= group.assignment_epoch
                or not group.metadata
            ):
                # The epoch asked for was never written (the heartbeat that bumped it
                # failed: as a computation finished for it, below), or there is nothing
                # left to assign (the group emptied meanwhile, which moved its target's
                # epoch too). The next heartbeat or epoch bump tries again.
                group.assigning_epoch = None
                return Result()
            group.assigning_epoch = group.group_epoch
            snapshot = self._start_snapshot(group, version)
        if not snapshot.copy.step(SNAPSHOT_SLICE):
            self.shard.timer.schedule(
                assignment_key(group.group_id),
                0,
                lambda now_ms: self._snapshot_slice(group, snapshot, started_ms, plugin),
            )
            return Result()
        members, target, sizes, departed = snapshot.copy.copies
        warm = snapshot.warm
        inputs = _Inputs(
            members if warm else None,
            {} if warm else members,
            snapshot.resolved,
            PreviousTarget(target, sizes, snapshot.topics),
            departed,
            snapshot.assignor,
        )
        self._compute_off_loop(group, group.assigning_epoch, started_ms, plugin, inputs)
        return Result()

    def _start_snapshot(self, group: ConsumerGroup, version: tuple[int, int, int]) -> _Snapshot:
        """A copy of the live group's inputs (no change pending), to be made in slices:
        the assignors' view of the members when cached for this topic image (warm), else
        their metadata and the regexes' topics (cold); the target with its hints and the
        departed members' targets (added to it in the thread, as _previous_target)."""
        warm = group.spec_members is not None and group.spec_image_version == version[2]
        change = GroupChange()
        members: Mapping[str, object] = group.metadata
        if warm and group.spec_members is not None:
            members = group.spec_members
        resolved = (
            {}
            if warm
            else {r: self._resolved(group, change, r) for r in regex_users(group, change)}
        )
        return _Snapshot(
            version,
            warm,
            SlicedCopy([members, group.target, group.target_sizes, group.departed_targets]),
            resolved,
            set(group.target_topics),
            self._assignor(group, change),
        )

    def _compute_off_loop(
        self,
        group: ConsumerGroup,
        group_epoch: int,
        now_ms: int,
        plugin: bool,
        inputs: _Inputs,
    ) -> None:
        """Hand the computation of `group_epoch`'s target from `inputs` (copies) to a
        thread; its result is written from its finish event on."""
        gid = group.group_id
        image = self.shard.topics
        spec, metadata, resolved, previous, departed, assignor = inputs
        kept_epoch = group.assignment_epoch
        retry_ms = retry_delay_ms(group.assignment_failures + 1)

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
                        topic_ids = ids[key] = topic_ids_of(
                            meta, lambda regex: resolved.get(regex, ()), image
                        )
                    members[member_id] = MemberSubscription(
                        meta.instance_id, meta.rack_id, topic_ids
                    )
            add_departed(previous.target, previous.topics, departed, lambda m: m not in members)
            wanted = {t for sub in members.values() for t in sub.subscribed_topic_ids}
            described = TopicMetadata(
                {t: image.num_partitions(t) for t in wanted},
                {t: name for t in wanted if (name := image.topic_name(t)) is not None},
            )
            try:
                _, records = compute_assignment(gid, members, previous, assignor, described, plugin)
            except Exception as e:
                raise TargetAssignmentFailed(
                    f"Failed to compute a new target assignment for epoch {group_epoch} of "
                    f"group {gid!r} with assignor {assignor.name!r}: {e!r}. The group keeps "
                    f"its target of epoch {kept_epoch}; next attempt in {retry_ms} ms."
                ) from e
            instances = {m: s.instance_id for m, s in members.items() if s.instance_id}
            # The records leave the thread encoded (bytes are not tracked by the cyclic
            # GC), each decoded when its slice is written: as objects, 20,000 members'
            # records (a key, a value and a tuple each) were young when the GC resumed,
            # and the collection that walked them held the loop 20-50 ms.
            return _Offloaded(
                [key.member_id for key, _ in records],
                [encode_value(value) for _, value in records],
                instances,
                frozenset(members),
            )

        def finish(value: object, finish_ms: int) -> Result:
            if self.groups.get(gid) is not group or group.assigning_epoch != group_epoch:
                return Result()
            if isinstance(value, BaseException):
                # The group keeps its target; the assignment timer tries again later.
                group.assigning_epoch = None
                group.assignment_failures += 1
                group.assignment_retry_ms = finish_ms + retry_ms
                self._schedule_assignment(group, finish_ms)
                return Result()
            if group.group_epoch < group_epoch:
                # Computed for an epoch that was never written (the heartbeat that bumped
                # it failed after starting the computation): writing it would put the
                # assignment epoch ahead of the group's. The next heartbeat or epoch bump
                # tries again.
                group.assigning_epoch = None
                return Result()
            assert isinstance(value, _Offloaded)
            return self._write_target_slice(group, group_epoch, now_ms, value, 0)

        self.shard.timer.offload(assignment_key(gid), compute, finish, plugin=plugin)

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
        member_ids, values = computed.member_ids, computed.values
        end, partitions = start, 0
        # A slice ends at OFFLOAD_SLICE members or OFFLOAD_SLICE_PARTITIONS partitions.
        while end < len(member_ids) and end - start < OFFLOAD_SLICE:
            member_id = member_ids[end]
            value = decode_value(_TARGET_MEMBER, values[end])
            assert isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
            end += 1
            if member_id in group.metadata:
                result.records.append(
                    (ConsumerGroupTargetAssignmentMemberKey(gid, member_id), value)
                )
            elif (successor := computed.successor(group, member_id)) is not None:
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
        if end < len(member_ids):

            def more(now_ms: int) -> Result:
                if self.groups.get(gid) is not group or group.assigning_epoch != group_epoch:
                    return Result()
                return self._write_target_slice(group, group_epoch, started_ms, computed, end)

            self.shard.timer.schedule(assignment_key(gid), 0, more)
            return result
        group.assigning_epoch = None
        group.assignment_failures = group.assignment_retry_ms = 0
        result.records.append(
            (
                ConsumerGroupTargetAssignmentMetadataKey(gid),
                ConsumerGroupTargetAssignmentMetadataValue(group_epoch, started_ms),
            )
        )
        return result


class _Inputs(NamedTuple):
    """What a computation off the loop works from (copies): the assignors' view of the
    members (warm) or their metadata and the regexes' topics (cold), the previous target,
    the targets of departed members still to add to it (a sliced snapshot's), the
    assignor."""

    spec: dict[str, MemberSubscription] | None
    metadata: dict[str, ConsumerGroupMemberMetadataValue]
    resolved: dict[str, tuple[str, ...]]
    previous: PreviousTarget
    departed: dict[str, TopicAssignment]
    assignor: PartitionAssignor


class _Snapshot(NamedTuple):
    """A sliced copy of a group's inputs in progress, valid at `version` (group epoch,
    inputs version, topic image version); `warm`: the members' copy is of the assignors'
    cached view, else of their metadata."""

    version: tuple[int, int, int]
    warm: bool
    copy: SlicedCopy
    resolved: dict[str, tuple[str, ...]]
    topics: set[uuid.UUID]
    assignor: PartitionAssignor


class _Offloaded(NamedTuple):
    """A target computed off the loop: its TargetAssignmentMember records (the member ids
    and, aligned, the values encoded), the instance ids of the static members it was
    computed for, and all the member ids it covers."""

    member_ids: list[str]
    values: list[bytes]
    instances: dict[str, str]
    members: frozenset[str]

    def successor(self, group: ConsumerGroup, member_id: str) -> str | None:
        """The member that now holds the static instance `member_id` held, if it is one
        this target was not computed for (a member it covers has its own record)."""
        owner = group.static_member_id(self.instances.get(member_id))
        return owner if owner is not None and owner not in self.members else None

"""When a consumer group's new target is computed, if not at once in the heartbeat that moved
the group epoch: when the assignment interval ends (the `assignment-<group>` timer), or off
the loop for large groups (many members, or many partitions), in a worker thread, the
result then written in slices of OFFLOAD_SLICE members, one shard event each, so that no
event holds the loop long. A mixin of ConsumerGroupManager (manager.py).
"""

from __future__ import annotations

import uuid
from typing import NamedTuple

from groupcoord.protocol.records import (
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

from ..assignors import MemberSubscription
from ..assignors.spec import TopicMetadata
from ..result import Record, Result
from .change import GroupChange, HeartbeatError
from .group import ConsumerGroup
from .keys import assignment_key
from .targets import TargetAssignment, compute_assignment, metadata_after, regex_users, topic_ids_of

# Members whose offloaded target is written per shard event (~1 ms of replay each).
OFFLOAD_SLICE = 200
OFFLOAD_SLICE_PARTITIONS = 20_000


class TargetScheduling(TargetAssignment):
    """Mixin: when and where targets are computed (see above)."""

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
            metadata = metadata_after(group, change)
            resolved = {r: self._resolved(group, change, r) for r in regex_users(group, change)}
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
                        topic_ids = ids[key] = topic_ids_of(
                            meta, lambda regex: resolved.get(regex, ()), image
                        )
                    members[member_id] = MemberSubscription(
                        meta.instance_id, meta.rack_id, topic_ids
                    )
            wanted = {t for sub in members.values() for t in sub.subscribed_topic_ids}
            counts = TopicMetadata({t: image.num_partitions(t) for t in wanted})
            records = compute_assignment(gid, members, previous, assignor, counts, group_epoch)[1]
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

"""GroupShard: the pure state machine of one coordinator shard (one __consumer_offsets
partition): its classic groups, its consumer groups (KIP-848) and their offsets.

No asyncio, clock, uuid or I/O here: time comes in as `now_ms`, ids from `ids`, timers
through `timer`, topics from a read-only `topics` image.

A facade, as Kafka's GroupCoordinatorShard: the runtime (and through it the gateway) calls
only the methods below, one per request kind, each delegating to the manager that holds
the logic (classic/manager.py, consumer/manager.py, offsets.py); the managers are internal
to groups/. This class owns what the managers share (the group registries: a group id names
a classic or a consumer group, never both) and routes replayed records, refusing record
types it does not know.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownRecordType,
)

from .classic import messages as cm
from .classic.group import ClassicGroup, GroupState
from .classic.manager import ClassicGroupManager
from .config import (
    ConsumerGroupSettings,
    GroupConfig,
    GroupConfigSource,
    InvalidGroupConfig,
    NoGroupConfigs,
    effective_settings,
)
from .consumer import messages as ccm
from .consumer.change import HeartbeatError
from .consumer.group import ConsumerGroup
from .consumer.manager import ConsumerGroupManager
from .event_records import after_consumer, before_consumer, derive_classic
from .events import MOVED_LISTED, GroupEvent
from .events_off import new_group_events
from .offset_messages import (
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from .offsets import (
    OffsetManager,
)
from .release import SlicedRelease
from .result import IdSource, Reply, Result, Timer
from .topics import StaticTopicImage, TopicImage
from .txn_commit import TxnOffsetCommitRequest, txn_commit_offsets

# The consumer-group (KIP-848) record keys: replayed into their group.
_CONSUMER_GROUP_KEYS = frozenset(
    (
        ConsumerGroupMetadataKey,
        ConsumerGroupPartitionMetadataKey,
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupTargetAssignmentMetadataKey,
        ConsumerGroupTargetAssignmentMemberKey,
        ConsumerGroupCurrentMemberAssignmentKey,
        ConsumerGroupRegularExpressionKey,
    )
)


_GROUP_TOMBSTONES = (GroupMetadataKey, ConsumerGroupMetadataKey)


def offsets_reset(shard: GroupShard, group_id: str, records: list[Any], now_ms: int) -> None:
    """An offsets_reset event when `records` (a commit with no generation, not yet
    replayed) change the offsets of a group that had members and has none now (a simple
    group, which never had members, commits so all the time)."""
    classic = shard.groups.get(group_id)
    consumer = shard.consumer_groups.get(group_id)
    if classic is not None:
        if classic.members or not classic.protocol_type:
            return
    elif consumer is None or consumer.metadata:
        return
    changed = []
    for key, value in records:
        old = shard.offsets.get(group_id, key.topic, key.partition)
        before = None if old is None else old.offset
        if before != value.offset:
            changed.append(
                {"topic": key.topic, "partition": key.partition, "from": before, "to": value.offset}
            )
    if changed:
        shard.events.announce(
            group_id,
            "offsets_reset",
            -1,
            None,
            "OffsetCommit with no generation (admin request)",
            now_ms,
            {"partitions": len(changed), "offsets": changed[:MOVED_LISTED]},
        )


@dataclass(slots=True)
class ShardStats:
    """What the group-coordinator metrics read from a shard at scrape time."""

    classic_groups: Counter[str]  # by state
    consumer_groups: Counter[str]  # by state
    offsets: int
    consumer_rebalances: int  # group epoch bumps from heartbeats
    completed_rebalances: int
    classic_rebalances: Counter[str]  # started, by the state the group left
    commits: int
    expirations: int
    deletions: int


class GroupShard:
    def __init__(
        self,
        shard_id: int,
        config: GroupConfig,
        timer: Timer,
        ids: IdSource,
        topics: TopicImage | None = None,
        group_configs: GroupConfigSource | None = None,
        groups_total: Callable[[], int] | None = None,
    ) -> None:
        """`groups_total`: how many groups the server holds, every shard's (default: this
        shard's), for groups_max."""
        self.shard_id = shard_id
        self.config = config
        self.timer = timer
        self.ids = ids
        self.topics: TopicImage = topics if topics is not None else StaticTopicImage()
        self.group_configs: GroupConfigSource = (
            group_configs if group_configs is not None else NoGroupConfigs()
        )
        self._default_settings = effective_settings(config, {})
        self.groups: dict[str, ClassicGroup] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self._groups_total = groups_total if groups_total is not None else self.group_count
        # Group events (events.py): the runtime sets `events.sink` once the shard is loaded.
        self.events = new_group_events(config.timeline_events, config.timeline_events_total)
        # What events let go of in bulk, freed a slice per event (release.py).
        self.release = SlicedRelease(timer)
        self.events.release = self.release.later
        self.classic = ClassicGroupManager(self)
        self.consumer = ConsumerGroupManager(self)
        self.offsets = OffsetManager(self)

    # -- offsets (OffsetManager) -------------------------------------------------------------

    def commit_offsets(self, request: OffsetCommitRequest, reply: Reply, now_ms: int) -> Result:
        """OffsetCommit: replies with an OffsetCommitResponse (OffsetManager.commit_offsets).
        A commit with no generation to a group without members is an admin's reset of its
        offsets (AdminClient.alterConsumerGroupOffsets): an offsets_reset event."""
        result = self.offsets.commit_offsets(request, reply, now_ms)
        if request.generation_id_or_member_epoch < 0:
            # Inlined first test: a simple group (no protocol type) commits so all the time.
            group = self.groups.get(request.group_id)
            if (group is None or group.protocol_type) and result.records:
                offsets_reset(self, request.group_id, result.records, now_ms)
        return result

    def fetch_offsets(self, request: OffsetFetchRequest, reply: Reply, now_ms: int) -> Result:
        """OffsetFetch of one group: replies with an OffsetFetchResponse."""
        return self.offsets.fetch_offsets(request, reply, now_ms)

    def delete_offsets(
        self, group_id: str, topics: Mapping[str, list[int]], reply: Reply, now_ms: int
    ) -> Result:
        """OffsetDelete: replies with an OffsetDeleteResponse; an offsets_deleted event
        when offsets are deleted."""
        result = self.offsets.delete_offsets(group_id, topics, reply, now_ms)
        if result.records:
            deleted = [(key.topic, key.partition) for key, _ in result.records]
            self.events.announce(
                group_id,
                "offsets_deleted",
                -1,
                None,
                "OffsetDelete (admin request)",
                now_ms,
                {
                    "partitions": len(deleted),
                    "deleted": [list(tp) for tp in deleted[:MOVED_LISTED]],
                },
            )
        return result

    def delete_groups(self, group_ids: list[str], reply: Reply, now_ms: int) -> Result:
        """DeleteGroups of this shard's `group_ids`: replies with a DeleteGroupsResponse
        (the group_deleted events come from the tombstones, with this cause)."""
        result = self.offsets.delete_groups(group_ids, reply, now_ms)
        for key, value in result.records:
            if value is None and type(key) in _GROUP_TOMBSTONES:
                group_id = key.group if type(key) is GroupMetadataKey else key.group_id
                self.events.cause(group_id, "", "group_deleted", "DeleteGroups (admin request)")
        return result

    # -- transactional offsets (txn_commit.py, pending_offsets.py) ---------------------------

    def txn_commit_offsets(
        self, request: TxnOffsetCommitRequest, reply: Reply, now_ms: int
    ) -> Result:
        """TxnOffsetCommit: replies with an OffsetCommitResponse; the records are the
        producer's transactional batch (the runtime replays them with replay_transactional)."""
        return txn_commit_offsets(self, self.offsets, request, reply, now_ms)

    def end_transaction_error(
        self, producer_id: int, producer_epoch: int, transaction_version: int = 0
    ) -> ErrorCode:
        """Why a marker of (producer_id, producer_epoch) may not be written: an epoch older
        than the producer's last one here (for transaction version 2: not newer, unless a
        retry; PendingOffsets.marker_fenced) is INVALID_PRODUCER_EPOCH (a fenced
        producer's marker, refused by Kafka's log layer); else NONE."""
        if self.offsets.pending.marker_fenced(producer_id, producer_epoch, transaction_version):
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return ErrorCode.NONE

    def transaction_marker_written(
        self, producer_id: int, producer_epoch: int, commit: bool
    ) -> bool:
        """Whether this shard's last marker of the producer is this one (epoch, result)
        with no transactional record of it since: a resumed marker job skips it."""
        return self.offsets.pending.marker_written(producer_id, producer_epoch, commit)

    def replay_transactional(
        self, key: Any, value: Any, producer_id: int, producer_epoch: int, now_ms: int
    ) -> None:
        """Apply a record of a transactional batch of `producer_id`: an offset commit is
        pending until the transaction's marker; any other record type (Kafka writes none
        there) is replayed as anywhere else."""
        if type(key) is OffsetCommitKey:
            self.offsets.replay_transactional(key, value, producer_id, producer_epoch, now_ms)
        else:
            self.replay(key, value, now_ms)

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Apply a transaction marker (a control batch): COMMIT makes the producer's
        pending offsets committed, in every group of the shard; ABORT drops them."""
        self.offsets.replay_end_transaction(producer_id, producer_epoch, commit)

    def topics_deleted(self, topics: Mapping[str, uuid.UUID | None], now_ms: int) -> Result:
        """Deleted topics (name -> id): tombstones for the offsets committed to them."""
        return self.offsets.topics_deleted(topics, now_ms)

    # -- classic groups (ClassicGroupManager) ------------------------------------------------

    def join_group(self, request: cm.JoinGroupRequest, reply: Reply, now_ms: int) -> Result:
        """JoinGroup: replies with a JoinGroupResponse, perhaps from a later Result (parked).
        A classic member of a consumer group joins through the migration path."""
        return self.classic.join_group(request, reply, now_ms)

    def sync_group(self, request: cm.SyncGroupRequest, reply: Reply, now_ms: int) -> Result:
        """SyncGroup: replies with a SyncGroupResponse, perhaps from a later Result."""
        return self.classic.sync_group(request, reply, now_ms)

    def heartbeat(self, request: cm.HeartbeatRequest, reply: Reply, now_ms: int) -> Result:
        """Heartbeat (classic): replies with a HeartbeatResponse."""
        return self.classic.heartbeat(request, reply, now_ms)

    def leave_group(self, request: cm.LeaveGroupRequest, reply: Reply, now_ms: int) -> Result:
        """LeaveGroup: replies with a LeaveGroupResponse."""
        return self.classic.leave_group(request, reply, now_ms)

    # -- consumer groups (ConsumerGroupManager) ----------------------------------------------

    def consumer_group_heartbeat(
        self, request: ccm.HeartbeatRequest, reply: Reply, now_ms: int
    ) -> Result:
        """ConsumerGroupHeartbeat: replies with a HeartbeatResponse (tries the steady path
        first)."""
        return self.consumer.heartbeat(request, reply, now_ms)

    def steady_consumer_group_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        client_id: str,
        client_host: str,
    ) -> ccm.HeartbeatResponse | None:
        """A ConsumerGroupHeartbeat that sets no optional field: its answer when it is steady
        (the member's session re-armed; checked and answered in one call, so nothing runs in
        between), else None and nothing changed: the caller takes the full path."""
        return self.consumer.steady(
            group_id, member_id, member_epoch, instance_id, client_id, client_host
        )

    def consumer_group_heartbeat_error(
        self, request: ccm.HeartbeatRequest
    ) -> HeartbeatError | None:
        """Kafka's validation of a ConsumerGroupHeartbeat (reads only the configuration)."""
        return self.consumer.validate(request)

    def consumer_group_describe(self, group_ids: list[str], reply: Reply) -> Result:
        """ConsumerGroupDescribe of this shard's `group_ids`: replies with their
        DescribedConsumerGroup list, in that order (a read: no records)."""
        return self.consumer.describe_groups(group_ids, reply)

    # -- reads of both kinds of groups -------------------------------------------------------

    def describe_groups(self, group_ids: list[str], api_version: int, reply: Reply) -> Result:
        """DescribeGroups of this shard's `group_ids`: replies with their classic
        DescribedGroup list, in that order (a consumer group is Dead there, as in Kafka).
        A read: no records."""
        result = Result()
        result.reply(reply, self.classic.describe_groups(group_ids, api_version))
        return result

    def list_groups(
        self, states_filter: Iterable[str], types_filter: Iterable[str], reply: Reply
    ) -> Result:
        """ListGroups: replies with this shard's ListedGroup list, classic groups then
        consumer groups, filtered by state and type (case-insensitive). A read."""
        listed = self.classic.list_groups(states_filter, types_filter)
        listed.extend(self.consumer.list_groups(states_filter, types_filter))
        result = Result()
        result.reply(reply, listed)
        return result

    # -- the group registry ------------------------------------------------------------------

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    def get_or_create_classic_group(self, group_id: str, now_ms: int) -> ClassicGroup:
        """A new group is Empty, generation 0, with no protocol type (a 'simple' group until
        a member joins)."""
        group = self.groups.get(group_id)
        if group is None:
            group = ClassicGroup(group_id, state_timestamp_ms=now_ms)
            self.groups[group_id] = group
        return group

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.consumer_groups.get(group_id)

    def has_group(self, group_id: str) -> bool:
        return group_id in self.groups or group_id in self.consumer_groups

    def group_count(self) -> int:
        return len(self.groups) + len(self.consumer_groups)

    def groups_full(self) -> str | None:
        """Why no group may be created (the server holds groups_max groups), or None.
        Asked only by a request that would create a group; replay never is."""
        limit = self.config.max_groups
        if self._groups_total() < limit:
            return None
        return f"The coordinator holds its maximum of {limit} groups (groups_max)."

    def consumer_settings(self, group_id: str) -> ConsumerGroupSettings:
        """The group's settings: its dynamic overrides over the broker's. Overrides that
        the broker's bounds no longer allow (changed since they were set) are ignored."""
        overrides = self.group_configs.overrides(group_id)
        if overrides:
            try:
                return effective_settings(self.config, overrides)
            except InvalidGroupConfig:
                pass
        return self._default_settings

    def remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.state = GroupState.DEAD

    def timeline(self, group_id: str) -> list[GroupEvent] | None:
        """The group's last events, oldest first (None: a group never seen)."""
        return self.events.timeline(group_id)

    def member_counts(self) -> dict[str, int]:
        """Members per group, every group of the shard (an empty one: 0), for the metrics."""
        counts = {group_id: len(group.members) for group_id, group in self.groups.items()}
        counts.update((gid, len(group)) for gid, group in self.consumer_groups.items())
        return counts

    def stats(self) -> ShardStats:
        """Counts for the metrics: groups by state, offsets, and the managers' counters."""
        return ShardStats(
            classic_groups=Counter(group.state.value for group in self.groups.values()),
            consumer_groups=Counter(group.state().value for group in self.consumer_groups.values()),
            offsets=self.offsets.offset_count(),
            consumer_rebalances=self.consumer.rebalances,
            completed_rebalances=self.classic.completed_rebalances,
            classic_rebalances=self.classic.rebalances_from,
            commits=self.offsets.commits,
            expirations=self.offsets.expirations,
            deletions=self.offsets.deletions,
        )

    # -- replay and loading ------------------------------------------------------------------

    def replay(self, key: Any, value: Any, now_ms: int) -> None:
        """Apply one record. The only way durable state changes (and, at load, the only way
        state is rebuilt). Raises UnknownRecordType for a key of a type the shard does not
        know (the loader skips undecodable and unknown record types before they get here)."""
        if type(key) is OffsetCommitKey:
            self.offsets.replay(key, value, now_ms)
        elif type(key) is GroupMetadataKey:
            group_id = key.group
            if self.events.derived:
                derive_classic(
                    self.events,
                    group_id,
                    self.classic.persisted_view(group_id),
                    value,
                    group_id in self.groups,
                    now_ms,
                    self.classic.persisted_ids(group_id),
                )
            self.classic.replay(key, value, now_ms)
        elif type(key) in _CONSUMER_GROUP_KEYS:
            self._replay_consumer(key, value, now_ms)
        else:
            raise UnknownRecordType(getattr(key, "RECORD_TYPE", -1))

    def replay_commits(
        self, commits: Iterable[tuple[tuple[str, str, int], bytes]], now_ms: int
    ) -> None:
        """A run of OffsetCommit records, as (group, topic, partition) and raw value bytes,
        replayed at once (the loader's fast path: OffsetManager.replay_commits)."""
        self.offsets.replay_commits(commits, now_ms)

    def has_offsets(self, group_id: str) -> bool:
        return self.offsets.has_offsets(group_id)

    def take_parked_replies(self) -> list[Reply]:
        """Every parked JoinGroup and SyncGroup reply, taken from its member: the shard is
        being unloaded, and its runtime answers them NOT_COORDINATOR."""
        return self.classic.take_parked_replies()

    def _replay_consumer(self, key: Any, value: Any, now_ms: int) -> None:
        """Kafka's replay of consumer-group records: a value creates the group if needed,
        a tombstone for a group that is not there is a no-op."""
        group_id = key.group_id
        group = self.consumer_groups.get(group_id)
        if self.events.derived:
            before_consumer(self.events, self.topics, group, key, value, now_ms)
        if group is None:
            if value is None:
                return
            classic = self.groups.get(group_id)
            if classic is not None and classic.is_simple():
                # Kafka's getOrMaybeCreatePersistedConsumerGroup replaces it: once compaction
                # has dropped the GroupMetadata tombstone written when the consumer group
                # took the id, the group's older offset commits replay first and make a
                # simple group, which would otherwise shadow the consumer group (listed
                # twice, and its offsets expired as a simple group's, subscriptions ignored).
                del self.groups[group_id]
            group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
        if isinstance(key, ConsumerGroupMetadataKey) and value is None:
            group.dead = True
            del self.consumer_groups[group_id]
        else:
            group.apply(key, value)
            if self.events.derived:
                after_consumer(self.events, group, key, value, now_ms)

    def on_loaded(self, now_ms: int) -> Result:
        """After loading: re-arm member session timers and the offset-expiration timer; the
        Result holds what that starts (e.g. rebalances of groups over the size limit)."""
        result = self.classic.on_loaded(now_ms)
        self.consumer.on_loaded(now_ms)
        self.offsets.on_loaded(now_ms)
        return result

"""Committed offsets of one shard (Kafka's OffsetMetadataManager), for classic and simple
groups: OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups, expiration and topic deletion.

Theory of operation. Handlers validate against the group registry (`shard.groups`) and the
offsets held here, and return a Result whose `records` are OffsetCommit records (a tombstone
deletes) and GroupMetadata tombstones. The runtime replays those records before the next event
runs; `replay` is the only place the offsets change, so the state after a restart (replay of
the log, or of the compacted log) is the live state. Consequences worth knowing:

* A commit with generation < 0 to a missing group is accepted without creating the group in
  the handler: replaying its first OffsetCommit record creates the simple group (as Kafka's
  replay does at load). A commit that writes nothing (every partition's metadata too large)
  so leaves no phantom group behind, where Kafka keeps an in-memory one until expiration.
* Deleting a group writes its offset tombstones, then a GroupMetadata tombstone. Removing the
  group on replay of that tombstone is the classic manager's part (Kafka's removeGroup).

Memory. A shard may hold millions of offsets, so each is one `bytes` object: a fixed header
(offset, commit and expire timestamps, leader epoch, flags), then the topic id's 16 bytes if
it has one, then the metadata in UTF-8: 64-80 bytes with empty metadata. They live in
group -> topic -> partition dicts, which make a group's offsets cheap to list and delete.
Measured with the dicts and groups (tests/unit/test_offsets.py, 1000 groups x 10 topics x 10
partitions): ~123 bytes per offset, against ~250 for tuples of separate int/UUID objects.
Reads decode entries into `OffsetAndMetadata`.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    GroupMetadataKey,
    OffsetCommitFields,
    OffsetCommitKey,
    OffsetCommitValue,
    new_offset_commit_key,
    new_offset_commit_value,
    offset_commit_value_fields,
)

from .classic.group import ClassicGroup, GroupState
from .consumer.fencing import validate_offset_commit
from .consumer.group import ConsumerGroup
from .offset_messages import (
    DeletableGroupResult,
    DeleteGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetCommitTopicResult,
    OffsetDeleteResponse,
    OffsetDeleteTopicResult,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopicResult,
    PartitionResult,
    _new_commit_response,
    _new_partition_result,
    _new_topic_result,
)
from .pending_offsets import PendingOffsets
from .result import Record, Reply, Result

if TYPE_CHECKING:
    from .shard_view import ShardView

EXPIRE_TIMER_KEY = "expire-group-metadata"
ZERO_UUID = uuid.UUID(int=0)
CONSUMER_PROTOCOL_TYPE = "consumer"
# Consumer-protocol members must commit with OffsetCommit v9+ (KIP-848 added the epoch).
CONSUMER_COMMIT_MIN_VERSION = 9

_NOT_EMPTY = (
    GroupState.STABLE,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
)


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A stored offset, decoded."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int  # -1: none (the group's retention rules apply)
    topic_id: uuid.UUID | None

    @classmethod
    def from_value(cls, value: OffsetCommitValue) -> OffsetAndMetadata:
        return cls(
            value.offset,
            value.leader_epoch,
            value.metadata,
            value.commit_timestamp,
            value.expire_timestamp,
            _known_topic_id(value.topic_id),
        )


# ---------------------------------------------------------------------------------------------
# The compact stored form.

_HEADER = struct.Struct("<qqqib")  # offset, commit ts, expire ts, leader epoch, flags
_TIMES = struct.Struct("<8xqq")  # commit ts, expire ts
_OFFSET = struct.Struct("<q")
_OFFSET_AND_COMMIT = struct.Struct("<qq")  # offset, commit ts
_HAS_TOPIC_ID = 1
_TOPIC_ID_END = _HEADER.size + 16

Entry = bytes


def _pack(value: OffsetCommitValue) -> Entry:
    metadata = value.metadata.encode("utf-8", "surrogatepass") if value.metadata else b""
    topic_id = value.topic_id
    if topic_id is None or not topic_id.int:  # (_known_topic_id, inlined: once per commit)
        head = _HEADER.pack(
            value.offset, value.commit_timestamp, value.expire_timestamp, value.leader_epoch, 0
        )
        return head + metadata if metadata else head
    head = _HEADER.pack(
        value.offset,
        value.commit_timestamp,
        value.expire_timestamp,
        value.leader_epoch,
        _HAS_TOPIC_ID,
    )
    return head + topic_id.int.to_bytes(16) + metadata  # UUID.bytes (a property), inlined


def _pack_fields(fields: OffsetCommitFields) -> Entry:
    """`_pack` of the value these fields came from (`offset_commit_value_fields`)."""
    offset, leader_epoch, metadata, commit_ts, expire_ts, topic_id = fields
    if topic_id is None:
        head = _HEADER.pack(offset, commit_ts, expire_ts, leader_epoch, 0)
        return head + metadata.encode("utf-8", "surrogatepass") if metadata else head
    head = _HEADER.pack(offset, commit_ts, expire_ts, leader_epoch, _HAS_TOPIC_ID)
    if metadata:
        return head + topic_id + metadata.encode("utf-8", "surrogatepass")
    return head + topic_id


def _unpack(entry: Entry) -> OffsetAndMetadata:
    offset, commit_ts, expire_ts, leader_epoch, flags = _HEADER.unpack_from(entry)
    start = _HEADER.size
    topic_id = None
    if flags & _HAS_TOPIC_ID:
        topic_id = uuid.UUID(bytes=entry[start:_TOPIC_ID_END])
        start = _TOPIC_ID_END
    metadata = entry[start:].decode("utf-8", "surrogatepass") if len(entry) > start else ""
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts, expire_ts, topic_id)


def _entry_topic_id(entry: Entry) -> uuid.UUID | None:
    if entry[_HEADER.size - 1] & _HAS_TOPIC_ID:
        return uuid.UUID(bytes=entry[_HEADER.size : _TOPIC_ID_END])
    return None


def _known_topic_id(topic_id: uuid.UUID | None) -> uuid.UUID | None:
    # `.int`, not `== ZERO_UUID`: UUID.__eq__ is Python code, and this runs per commit.
    return None if topic_id is None or not topic_id.int else topic_id


def commit_records(
    group_id: str,
    request_topics: Iterable[OffsetCommitTopic],
    max_metadata_bytes: int,
    now_ms: int,
    expire_ms: int,
    records: list[Record],
) -> list[OffsetCommitTopicResult]:
    """The OffsetCommit records of a commit that passed the group's checks, appended to
    `records` (OffsetCommit's and TxnOffsetCommit's), and the per-partition answers:
    OFFSET_METADATA_TOO_LARGE for metadata over `max_metadata_bytes`, else NONE."""
    topics: list[OffsetCommitTopicResult] = []
    for topic in request_topics:
        topic_id = topic.topic_id
        if topic_id is not None and not topic_id.int:  # _known_topic_id, inlined
            topic_id = None
        partitions: list[PartitionResult] = []
        for p in topic.partitions:
            if p.metadata and _java_length(p.metadata) > max_metadata_bytes:
                partitions.append(PartitionResult(p.index, ErrorCode.OFFSET_METADATA_TOO_LARGE))
                continue
            partitions.append(_new_partition_result(p.index, ErrorCode.NONE))
            value = new_offset_commit_value(
                p.offset, p.leader_epoch, p.metadata or "", now_ms, expire_ms, topic_id
            )
            records.append((new_offset_commit_key(group_id, topic.name, p.index), value))
        topics.append(_new_topic_result(topic.name, topic.topic_id, partitions))
    return topics


def _java_length(s: str) -> int:
    """String.length() in Java: UTF-16 code units (Kafka's offset.metadata.max.bytes test)."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


# ---------------------------------------------------------------------------------------------


class OffsetManager:
    def __init__(self, shard: ShardView) -> None:
        self.shard = shard
        # group -> topic -> partition -> packed entry. Empty inner dicts are removed.
        self._offsets: dict[str, dict[str, dict[int, Entry]]] = {}
        self._count = 0
        # Transactional offsets waiting for their markers (pending_offsets.py); `_open` is
        # its index, falsy when nothing is pending (all a plain commit's replay checks).
        self.pending = PendingOffsets()
        self._open = self.pending.open
        # Metrics counters (Kafka's offset-commit/-expiration/-deletion sensors), counted when
        # the records are emitted.
        self.commits = 0
        self.expirations = 0
        self.deletions = 0

    # -- reads -----------------------------------------------------------------------------

    def offset_count(self) -> int:
        """Offsets stored in this shard (the num-offsets gauge)."""
        return self._count

    def get(self, group_id: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        entry = self._offsets.get(group_id, {}).get(topic, {}).get(partition)
        return None if entry is None else _unpack(entry)

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._offsets

    def group_offsets(self, group_id: str) -> dict[str, dict[int, OffsetAndMetadata]]:
        return {
            topic: {p: _unpack(e) for p, e in parts.items()}
            for topic, parts in self._offsets.get(group_id, {}).items()
        }

    def snapshot(self) -> dict[tuple[str, str, int], OffsetAndMetadata]:
        """Every stored offset keyed by (group, topic, partition); for tests and tooling."""
        return {(g, t, p): _unpack(e) for g, t, p, e in self._entries()}

    def committed(self) -> list[tuple[str, str, int, int, int]]:
        """(group, topic, partition, offset, commit time in ms) of every stored offset, for
        lag at scrape time: only each entry's first 16 bytes are decoded."""
        head_of = _OFFSET_AND_COMMIT.unpack_from
        return [(g, t, p, *head_of(e)) for g, t, p, e in self._entries()]

    def committed_chunks(self, rows_max: int) -> Iterator[list[tuple[str, str, int, int, int]]]:
        """`committed`, in lists of whole groups, a list given as soon as it holds
        `rows_max` rows: a caller may yield to the loop between two. The groups are listed
        when the first list is asked for; each group's offsets are read when its list is
        made (a group deleted meanwhile is still listed in this pass)."""
        head_of = _OFFSET_AND_COMMIT.unpack_from
        chunk: list[tuple[str, str, int, int, int]] = []
        for group_id, topics in list(self._offsets.items()):
            for topic, parts in topics.items():
                chunk += [(group_id, topic, p, *head_of(e)) for p, e in parts.items()]
            if len(chunk) >= rows_max:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def lag_by_group(
        self, high_watermark: Callable[[str, int], int | None]
    ) -> dict[str, tuple[int, int]]:
        """{group: (partitions, records behind)} over the group's offsets on partitions
        that exist (`high_watermark` None: not counted), for the web page's list of groups:
        one pass, nothing built per offset."""
        offset_of = _OFFSET.unpack_from
        out = {}
        for group_id, topics in self._offsets.items():
            partitions = behind = 0
            for topic, parts in topics.items():
                for partition, entry in parts.items():
                    end = high_watermark(topic, partition)
                    if end is not None:
                        partitions += 1
                        lag = end - offset_of(entry)[0]
                        if lag > 0:
                            behind += lag
            out[group_id] = (partitions, behind)
        return out

    def _entries(self) -> Iterator[tuple[str, str, int, Entry]]:
        for group_id, topics in self._offsets.items():
            for topic, parts in topics.items():
                for partition, entry in parts.items():
                    yield group_id, topic, partition, entry

    # -- replay ----------------------------------------------------------------------------

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None, now_ms: int) -> None:
        """Apply an OffsetCommit record: store the offset, or delete it (tombstone). An offset
        for a group that does not exist creates a simple group, as Kafka's replay does; a
        tombstone for an unknown offset is a no-op."""
        group_id = key.group
        if value is None:
            if self._open:
                self.pending.drop(group_id, key.topic, key.partition)
            topics = self._offsets.get(group_id)
            if topics is None:
                return
            parts = topics.get(key.topic)
            if parts is None or parts.pop(key.partition, None) is None:
                return
            self._count -= 1
            if not parts:
                del topics[key.topic]
                if not topics:
                    del self._offsets[group_id]
            return
        shard = self.shard
        if group_id not in shard.groups and group_id not in shard.consumer_groups:  # has_group
            shard.get_or_create_classic_group(group_id, now_ms)
        topics = self._offsets.get(group_id)
        if topics is None:
            topics = self._offsets[group_id] = {}
        parts = topics.get(key.topic)
        if parts is None:
            parts = topics[key.topic] = {}
        if key.partition not in parts:
            self._count += 1
        parts[key.partition] = _pack(value)
        if self._open:
            self.pending.supersede(group_id, key.topic, key.partition)

    def replay_transactional(
        self,
        key: OffsetCommitKey,
        value: OffsetCommitValue | None,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> None:
        """An OffsetCommit record of a transactional batch: the producer's pending offset
        (a missing group is created, as for a plain commit); a tombstone there deletes as
        anywhere else."""
        if value is None:
            self.replay(key, None, now_ms)
            return
        if not self.shard.has_group(key.group):
            self.shard.get_or_create_classic_group(key.group, now_ms)
        self.pending.add(
            producer_id, producer_epoch, key.group, key.topic, key.partition, _pack(value)
        )

    def replay_end_transaction(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """A transaction marker: a COMMIT makes the producer's pending offsets that no newer
        record beat the committed ones; an ABORT drops them (pending_offsets.py)."""
        for group_id, topic, partition, entry in self.pending.end(
            producer_id, producer_epoch, commit
        ):
            parts = self._offsets.setdefault(group_id, {}).setdefault(topic, {})
            if partition not in parts:
                self._count += 1
            parts[partition] = entry

    def replay_commits(
        self, commits: Iterable[tuple[tuple[str, str, int], bytes]], now_ms: int
    ) -> None:
        """Apply a run of OffsetCommit records that are all commits (no tombstone), given as
        ((group, topic, partition), value bytes), each key at most once: the loader's bulk
        form of `replay`. Packs straight from the value bytes (no OffsetCommitValue).

        Replaying a run of commits with nothing else in between equals replaying, for each
        key in the order of its first commit in the run, its last value: a later commit only
        overwrites the entry (a dict keeps the position of the first insertion) and the
        only other effect, creating a missing group, happens at the group's first commit.
        Deduplicating the run that way is the caller's part."""
        if self._open:  # the run is newer than every pending entry
            commits = list(commits)
            for (group_id, topic, partition), _ in commits:
                self.pending.supersede(group_id, topic, partition)
        shard = self.shard
        offsets = self._offsets
        count = self._count
        value_fields = offset_commit_value_fields
        pack_header = _HEADER.pack
        last_group: str | None = None
        last_topic: str | None = None
        topics: dict[str, dict[int, Entry]] = {}
        parts: dict[int, Entry] = {}
        try:
            for (group_id, topic, partition), raw in commits:
                if group_id != last_group:
                    # Within the run nothing removes a group: checking once per group
                    # (consecutive keys of a group are the common case) is enough.
                    if not shard.has_group(group_id):
                        shard.get_or_create_classic_group(group_id, now_ms)
                    found_topics = offsets.get(group_id)
                    if found_topics is None:
                        found_topics = offsets[group_id] = {}
                    topics = found_topics
                    last_group = group_id
                    last_topic = None
                if topic != last_topic:
                    found_parts = topics.get(topic)
                    if found_parts is None:
                        found_parts = topics[topic] = {}
                    parts = found_parts
                    last_topic = topic
                fields = value_fields(raw)
                offset, leader_epoch, metadata, commit_ts, expire_ts, topic_id = fields
                if topic_id is None and not metadata:  # the common case, inlined
                    entry = pack_header(offset, commit_ts, expire_ts, leader_epoch, 0)
                else:
                    entry = _pack_fields(fields)
                if partition not in parts:
                    count += 1
                parts[partition] = entry
        finally:
            self._count = count

    def on_loaded(self, now_ms: int) -> None:
        """Arm the periodic expiration of offsets and empty groups."""
        self._schedule_expiration()

    # -- OffsetCommit ----------------------------------------------------------------------

    def commit_offsets(self, request: OffsetCommitRequest, reply: Reply, now_ms: int) -> Result:
        """OffsetCommit for classic, simple and consumer groups. Emits an OffsetCommit
        record per accepted partition. Errors for the whole request (every partition
        carries it): GROUP_ID_NOT_FOUND (v9+) / ILLEGAL_GENERATION (v<9) for a missing group
        with generation >= 0, COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID,
        FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, GROUP_MAX_SIZE_REACHED
        (a new simple group past groups_max: ours); for consumer groups
        UNSUPPORTED_VERSION (a consumer-protocol member below v9) and STALE_MEMBER_EPOCH
        (KIP-1251 fencing, consumer/fencing.py); per partition OFFSET_METADATA_TOO_LARGE."""
        result = Result()
        shard = self.shard
        consumer_group = shard.consumer_groups.get(request.group_id)
        group = shard.groups.get(request.group_id)
        if consumer_group is not None:
            error = _validate_consumer_commit(consumer_group, request)
        else:
            error = self._validate_commit(group, request)
        if error is not ErrorCode.NONE:
            result.reply(reply, _commit_error_response(request, error))
            return result

        if group is not None and group.state in (
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
        ):
            # The classic protocol: a commit counts as a heartbeat of the member.
            self.shard.classic.touch_member(group, request.member_id, now_ms)

        expire_ms = -1
        if 2 <= request.version <= 4 and request.retention_time_ms != -1:
            expire_ms = now_ms + request.retention_time_ms
        topics = commit_records(
            request.group_id,
            request.topics,
            self.shard.config.offset_metadata_max_bytes,
            now_ms,
            expire_ms,
            result.records,
        )
        self.commits += len(result.records)
        result.reply(reply, _new_commit_response(topics))
        return result

    def _validate_commit(
        self, group: ClassicGroup | None, request: OffsetCommitRequest
    ) -> ErrorCode:
        """Kafka's validateOffsetCommit for classic groups (non-transactional); and ours:
        GROUP_MAX_SIZE_REACHED when the commit would create a group past groups_max."""
        generation = request.generation_id_or_member_epoch
        if group is None:
            if generation < 0:
                # A simple group; replay of the records creates it.
                if self.shard.groups_full() is not None:
                    return ErrorCode.GROUP_MAX_SIZE_REACHED
                return ErrorCode.NONE
            if request.version >= 9:
                return ErrorCode.GROUP_ID_NOT_FOUND
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.NONE  # admin client or manual assignment
        if generation >= 0 or request.member_id != "" or request.group_instance_id is not None:
            error = group.validate_member(request.member_id, request.group_instance_id)
            if error is not ErrorCode.NONE:
                return error
            if generation != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif group.state is not GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- OffsetFetch -----------------------------------------------------------------------

    def fetch_offsets(self, request: OffsetFetchRequest, reply: Reply, now_ms: int) -> Result:
        """OffsetFetch for one group; writes nothing. A missing or Dead group is no error:
        requested partitions answer offset -1 (fetch-all: no topics). An offset stored under
        another (non-zero) topic id than the requested one answers -1: the topic was
        re-created. With `require_stable`, a partition with a pending transactional offset
        answers UNSTABLE_OFFSET_COMMIT (offset -1), as Kafka's (partition level, every
        version); without it, the committed offset.
        A consumer group checks the member when the request names one (v9): group-level
        UNKNOWN_MEMBER_ID, or STALE_MEMBER_EPOCH unless the epoch is the member's (strict:
        no KIP-1251 leniency for fetches)."""
        result = Result()
        group = self.shard.classic_group(request.group_id)
        consumer_group = self.shard.consumer_group(request.group_id)
        stored: dict[str, dict[int, Entry]] = {}
        if consumer_group is not None:
            error = _validate_consumer_fetch(consumer_group, request)
            if error is not ErrorCode.NONE:
                result.reply(reply, OffsetFetchResponse(request.group_id, [], error))
                return result
            stored = self._offsets.get(request.group_id, {})
        elif group is not None and group.state is not GroupState.DEAD:
            stored = self._offsets.get(request.group_id, {})
        topics: list[OffsetFetchTopicResult] = []
        unstable = self.pending.has if request.require_stable and self._open else None
        group_id = request.group_id
        if request.topics is None:
            for name, parts in stored.items():
                ids = {_entry_topic_id(e) for e in parts.values()}
                topic_id = ids.pop() if len(ids) == 1 else None
                partitions = [
                    _UNSTABLE(p)
                    if unstable and unstable(group_id, name, p)
                    else _fetched(p, _unpack(e))
                    for p, e in parts.items()
                ]
                topics.append(OffsetFetchTopicResult(name, topic_id, partitions))
        else:
            for topic in request.topics:
                parts = stored.get(topic.name, {})
                wanted = _known_topic_id(topic.topic_id)
                partitions = []
                for index in topic.partitions:
                    entry = parts.get(index)
                    stored_id = None if entry is None else _entry_topic_id(entry)
                    if unstable and unstable(group_id, topic.name, index):
                        partitions.append(_UNSTABLE(index))
                    elif entry is None or (
                        wanted is not None and stored_id is not None and stored_id != wanted
                    ):
                        partitions.append(OffsetFetchPartition(index))
                    else:
                        partitions.append(_fetched(index, _unpack(entry)))
                topics.append(OffsetFetchTopicResult(topic.name, topic.topic_id, partitions))
        result.reply(reply, OffsetFetchResponse(request.group_id, topics))
        return result

    # -- OffsetDelete ----------------------------------------------------------------------

    def delete_offsets(
        self, group_id: str, topics: Mapping[str, list[int]], reply: Reply, now_ms: int
    ) -> Result:
        """OffsetDelete. Emits a tombstone per requested partition that has an offset,
        committed or pending transactional (Kafka's rule).
        Top-level GROUP_ID_NOT_FOUND (missing or Dead group), NON_EMPTY_GROUP (a classic group
        with members whose protocol type is not "consumer"); per partition
        GROUP_SUBSCRIBED_TO_TOPIC for every partition of a topic the group consumes."""
        result = Result()
        group = self.shard.classic_group(group_id)
        consumer_group = self.shard.consumer_group(group_id)
        subscribed: _Subscriptions | _ConsumerSubscriptions
        if consumer_group is not None:
            subscribed = _ConsumerSubscriptions(consumer_group)  # no group-level check
        elif group is None or group.state is GroupState.DEAD:
            result.reply(reply, OffsetDeleteResponse(ErrorCode.GROUP_ID_NOT_FOUND, []))
            return result
        elif group.state in _NOT_EMPTY and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            result.reply(reply, OffsetDeleteResponse(ErrorCode.NON_EMPTY_GROUP, []))
            return result
        else:
            subscribed = _Subscriptions(group)
        stored = self._offsets.get(group_id, {})
        results: list[OffsetDeleteTopicResult] = []
        for name, indexes in topics.items():
            if subscribed.includes(name):
                error = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                partitions = [PartitionResult(i, error) for i in indexes]
            else:
                partitions = [PartitionResult(i) for i in indexes]
                parts = stored.get(name, {})
                for index in dict.fromkeys(indexes):
                    if index in parts or self.pending.has(group_id, name, index):
                        result.records.append((OffsetCommitKey(group_id, name, index), None))
            results.append(OffsetDeleteTopicResult(name, partitions))
        self.deletions += len(result.records)
        result.reply(reply, OffsetDeleteResponse(ErrorCode.NONE, results))
        return result

    # -- DeleteGroups ----------------------------------------------------------------------

    def delete_groups(self, group_ids: list[str], reply: Reply, now_ms: int) -> Result:
        """DeleteGroups for the groups of this shard (duplicates answered once). Per group:
        GROUP_ID_NOT_FOUND (missing or Dead), NON_EMPTY_GROUP (a group not Empty), else NONE
        with offset tombstones then the group's tombstones (GroupMetadata, or every
        consumer-group record), all in one write."""
        result = Result()
        results: list[DeletableGroupResult] = []
        for group_id in dict.fromkeys(group_ids):
            group = self.shard.classic_group(group_id)
            consumer_group = self.shard.consumer_group(group_id)
            if consumer_group is not None:
                if consumer_group.is_empty():
                    error = ErrorCode.NONE
                    self.deletions += self.delete_all_offsets(group_id, result.records)
                    result.records.extend(self.shard.consumer.deletion_records(consumer_group))
                else:
                    error = ErrorCode.NON_EMPTY_GROUP
            elif group is None or group.state is GroupState.DEAD:
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                error = ErrorCode.NON_EMPTY_GROUP
            else:
                error = ErrorCode.NONE
                self.deletions += self.delete_all_offsets(group_id, result.records)
                result.records.append((GroupMetadataKey(group_id), None))
            results.append(DeletableGroupResult(group_id, error))
        result.reply(reply, DeleteGroupsResponse(results))
        return result

    def delete_all_offsets(self, group_id: str, records: list[Record]) -> int:
        """Append a tombstone for every offset of the group, pending transactional ones
        included (as Kafka's deleteAllOffsets); returns how many."""
        before = len(records)
        stored = self._offsets.get(group_id, {})
        for topic, parts in stored.items():
            for partition in parts:
                records.append((OffsetCommitKey(group_id, topic, partition), None))
        for topic, partition in self.pending.partitions(group_id):
            if partition not in stored.get(topic, {}):
                records.append((OffsetCommitKey(group_id, topic, partition), None))
        return len(records) - before

    # -- expiration ------------------------------------------------------------------------

    def _schedule_expiration(self) -> None:
        interval = self.shard.config.offsets_retention_check_interval_ms
        self.shard.timer.schedule(EXPIRE_TIMER_KEY, interval, self._expire)

    def _expire(self, now_ms: int) -> Result:
        result = self.expire(now_ms)
        self._schedule_expiration()
        return result

    def expire(self, now_ms: int) -> Result:
        """One expiration cycle (Kafka's cleanupGroupMetadata): tombstones for expired
        offsets of topics the group does not consume, then a GroupMetadata tombstone for each
        Empty group left without offsets (including groups that never had any). A partition
        with a pending transactional offset keeps its offset, and a group with one is not
        deleted (Kafka's cleanupExpiredOffsets)."""
        result = Result()
        pending = self.pending
        for group_id, group in list(self.shard.groups.items()):
            if self._expire_group(group, now_ms, result.records):
                if group.state is GroupState.EMPTY and not pending.has_group(group_id):
                    result.records.append((GroupMetadataKey(group_id), None))
        for consumer_group in list(self.shard.consumer_groups.values()):
            if self._expire_consumer_group(consumer_group, now_ms, result.records):
                if consumer_group.is_empty() and not pending.has_group(consumer_group.group_id):
                    result.records.extend(self.shard.consumer.deletion_records(consumer_group))
        return result

    def _expire_consumer_group(
        self, group: ConsumerGroup, now_ms: int, records: list[Record]
    ) -> bool:
        """Consumer groups: offsets of unsubscribed topics expire by commit time; True
        when none is left."""
        return self._expire_offsets(
            group.group_id, _ConsumerSubscriptions(group), None, now_ms, records
        )

    def _expire_group(self, group: ClassicGroup, now_ms: int, records: list[Record]) -> bool:
        """Tombstone the group's expired offsets; True when none is left."""
        if group.group_id not in self._offsets:
            return True
        # Kafka's ClassicGroup.offsetExpirationCondition: what an offset's age counts from.
        since_ms: int | None = None  # None: from the commit
        if group.protocol_type is None:
            pass  # simple group: from the commit
        elif group.state is GroupState.EMPTY:
            if group.state_timestamp_ms >= 0:  # else from the commit
                since_ms = group.state_timestamp_ms
        elif not (
            group.state is GroupState.STABLE
            and group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics() is not None
        ):
            return False  # members may still need them: no expiration
        return self._expire_offsets(
            group.group_id, _Subscriptions(group), since_ms, now_ms, records
        )

    def _expire_offsets(
        self,
        group_id: str,
        subscribed: _Subscriptions | _ConsumerSubscriptions,
        since_ms: int | None,
        now_ms: int,
        records: list[Record],
    ) -> bool:
        """Tombstone the group's offsets of topics it does not consume that are expired:
        past their own expire timestamp (v2-4 commits), else older than the retention,
        counted from `since_ms` or, when None, from their commit. True when none is left."""
        topics = self._offsets.get(group_id)
        if topics is None:
            return True
        retention_ms = self.shard.config.offsets_retention_ms
        all_expired = True
        for topic, parts in topics.items():
            if subscribed.includes(topic):
                all_expired = False
                continue
            for partition, entry in parts.items():
                commit_ts, expire_ts = _TIMES.unpack_from(entry)
                if expire_ts != -1:
                    expired = now_ms >= expire_ts
                else:
                    expired = now_ms - (commit_ts if since_ms is None else since_ms) >= retention_ms
                if expired and not (self._open and self.pending.has(group_id, topic, partition)):
                    records.append((OffsetCommitKey(group_id, topic, partition), None))
                    self.expirations += 1
                else:
                    all_expired = False
        return all_expired

    # -- topic deletion --------------------------------------------------------------------

    def topics_deleted(self, topics: Mapping[str, uuid.UUID | None], now_ms: int) -> Result:
        """Deleted topics (name -> topic id): tombstone every offset of those names whose
        stored topic id matches the deleted one or is unknown; an offset stored under another
        id belongs to a re-created topic and stays. A deleted id of None matches any."""
        result = Result()
        for group_id, stored in self._offsets.items():
            for name, deleted_id in topics.items():
                parts = stored.get(name)
                if parts is None:
                    continue
                deleted_id = _known_topic_id(deleted_id)
                for partition, entry in parts.items():
                    stored_id = _entry_topic_id(entry)
                    if deleted_id is None or stored_id is None or stored_id == deleted_id:
                        result.records.append((OffsetCommitKey(group_id, name, partition), None))
        # Pending transactional offsets of those topics too (Kafka's onPartitionsDeleted).
        for group_id, pending_topics in self._open.items():
            stored = self._offsets.get(group_id, {})
            for name in topics:
                for partition in pending_topics.get(name, {}):
                    if partition not in stored.get(name, {}):
                        result.records.append((OffsetCommitKey(group_id, name, partition), None))
        return result


class _Subscriptions:
    """Kafka's ClassicGroup.isSubscribedToTopic: the members' consumer-protocol topics; when
    unknown (unparseable), a "consumer" group counts as subscribed to everything, any other
    as subscribed to nothing. An empty group consumes nothing."""

    __slots__ = ("_topics", "_all")

    def __init__(self, group: ClassicGroup) -> None:
        self._topics: set[str] = set()
        self._all = False
        if not group.is_empty():
            topics = group.subscribed_topics()
            if topics is None:
                self._all = group.protocol_type == CONSUMER_PROTOCOL_TYPE
            else:
                self._topics = topics

    def includes(self, topic: str) -> bool:
        return self._all or topic in self._topics


class _ConsumerSubscriptions:
    """A consumer group's topics: names and resolved regexes of its members."""

    __slots__ = ("_topics",)

    def __init__(self, group: ConsumerGroup) -> None:
        self._topics = group.subscribed_topic_names()

    def includes(self, topic: str) -> bool:
        return topic in self._topics


def _validate_consumer_commit(group: ConsumerGroup, request: OffsetCommitRequest) -> ErrorCode:
    """Kafka's ConsumerGroup.validateOffsetCommit (non-transactional, C.1): admin commits
    to an empty group pass; otherwise the member must exist, use v9+ if it speaks the
    consumer protocol, and pass the KIP-1251 epoch check."""
    epoch = request.generation_id_or_member_epoch
    if epoch < 0 and group.is_empty():
        return ErrorCode.NONE
    member = group.member(request.member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    classic_member = group.metadata[request.member_id].classic_member_metadata is not None
    if not classic_member and request.version < CONSUMER_COMMIT_MIN_VERSION:
        return ErrorCode.UNSUPPORTED_VERSION
    partitions = (
        (topic.topic_id or ZERO_UUID, p.index) for topic in request.topics for p in topic.partitions
    )
    error, _ = validate_offset_commit(member, epoch, partitions, classic_member)
    return error


def _validate_consumer_fetch(group: ConsumerGroup, request: OffsetFetchRequest) -> ErrorCode:
    if request.member_id is None and request.member_epoch < 0:
        return ErrorCode.NONE
    member = group.member(request.member_id or "")
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if request.member_epoch != member.member_epoch:
        classic_member = group.metadata[member.member_id].classic_member_metadata is not None
        return ErrorCode.ILLEGAL_GENERATION if classic_member else ErrorCode.STALE_MEMBER_EPOCH
    return ErrorCode.NONE


def _UNSTABLE(index: int) -> OffsetFetchPartition:  # noqa: N802 - reads as a constant
    return OffsetFetchPartition(index, error=ErrorCode.UNSTABLE_OFFSET_COMMIT)


def _fetched(index: int, stored: OffsetAndMetadata) -> OffsetFetchPartition:
    return OffsetFetchPartition(index, stored.offset, stored.leader_epoch, stored.metadata)


def _commit_error_response(request: OffsetCommitRequest, error: ErrorCode) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        [
            OffsetCommitTopicResult(
                t.name, t.topic_id, [PartitionResult(p.index, error) for p in t.partitions]
            )
            for t in request.topics
        ]
    )

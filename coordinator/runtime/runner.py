"""ShardRunner: the runtime of one pure GroupShard (log_runner.py's CoordinatorShardRunner
holds the theory of operation: one writer, batches appended once a loop iteration or
round, replies after the fsync that covers them, a reload after a failed write), and the
group shards' fast loader (_LogReplayer, below)."""

from __future__ import annotations

import operator
import struct
import time
from collections.abc import Callable
from itertools import compress, count, islice, repeat
from pathlib import Path
from typing import Any, TypeVar

from groupcoord.protocol.batches import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MAX_TIMESTAMP_AT,
    TRANSACTIONAL_MASK,
    DefaultRecordBatch,
    header_struct,
    parse_header,
)
from groupcoord.protocol.commit_runs import CommitRun, commit_runs
from groupcoord.protocol.control_batches import marker_commits
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownRecordType,
    decode_record,
    encode_key,
    encode_value,
    offset_commit_key_fields,
)
from groupcoord.storage import GroupCommitter, LogConfig

from ..groups.config import GroupConfig, GroupConfigSource
from ..groups.result import Reply, Result
from ..groups.shard import GroupShard
from ..groups.topics import TopicImage
from ..observability.logging import get_logger
from ..observability.metrics import ServerMetrics
from . import clock as clocks
from .group_event_log import GroupEventLog
from .log_runner import (
    RELOAD_RETRY_S,
    CoordinatorShardRunner,
    NotActive,
    ShardState,
    StorageFailure,
    _Batch,
)

log = get_logger("groupcoord.shard")
events_log = get_logger("groupcoord.groups")

_A = TypeVar("_A")

LOAD_CHUNK_BYTES = 5 * 1024 * 1024  # offsets.load.buffer.size


class UuidIds:
    def new_uuid(self) -> str:
        import uuid

        return str(uuid.uuid4())


class ShardRunner(CoordinatorShardRunner):
    """The runner of one group coordinator shard."""

    encode_key = staticmethod(encode_key)
    encode_value = staticmethod(encode_value)

    def __init__(
        self,
        shard_id: int,
        directory: Path,
        group_config: GroupConfig,
        log_config: LogConfig,
        committer: GroupCommitter,
        clock_ms: Callable[[], int] | None = None,
        metrics: ServerMetrics | None = None,
        topics: TopicImage | None = None,
        group_configs: GroupConfigSource | None = None,
        clock: clocks.Clock | None = None,
        groups_total: Callable[[], int] | None = None,
    ) -> None:
        """`clock`: as CoordinatorShardRunner's. `groups_total`: the groups of every shard
        of the server (groups_max)."""
        self.topics = topics
        self.group_configs = group_configs
        self.group_config = group_config
        self.groups_total = groups_total
        self.event_log = GroupEventLog(events_log)
        super().__init__(shard_id, directory, log_config, committer, clock_ms, metrics, clock)

    def _new_shard(self) -> GroupShard:
        return GroupShard(
            self.shard_id,
            self.group_config,
            self.timer,
            UuidIds(),
            self.topics,
            self.group_configs,
            self.groups_total,
        )

    async def _replay_log(self, now_ms: int) -> int:
        """Replay the whole log into `self.shard` in LOAD_CHUNK_BYTES reads; returns how
        many records were replayed (unknown record types are skipped, not counted). The
        group events derived meanwhile rebuild the timelines, stamped with their batches'
        times, and are not logged; from then on they are (group_event_log.py)."""
        replayer = _LogReplayer(self.shard, self.shard_id, now_ms)
        await self._read_log(replayer.feed, LOAD_CHUNK_BYTES)
        replayer.flush()
        events = self.shard.events
        events.replay_time_ms = None
        events.sink = self.event_log
        return replayer.count

    def call_transactional(
        self,
        call: Callable[[GroupShard, _A, int], Result],
        argument: _A,
        queued_at: float | None,
        producer_id: int,
        producer_epoch: int,
    ) -> None:
        """`call` of an event whose records belong to the transaction of `producer_id`
        (TxnOffsetCommit): they are replayed as pending transactional offsets and written
        as their own transactional batch, after the records gathered before them (Kafka
        flushes the current batch first). Raises NotActive as `call`."""
        if self.state is not ShardState.ACTIVE:
            raise NotActive(self.state)
        now_ms = self.clock_ms()
        if queued_at is not None and self.metrics is not None:
            self.metrics.event_queue.observe(time.perf_counter() - queued_at)
        result = call(self.shard, argument, now_ms)
        if not result.records:
            self._apply(result, now_ms)
            return
        self._seal()
        if self.state is not ShardState.ACTIVE:  # the batch before failed: so does this one
            failure = StorageFailure("an earlier write of the shard failed")
            for reply, _ in result.replies:
                reply(failure)
            return
        shard = self.shard
        for key, value in result.records:
            shard.replay_transactional(key, value, producer_id, producer_epoch, now_ms)
        batch = self._batch = _Batch()
        batch.producer_id = producer_id
        batch.producer_epoch = producer_epoch
        batch.records = [
            (encode_key(key), None if value is None else encode_value(value))
            for key, value in result.records
        ]
        batch.replies = result.replies
        self._seal()

    def complete_transaction(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        reply: Reply,
        resumed: bool = False,
        transaction_version: int = 0,
    ) -> None:
        """A transaction marker for this shard: replayed (COMMIT makes the producer's
        pending offsets committed in every group here, ABORT drops them), then written as a
        control batch after the records gathered before it; `reply(ErrorCode.NONE)` once
        durable (a StorageFailure if the write fails). A marker older than the producer's
        epoch here is answered INVALID_PRODUCER_EPOCH at once, nothing written. `resumed`
        (a marker job resumed after a crash): a marker the shard holds already, with
        nothing of the producer since, is answered NONE at once, not written twice.
        `transaction_version`: the marker's (WriteTxnMarkers v2; 2 checks the epoch as
        KIP-890 markers: GroupShard.end_transaction_error). Raises NotActive as `call`."""
        if self.state is not ShardState.ACTIVE:
            raise NotActive(self.state)
        error = self.shard.end_transaction_error(producer_id, producer_epoch, transaction_version)
        if error is not ErrorCode.NONE:
            reply(error)
            return
        if resumed and self.shard.transaction_marker_written(producer_id, producer_epoch, commit):
            reply(ErrorCode.NONE)
            return
        self._seal()
        if self.state is not ShardState.ACTIVE:  # the batch before failed: so does this one
            reply(StorageFailure("an earlier write of the shard failed"))
            return
        self.shard.replay_end_transaction(producer_id, producer_epoch, commit)
        batch = self._batch = _Batch()
        batch.producer_id = producer_id
        batch.producer_epoch = producer_epoch
        batch.marker = commit
        batch.records = [(b"", None)]  # one control record, built by _seal
        batch.replies = [(reply, ErrorCode.NONE)]
        self._seal()


# -- loading ---------------------------------------------------------------------------------
#
# Replaying a record at a time (aiokafka record objects, decode_record, GroupShard.replay)
# costs ~3 us a record: 10 million commits took 30 s. _LogReplayer builds the same state
# from the same records 4-6 times faster (tests/bench/bench_restart.py), from two facts:
#
# * Offset commits (OffsetCommit records that are not tombstones) are by far the most
#   records, and a run of them with nothing else in between has the effect of each key's
#   last value replayed at the position of that key's first commit in the run (see
#   OffsetManager.replay_commits). So a run is gathered as raw key bytes -> last raw value
#   bytes in a dict (which keeps the first insertion's position), and only the survivors
#   are decoded, values straight into the packed entries, keys through a memo of their
#   (group, topic, partition). An uncompacted log commits the same keys over and over:
#   most values are never decoded, most keys decoded once.
# * A batch of nothing but commits is recognised with C-level operations only: the
#   records' (key, value) pairs come from aiokafka's batch iterator through attrgetter;
#   "no tombstone" is a containment test; "only OffsetCommit keys of type 1" is
#   b"\x00\x01" <= min(keys) and max(keys) < b"\x00\x02", since a key starts with its
#   int16 record type and bytes compare lexicographically.
# * Before that, a batch of commits in long runs of one shape (one request's commits, or
#   many groups whose keys have one length: a takeover's snapshot of a busy shard) is read
#   without record objects at all: protocol/commit_runs.py proves each run's framing with
#   strided slices and unpacks its keys and values with one struct.iter_unpack, 3 times
#   faster, and the fields of keys not seen before (a compacted snapshot's) with another;
#   it gives the batch up (None) when a record is anything but a commit with a value or
#   the runs are short, and the batch goes the way above.
#
# Any other batch (with a tombstone, a GroupMetadata or consumer-group record, an unknown
# record type, a null, too short or legacy key, or records below the requested offset) is
# replayed a record at a time: its commits join the run; any other record is decoded and
# replayed exactly as before (decode_record, GroupShard.replay) once the part of the run
# it depends on is replayed: the whole run, except that a GroupMetadata record or an
# offset tombstone may need none or only its group's commits (_before_group_record), and
# an unknown record type (skipped) none. So the state, dict orders included, is what the
# record-at-a-time replay builds; tests/unit/test_fast_load.py checks that. A legacy
# (type 0) commit key joins the run under its type 1 bytes: both name the same offset,
# and the run must keep one value per offset, not per spelling of its key.
#
# Errors: a malformed commit key or value fails the load as before (MalformedRecord), but
# when its run is replayed rather than at its record; and a commit value that a later one
# in its run overwrites is never decoded, so a malformed one of those no longer fails it.
# (The records are the coordinator's own, and batches after the recovery point had their
# CRC checked again when the log was opened.)

_KEY_VALUE = operator.attrgetter("key", "value")
_KEY = operator.itemgetter(0)
_VALUE = operator.itemgetter(1)
_LEGACY_COMMIT_KEY = b"\x00\x00"  # record type 0 (LegacyOffsetCommit)
_COMMIT_KEY = b"\x00\x01"  # record type 1 (OffsetCommit): the smallest such key
_FIRST_OTHER_KEY = b"\x00\x02"  # the smallest key of a record type above 1
# The header fields the loader reads, the others skipped (protocol/batches.py's layout).
_BATCH_HEAD = header_struct(
    "base_offset",
    "batch_length",
    "magic",
    "attributes",
    "last_offset_delta",
    "records_count",
)
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_TRANSACTIONAL_OR_CONTROL = TRANSACTIONAL_MASK | CONTROL_MASK


def _commit_keys(pairs: list[tuple[Any, bytes]]) -> bool:
    """Whether every key of `pairs` (not empty) is an OffsetCommit key of type 1."""
    keys = list(map(_KEY, pairs))
    try:
        return bool(_COMMIT_KEY <= min(keys) and max(keys) < _FIRST_OTHER_KEY)
    except TypeError:  # a null key
        return False


class _LogReplayer:
    """Replays a shard's log, chunk by chunk, into a GroupShard (see above)."""

    __slots__ = (
        "shard",
        "shard_id",
        "now_ms",
        "count",
        "_keys",
        "_pending",
        "_indexed",
        "_by_group",
        "_new_groups",
    )

    def __init__(self, shard: GroupShard, shard_id: int, now_ms: int) -> None:
        self.shard = shard
        self.shard_id = shard_id
        self.now_ms = now_ms
        self.count = 0  # records replayed
        # Commit key bytes -> (group, topic, partition), for every key decoded so far.
        self._keys: dict[bytes, tuple[str, str, int]] = {}
        # The current run of commits: key bytes -> last value bytes, in first-commit order.
        self._pending: dict[bytes, bytes] = {}
        # Group-scoped barriers (see _before_group_record): the first `_indexed` keys of
        # the run, by group; whether one of those groups was missing from the registry
        # or from the offsets when indexed.
        self._indexed = 0
        self._by_group: dict[str, list[bytes]] = {}
        self._new_groups = False

    def feed(self, chunk: bytes, offset: int) -> int:
        """Replay the whole batches of `chunk` (records below `offset` are skipped); returns
        the offset after the last batch replayed."""
        view = memoryview(chunk)
        pending = self._pending
        total = len(chunk)
        pos = 0
        while pos < total:
            if total - pos < HEADER_SIZE:
                parse_header(chunk, pos)  # raises InvalidBatch
            base, length, magic, attributes, last_delta, records = _BATCH_HEAD.unpack_from(
                chunk, pos
            )
            if magic != MAGIC_V2 or length < _MIN_BATCH_LENGTH or last_delta < 0 or records < 0:
                parse_header(chunk, pos)  # raises InvalidBatch
            end = pos + length + LOG_OVERHEAD
            if end > total:
                break
            # Batches read from the log passed their CRC check (PartitionLog.read).
            if attributes & _TRANSACTIONAL_OR_CONTROL:
                self._replay_transactional(view[pos:end], offset)
            else:
                runs = None
                if base >= offset and not attributes & COMPRESSION_MASK:
                    runs = commit_runs(chunk, pos + HEADER_SIZE, end, records)
                if runs is not None:  # only commits, read in bulk (commit_runs.py)
                    for run in runs:
                        self._take_run(run)
                    self.count += records
                    offset = base + last_delta + 1
                    pos = end
                    continue
                batch = view[pos:end]
                if base >= offset:
                    pairs = list(map(_KEY_VALUE, DefaultRecordBatch(batch)))
                    skipped = 0
                else:  # the batch holding the log start: skip the records below it
                    decoded = list(DefaultRecordBatch(batch))
                    pairs = [(r.key, r.value) for r in decoded if r.offset >= offset]
                    skipped = len(decoded) - len(pairs)
                if not pairs:
                    pass
                elif None not in map(_VALUE, pairs) and _commit_keys(pairs):
                    pending.update(pairs)
                    self.count += len(pairs)
                else:
                    self._replay_pairs(pairs, batch, skipped)
            offset = base + last_delta + 1
            pos = end
        return offset

    def _take_run(self, run: CommitRun) -> None:
        """A run of commits read in bulk joins the pending run. Keys never seen before (a
        snapshot holds each key once) are decoded in bulk too: the run's groups and
        topics once each (one string per name, shared by its keys), its fields in C."""
        pairs = run.pairs.iter_unpack(run.records)
        keys = self._keys
        if run.pairs.unpack_from(run.records)[0] in keys:  # seen: the rest likely too
            self._pending.update(pairs)
            return
        taken = list(pairs)
        self._pending.update(taken)
        groups, topics, partitions = zip(*run.fields.iter_unpack(run.records), strict=True)
        try:
            names = {name: name.decode() for name in {*groups, *topics}}
        except UnicodeDecodeError:  # flush decodes these keys one by one and reports it
            return
        fields = zip(
            map(names.__getitem__, groups), map(names.__getitem__, topics), partitions, strict=True
        )
        keys.update(zip(map(_KEY, taken), fields, strict=True))

    def flush(self) -> None:
        """Replay the pending run of commits."""
        pending = self._pending
        if not pending:
            return
        keys = self._keys
        for key in pending:
            if key not in keys:
                keys[key] = offset_commit_key_fields(key)
        self.shard.replay_commits(
            zip(map(keys.__getitem__, pending), pending.values(), strict=True), self.now_ms
        )
        pending.clear()
        self._indexed = 0
        self._by_group.clear()
        self._new_groups = False

    def _replay_transactional(self, batch: memoryview, offset: int) -> None:
        """A transactional batch (TxnOffsetCommit records: pending offsets of its producer)
        or a control batch (a transaction marker), replayed after the run before it (records
        below `offset` skipped). Rare next to plain commits: decoded record by record."""
        self.flush()
        header = parse_header(batch)
        shard = self.shard
        for record in DefaultRecordBatch(batch):
            if record.offset < offset:
                continue
            if header.is_control:
                commit = marker_commits(record.key)
                if commit is not None:
                    shard.replay_end_transaction(header.producer_id, header.producer_epoch, commit)
                continue
            try:
                key, value = decode_record(record.key, record.value)
            except UnknownRecordType as e:
                log.warning(
                    "skipping unknown record type",
                    shard=self.shard_id,
                    offset=record.offset,
                    error=str(e),
                )
                continue
            shard.replay_transactional(
                key, value, header.producer_id, header.producer_epoch, self.now_ms
            )
            self.count += 1

    def _replay_pairs(self, pairs: list[tuple[Any, Any]], batch: memoryview, skipped: int) -> None:
        """A batch that is not all commits: the commits between its other records join the
        run a slice at a time, the other records go one by one to _replay_record."""
        keys = list(map(_KEY, pairs))
        if None in keys:  # a null key (decode_record raises): no slicing
            for index, (key, value) in enumerate(pairs):
                self._replay_record(key, value, batch, skipped + index)
            return
        # Positions of the records other than type 1 commits (C-level: see above).
        others = set(compress(count(), map(_FIRST_OTHER_KEY.__le__, keys)))
        others.update(compress(count(), map(_COMMIT_KEY.__gt__, keys)))
        others.update(compress(count(), map(operator.is_, map(_VALUE, pairs), repeat(None))))
        pending = self._pending
        start = 0
        for index in sorted(others):
            if start < index:
                pending.update(pairs[start:index])
                self.count += index - start
            key, value = pairs[index]
            self._replay_record(key, value, batch, skipped + index)
            start = index + 1
        if start < len(pairs):
            pending.update(pairs[start:])
            self.count += len(pairs) - start

    def _replay_record(self, key: Any, value: Any, batch: memoryview, index: int) -> None:
        """One record: a commit joins the run; anything else is replayed as decoded records,
        after the part of the run it depends on."""
        if (
            value is not None
            and type(key) is bytes
            and _LEGACY_COMMIT_KEY <= key < _FIRST_OTHER_KEY
            and len(key) >= 2
        ):
            if key[1] == 0:  # legacy type 0: the same offset as its type 1 spelling
                key = _COMMIT_KEY + key[2:]
            self._pending[key] = value
            self.count += 1
            return
        try:
            decoded_key, decoded_value = decode_record(key, value)
        except UnknownRecordType as e:
            log.warning(
                "skipping unknown record type",
                shard=self.shard_id,
                offset=_record_offset(batch, index),
                error=str(e),
            )
            return
        self.shard.events.replay_time_ms = _batch_time_ms(batch)
        if type(decoded_key) is GroupMetadataKey:
            self._before_group_record(decoded_key.group, decoded_value is None)
        elif type(decoded_key) is OffsetCommitKey and decoded_value is None:
            self._before_group_record(decoded_key.group, True)
        else:
            self.flush()
        self.shard.replay(decoded_key, decoded_value, self.now_ms)
        self.count += 1

    def _before_group_record(self, group_id: str, removes: bool) -> None:
        """Make the pending run consistent with a GroupMetadata record or an offset tombstone
        of `group_id`, about to be replayed.

        Such a record touches only its group: the registry entry (GroupMetadata replay sets
        or removes it; `_persisted` is not the run's business) or one offset. Commits of
        other groups may stay pending across it when their own effects cannot interleave
        with it: when every group with a pending commit already had a registry entry and
        offsets as its first pending commit came, those commits create nothing (a commit's
        only effect besides its offset) and their offsets keep their places, flushed now or
        later. Then a GroupMetadata value needs nothing flushed (it never touches offsets),
        and a removal (GroupMetadata or offset tombstone) needs the group's own pending
        commits flushed first: they came while the group or offset still existed. Else (a
        run that creates groups or group offsets) the whole run is flushed, as for any other
        record."""
        if not self._pending:
            return
        self._index_pending()
        if self._new_groups:
            self.flush()
        elif removes and group_id in self._by_group:
            self._flush_group(group_id)

    def _index_pending(self) -> None:
        """Index the keys added to the run since the last call by group."""
        pending = self._pending
        fresh = len(pending) - self._indexed
        if fresh <= 0:
            return
        keys = self._keys
        by_group = self._by_group
        shard = self.shard
        tail = list(islice(reversed(pending), fresh))
        tail.reverse()
        for key in tail:
            fields = keys.get(key)
            if fields is None:
                fields = keys[key] = offset_commit_key_fields(key)
            group_id = fields[0]
            group_keys = by_group.get(group_id)
            if group_keys is None:
                group_keys = by_group[group_id] = []
                if not shard.has_group(group_id) or not shard.has_offsets(group_id):
                    self._new_groups = True
            group_keys.append(key)
        self._indexed = len(pending)

    def _flush_group(self, group_id: str) -> None:
        """Replay the pending commits of one group (all indexed) and take them out of the
        run."""
        group_keys = self._by_group.pop(group_id)
        self.shard.replay_commits(
            zip(
                map(self._keys.__getitem__, group_keys),
                map(self._pending.pop, group_keys),
                strict=True,
            ),
            self.now_ms,
        )
        self._indexed -= len(group_keys)


_TIMESTAMP = struct.Struct(">q")


def _batch_time_ms(batch: memoryview) -> int:
    """When the coordinator wrote the batch (its max timestamp: every record of a batch
    the runner writes has the same)."""
    return int(_TIMESTAMP.unpack_from(batch, MAX_TIMESTAMP_AT)[0])


def _record_offset(batch: memoryview, index: int) -> int:
    """The offset of the index-th record of a batch (for log messages)."""
    return int(next(islice(DefaultRecordBatch(batch), index, None)).offset)


__all__ = [
    "RELOAD_RETRY_S",
    "NotActive",
    "ShardRunner",
    "ShardState",
    "StorageFailure",
    "UuidIds",
]

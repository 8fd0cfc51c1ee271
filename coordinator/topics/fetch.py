"""Fetch v4-v17 (consumer fetches; no fetch sessions: session id 0 means full fetches).

Emits: for each requested partition the stored batches from the one holding `fetch_offset`,
up to the high watermark (everything durable), within partition_max_bytes and the request's
max_bytes (the first batch found is always returned whole, KIP-74), and the partition's
last stable offset. isolation_level 1 (read_committed) reads stop at the last stable offset
(producers.py: the first offset of an undecided transaction) and the answer lists the
aborted transactions (producer id, first offset) overlapping the records returned
(aborted_txns.py), whose batches the client drops; read_uncommitted answers null there.
When less than min_bytes is available the request parks until a produce or a transaction
marker becomes durable on one of its partitions (data arrives, or the last stable offset
moves) or max_wait passes (long poll); a fetch with a partition in error is answered at
once, as Kafka does (a consumer must see OFFSET_OUT_OF_RANGE to reset, not wait for it).
Errors (answered as Kafka does: high watermark, last stable and log start offsets -1, no
records): UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID (v13+), OFFSET_OUT_OF_RANGE (below the
log start offset or past the log end), CORRUPT_MESSAGE (the batch at the fetch offset is
damaged on disk: never served; the batches before it are, and the error is logged and
counted once, observability/storage_damage.py), FETCH_SESSION_ID_NOT_FOUND (a session id we
never issued), NOT_LEADER_OR_FOLLOWER (an internal topic's shard log is not open yet,
internal_topics.py: the client retries).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.batches import HEADER_SIZE, LOG_OVERHEAD, batch_size_at, header_struct
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import CorruptBatch, OffsetOutOfRange
from groupcoord.storage.errors import NotInMemory

from ..observability.storage_damage import report_corrupt_read
from .access import READ, TOPIC, allowed
from .context import TopicsContext
from .registry import Partition

_BASE_OFFSET_SIZE = 8
_OFFSETS = header_struct("base_offset", "last_offset_delta")
READ_COMMITTED = 1


def handle_fetch(ctx: TopicsContext, request: Request) -> Any:
    body = request.body
    version = request.api_version
    if version >= 7 and body.session_id != 0:
        m = response_types(ApiKey.FETCH, version)
        return build(
            m.FetchResponse,
            error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
            session_id=0,
            responses=(),
        )
    try:
        return _answer(ctx, request, _read(ctx, request))
    except _ReadStored as e:
        return _fetch_stored(ctx, request, e.missing)


def _answer(
    ctx: TopicsContext, request: Request, read: tuple[Any, int, list[Partition], bool]
) -> Any:
    """The response now, or a long poll (a coroutine) when too little was read."""
    response, total_bytes, partitions, errors = read
    body = request.body
    max_wait_ms = min(int(body.max_wait.total_seconds() * 1000), ctx.settings.fetch_wait_max_ms)
    if total_bytes >= body.min_bytes or max_wait_ms <= 0 or not partitions or errors:
        return response
    return _long_poll(ctx, request, partitions, max_wait_ms)


class _ReadStored(Exception):
    """serve --cluster: reads whose batches are in PostgreSQL only (NotInMemory), as
    (partition, offset, max bytes): awaited, then the response is built again."""

    def __init__(self, missing: list[tuple[Partition, int, int]]) -> None:
        self.missing = missing


async def _read_stored(
    ctx: TopicsContext,
    request: Request,
    missing: list[tuple[Partition, int, int]] | None = None,
) -> tuple[Any, int, list[Partition], bool]:
    """`_read`, first awaiting the database reads it needs (`missing`, when known), the
    event loop serving others meanwhile."""
    stored: dict[tuple[Partition, int], bytes] = {}
    while True:
        for partition, offset, limit in missing or ():
            try:
                data = await partition.log.read_stored(offset, limit)  # type: ignore[attr-defined]
            except OffsetOutOfRange:
                data = b""  # moved meanwhile (retention): the next pass answers it
            stored[(partition, offset)] = data
        try:
            return _read(ctx, request, stored)
        except _ReadStored as e:
            missing = e.missing


async def _fetch_stored(
    ctx: TopicsContext, request: Request, missing: list[tuple[Partition, int, int]]
) -> Any:
    """handle_fetch when some batches are in the database only."""
    answer = _answer(ctx, request, await _read_stored(ctx, request, missing))
    return await answer if inspect.iscoroutine(answer) else answer


async def _long_poll(
    ctx: TopicsContext, request: Request, partitions: list[Partition], max_wait_ms: int
) -> Any:
    deadline = time.monotonic() + max_wait_ms / 1000
    loop = asyncio.get_running_loop()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or ctx.closed or ctx.node.stopping:
            break
        waiter: asyncio.Future[None] = loop.create_future()
        for partition in partitions:
            partition.waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter, remaining)
        except TimeoutError:
            pass
        finally:
            for partition in partitions:
                partition.waiters.discard(waiter)
        response, total_bytes, partitions, errors = await _read_stored(ctx, request)
        if total_bytes >= request.body.min_bytes or not partitions or errors:
            return response
    return (await _read_stored(ctx, request))[0]


def _read(
    ctx: TopicsContext,
    request: Request,
    stored: dict[tuple[Partition, int], bytes] | None = None,
) -> tuple[Any, int, list[Partition], bool]:
    """Build the response from what is durable now; also returns bytes read, the
    partitions read (all valid ones), which a long poll waits on, and whether any partition
    answers an error (the client must act on it, so nobody waits). serve --cluster: raises
    _ReadStored naming the reads whose batches are in the database only, unless `stored`
    holds them (read by `_read_stored`)."""
    missing: list[tuple[Partition, int, int]] | None = None
    registry = ctx.topics
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.FETCH, version)
    by_id = version >= 13
    budget = body.max_bytes if version >= 3 else 2**31 - 1
    total = 0
    seen: list[Partition] = []
    errors = False
    read_committed = body.isolation_level == READ_COMMITTED
    aborted_type = m.AbortedTransaction if read_committed else None
    topics = []
    enabled = ctx.authorizer.enabled
    for fetch_topic in body.topics:
        if by_id:
            topic = registry.get_by_id(fetch_topic.topic_id)
            unknown = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            topic = registry.get(fetch_topic.topic)
            unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # Kafka's: READ on the topic, checked on every fetch, by name before existence
        # (an unknown topic id is UNKNOWN_TOPIC_ID first: ids are not secret).
        denied = (
            enabled
            and (not by_id or topic is not None)
            and not allowed(
                ctx,
                ApiKey.FETCH,
                READ,
                TOPIC,
                topic.name if topic is not None else fetch_topic.topic,
            )
        )
        partitions = []
        for fp in fetch_topic.partitions:
            index = fp.partition
            if denied:
                errors = True
                partitions.append(_error(m, index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if topic is None or not 0 <= index < len(topic.partitions):
                error = unknown if topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                errors = True
                partitions.append(_error(m, index, error))
                continue
            partition = topic.partitions[index]
            log = partition.log
            if log is None or not partition.led:  # a shard log not open, or led elsewhere
                errors = True
                partitions.append(_error(m, index, ErrorCode.NOT_LEADER_OR_FOLLOWER))
                continue
            seen.append(partition)
            high_watermark = partition.high_watermark
            producers = partition.producers
            # Without transactions (the common case) the LSO is the high watermark: not
            # computed, so read_uncommitted fetches cost what they did before transactions.
            if producers.open_txns or producers.unstable:
                stable = partition.last_stable_offset
            else:
                stable = high_watermark
            # read_committed readers see offsets below the last stable offset only.
            visible_end = stable if read_committed else high_watermark
            error = ErrorCode.NONE
            records = b""
            offset = fp.fetch_offset
            if offset < log.log_start_offset or offset > log.next_offset:
                error = ErrorCode.OFFSET_OUT_OF_RANGE
            elif offset < visible_end and budget > 0:
                limit = min(fp.partition_max_bytes, budget)
                try:
                    try:
                        records = log.read(offset, limit)
                    except NotInMemory:
                        found = None if stored is None else stored.get((partition, offset))
                        if found is None:
                            if missing is None:
                                missing = []
                            missing.append((partition, offset, limit))
                        records = found or b""
                    if log.next_offset > visible_end:
                        records = _visible(records, visible_end)
                except OffsetOutOfRange:
                    error = ErrorCode.OFFSET_OUT_OF_RANGE
                except CorruptBatch as exc:
                    # Kafka answers a CorruptRecordException so: clients surface it
                    # (KAFKA_STORAGE_ERROR would have them retry forever in silence).
                    error = ErrorCode.CORRUPT_MESSAGE
                    report_corrupt_read(ctx.metrics, f"{topic.name}-{index}", offset, exc)
                if total and len(records) > budget:
                    # Only the first batch of the response may exceed the limits (KIP-74).
                    records = b""
                total += len(records)
                budget -= len(records)
            if error == ErrorCode.NONE:
                aborted: tuple[Any, ...] | None = None
                if read_committed:
                    aborted = _aborted(partition, aborted_type, offset, records)
                partitions.append(
                    build(
                        m.PartitionData,
                        partition_index=index,
                        error_code=error,
                        high_watermark=high_watermark,
                        last_stable_offset=stable,
                        log_start_offset=log.log_start_offset,
                        aborted_transactions=aborted,
                        records=records,
                    )
                )
                continue
            errors = True
            # Kafka answers a read that failed with none of the log's offsets (its
            # LogReadResult for an error: -1s, no records, no aborted transactions).
            partitions.append(
                build(
                    m.PartitionData,
                    partition_index=index,
                    error_code=error,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    records=b"",
                )
            )
        if by_id:
            topics.append(
                build(
                    m.FetchableTopicResponse,
                    topic_id=fetch_topic.topic_id,
                    partitions=tuple(partitions),
                )
            )
        else:
            topics.append(
                build(
                    m.FetchableTopicResponse, topic=fetch_topic.topic, partitions=tuple(partitions)
                )
            )
    if missing is not None:
        raise _ReadStored(missing)
    response = build(
        m.FetchResponse, error_code=ErrorCode.NONE, session_id=0, responses=tuple(topics)
    )
    return response, total, seen, errors


def _error(m: Any, index: int, error: ErrorCode) -> Any:
    """Kafka's FetchResponse.partitionResponse(error): the schema's defaults, so an empty
    record set and no aborted transactions ([], not null)."""
    return build(
        m.PartitionData,
        partition_index=index,
        error_code=error,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=(),
        records=b"",
    )


def _aborted(
    partition: Partition, entry: Any, fetch_offset: int, records: bytes
) -> tuple[Any, ...]:
    """The aborted transactions overlapping the records returned (Kafka's
    collectAbortedTxns up to the offset past them): the client drops their batches."""
    if not records or not partition.producers.aborted:
        return ()
    found = partition.producers.aborted_between(fetch_offset, _end_offset(records))
    return tuple(build(entry, producer_id=pid, first_offset=first) for pid, first in found)


def _end_offset(data: bytes) -> int:
    """The offset after the last whole batch of `data`."""
    pos = 0
    end = len(data)
    last = -1
    while pos < end:
        size = batch_size_at(data, pos)
        if size < HEADER_SIZE or pos + size > end:
            break
        base_offset, last_delta = _OFFSETS.unpack_from(data, pos)
        last = base_offset + last_delta
        pos += size
    return last + 1


def _visible(data: bytes, high_watermark: int) -> bytes:
    """Cut off batches at or past the high watermark (appended but not yet durable)."""
    pos = 0
    end = len(data)
    while pos < end:
        size = batch_size_at(data, pos)
        if size < LOG_OVERHEAD or pos + size > end:
            break
        base_offset = int.from_bytes(data[pos : pos + _BASE_OFFSET_SIZE], "big", signed=True)
        if base_offset >= high_watermark:
            break
        pos += size
    return data if pos == end else data[:pos]

"""Produce v3-v12.

Emits: appends each partition's batches to its log (as sent, only the base offset stamped,
the timestamp type and max timestamp as message.timestamp.type asks: timestamps.py, and
recompressed when compression.type names another codec than the producer's: compression.py),
then answers once the appended data is durable (one group-commit fsync covers every append
made meanwhile), with log_append_time for LogAppendTime topics (and, as Kafka, for a
duplicate of an idempotent producer's batch: its original's max timestamp). acks=0 gets no response;
its data is flushed all the same.
Errors per partition: UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION (an internal
topic: __consumer_offsets, __transaction_state), CORRUPT_MESSAGE (bad CRC, length or
magic), MESSAGE_TOO_LARGE (also once recompressed), INVALID_RECORD (empty, records that
cannot be decoded or decompressed, or, with
record_errors, records without a key on a compacted topic; a control batch; a
transactional batch without producer id or sequence), INVALID_TIMESTAMP (with
record_errors: message.timestamp.before/after.max.ms, or a batch already marked
LogAppendTime by its producer), OUT_OF_ORDER_SEQUENCE_NUMBER and
INVALID_PRODUCER_EPOCH (idempotence; with the log start offset and no message, as Kafka),
INVALID_TXN_STATE (a non-transactional batch while the producer's transaction is open),
INVALID_REQUIRED_ACKS, KAFKA_STORAGE_ERROR (the write or fsync failed, now or earlier, or
the log is closed); for every partition of the request,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (a transactional batch without a transactional id)
and INVALID_PRODUCER_ID_MAPPING (transactional batches of several producer ids).
Transactional batches (attribute bit 0x10) are checked as idempotent ones, and the first
opens the producer's transaction on the partition (producers.py) until a marker ends it
(txn_markers.py). A transactional batch that would open its producer's transaction on a
partition is first checked with the transaction coordinator (KIP-890, txn_verification.py):
Produce v12+ (transactions V2) adds the partition to the transaction; older versions, with
transaction_partition_verification_enable, verify that it is in it (INVALID_TXN_STATE, or
TRANSACTION_ABORTABLE from v11, when it is not; INVALID_PRODUCER_EPOCH when fenced;
NOT_ENOUGH_REPLICAS while the coordinator is unavailable; CONCURRENT_TRANSACTIONS for v12
while the previous transaction completes).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.batches import (
    ATTRIBUTES_AT,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
    InvalidBatch,
    header_struct,
    parse_header,
    split_batches,
)
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import StorageError
from groupcoord.storage.errors import PartitionFenced

from ..observability.logging import get_logger
from .access import TOPIC, TRANSACTIONAL_ID, WRITE, allowed
from .cleanup_policy import refuse_keyless
from .compression import CompressionPolicy
from .context import NO_RESPONSE, TopicsContext
from .producers import SequenceError
from .registry import Partition, wake_waiters
from .timestamps import InvalidTimestamps, RecordsUnreadable, TimestampPolicy
from .txn_verification import ask_coordinator, producer_error

log = get_logger("groupcoord.produce")

# log_append_time is a datetime in kio's schema; built from whole milliseconds so that it
# encodes back to exactly the append time.
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_PRODUCER_ID = header_struct("producer_id")
# Produce v12+ is transactions V2 (KIP-890 part 2): the leader adds partitions itself.
_TV2_PRODUCE = 12


class _PartitionResult:
    __slots__ = (
        "index",
        "error",
        "base_offset",
        "message",
        "partition",
        "last_offset",
        "log_append_time",
        "log_start_offset",
        "record_errors",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.error = ErrorCode.NONE
        self.base_offset = -1
        self.message: str | None = None
        self.partition: Partition | None = None
        self.last_offset = -1
        self.log_append_time = -1  # ms; -1 unless LogAppendTime or a duplicate
        self.log_start_offset = -1  # answered when refused by the producer's state
        self.record_errors: list[tuple[int, str]] = []


def handle_produce(ctx: TopicsContext, request: Request) -> Any:
    """A connection's Produce requests append in the order they came, as Kafka's (which
    reads a connection's next request only once the previous one is answered): while an
    earlier one waits for the transaction coordinator (`ctx.produce_tail`, the future of
    its append), a later one waits for that append before its own. A producer pipelines
    its batches (max.in.flight.requests.per.connection), so the batch after one that
    opens a transaction on a partition would otherwise be appended first and refused
    OUT_OF_ORDER_SEQUENCE_NUMBER."""
    tail = ctx.produce_tail
    if tail is not None:
        if not tail.done():
            appended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ctx.produce_tail = appended
            answer = _produce_after(ctx, request, tail, appended)
            if request.body.acks == 0:
                ctx.spawn(answer)
                return NO_RESPONSE
            return answer
        ctx.produce_tail = None
    return _handle_produce(ctx, request, None)


async def _produce_after(
    ctx: TopicsContext,
    request: Request,
    tail: asyncio.Future[None],
    appended: asyncio.Future[None],
) -> Any:
    """`request` once the connection's previous Produce has appended (`tail`); `appended`
    is set once this one has (or failed)."""
    try:
        await tail
        answer = _handle_produce(ctx, request, appended)
    finally:
        _set_appended(appended)
    if hasattr(answer, "__await__"):
        return await answer
    return answer


def _set_appended(appended: asyncio.Future[None] | None) -> None:
    if appended is not None and not appended.done():
        appended.set_result(None)


def _handle_produce(
    ctx: TopicsContext, request: Request, appended: asyncio.Future[None] | None
) -> Any:
    """The request, appended now or, when the transaction coordinator is asked first,
    once it answers; `appended` (made here in that case if None, and left as the
    connection's `produce_tail`) is set once the append is done."""
    body = request.body
    refused = _refuse_transactional(body)
    if ctx.authorizer.enabled:
        return _authorized_produce(ctx, request, refused, appended)
    if refused is None and body.transactional_id is not None and ctx.txns is not None:
        asking = _to_verify(ctx, request)
        if asking is not None:
            if appended is None:
                appended = ctx.produce_tail = asyncio.get_running_loop().create_future()
            verified = _produce_verified(ctx, request, *asking, None, appended)
            if body.acks == 0:
                ctx.spawn(verified)  # no response: appended once the coordinator answers
                return NO_RESPONSE
            return verified
    return _produce(ctx, request, refused, None)


def _authorized_produce(
    ctx: TopicsContext,
    request: Request,
    refused: tuple[ErrorCode, str] | None,
    appended: asyncio.Future[None] | None,
) -> Any:
    """Produce with Kafka's checks: a transactional producer needs WRITE on its
    transactional id (else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), each
    topic WRITE (else its partitions TOPIC_AUTHORIZATION_FAILED); then as without."""
    body = request.body
    txn_id = body.transactional_id
    if (
        refused is None
        and txn_id is not None
        and not allowed(ctx, ApiKey.PRODUCE, WRITE, TRANSACTIONAL_ID, txn_id)
    ):
        refused = (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)  # type: ignore[assignment]
    denied = {
        t.name for t in body.topic_data if not allowed(ctx, ApiKey.PRODUCE, WRITE, TOPIC, t.name)
    }
    if refused is None and txn_id is not None and ctx.txns is not None:
        asking = _to_verify(ctx, request, denied)
        if asking is not None:
            if appended is None:
                appended = ctx.produce_tail = asyncio.get_running_loop().create_future()
            verified = _produce_verified(ctx, request, *asking, denied, appended)
            if body.acks == 0:
                ctx.spawn(verified)
                return NO_RESPONSE
            return verified
    return _produce(ctx, request, refused, None, denied)


def _produce(
    ctx: TopicsContext,
    request: Request,
    refused: tuple[ErrorCode, str] | None,
    verified: dict[tuple[str, int], tuple[ErrorCode, object]] | None,
    denied: set[str] | None = None,
) -> Any:
    """Appends and answers (`verified`: the KIP-890 answer and guard of the partitions the
    transaction coordinator was asked about; `denied`: topics the principal may not
    WRITE)."""
    body = request.body
    acks = body.acks
    tv2 = request.api_version >= _TV2_PRODUCE
    results: list[tuple[str, list[_PartitionResult]]] = []
    for topic_data in body.topic_data:
        name = topic_data.name
        topic = ctx.topics.get(name)
        partition_results = []
        for data in topic_data.partition_data:
            result = _PartitionResult(data.index)
            partition_results.append(result)
            check = verified.get((name, data.index)) if verified is not None else None
            if refused is not None:
                result.error, result.message = refused
            elif acks not in (0, 1, -1):
                result.error = ErrorCode.INVALID_REQUIRED_ACKS
            elif denied and name in denied:
                result.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= data.index < len(topic.partitions):
                result.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif topic.internal:  # Kafka's ReplicaManager: clients never append to these
                result.error = ErrorCode.INVALID_TOPIC_EXCEPTION
                result.message = f"Cannot append to internal topic {name}"
            elif check is not None and check[0] is not ErrorCode.NONE:
                result.error = check[0]
            elif not topic.partitions[data.index].led:  # another worker leads it
                result.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                guard = check[1] if check is not None else None
                _append(ctx, topic.partitions[data.index], data.records, result, guard, tv2)
        results.append((name, partition_results))

    appended = [r for _, rs in results for r in rs if r.partition is not None]
    if acks == 0:
        if appended:
            ctx.spawn(_await_durable(ctx, appended))
        return NO_RESPONSE
    if not appended:
        return _response(request, results)
    return _respond_when_durable(ctx, request, results, appended)


def _to_verify(
    ctx: TopicsContext, request: Request, denied: set[str] | None = None
) -> tuple[int, int, list[tuple[str, int]]] | None:
    """(producer id, epoch, partitions) of a transactional Produce whose batches would open
    the producer's transaction on some partitions, when the transaction coordinator must be
    asked about them (txn_verification.py): Produce v12+ always (transactions V2 add them),
    older versions when transaction_partition_verification_enable is on; else None."""
    tv2 = request.api_version >= _TV2_PRODUCE
    if not tv2 and not ctx.settings.transaction_partition_verification_enable:
        return None
    producer: tuple[int, int] | None = None
    partitions: list[tuple[str, int]] = []
    for topic_data in request.body.topic_data:
        if denied and topic_data.name in denied:  # refused: nothing to ask about
            continue
        topic = ctx.topics.get(topic_data.name)
        if topic is None:
            continue
        for data in topic_data.partition_data:
            records = data.records
            if not 0 <= data.index < len(topic.partitions) or not records:
                continue
            try:
                header = parse_header(records)
            except InvalidBatch:
                continue  # refused at the append
            if not header.is_transactional or header.is_control:
                continue
            if topic.partitions[data.index].producers.opens_transaction(header):
                producer = (header.producer_id, header.producer_epoch)
                partitions.append((topic_data.name, data.index))
    if producer is None:
        return None
    return producer[0], producer[1], partitions


async def _produce_verified(
    ctx: TopicsContext,
    request: Request,
    producer_id: int,
    producer_epoch: int,
    partitions: list[tuple[str, int]],
    denied: set[str] | None = None,
    appended: asyncio.Future[None] | None = None,
) -> Any:
    """Ask the transaction coordinator (guards taken first), then append and answer
    (`denied`: topics refused by the authorizer; `appended`: set once appended)."""
    try:
        tv2 = request.api_version >= _TV2_PRODUCE
        guards = {}
        for name, index in partitions:
            producers = ctx.topics.partition(name, index).producers  # type: ignore[union-attr]
            guards[(name, index)] = producers.start_verification(producer_id, producer_epoch)
        answers = await ask_coordinator(
            ctx.txns,
            request.body.transactional_id,
            producer_id,
            producer_epoch,
            partitions,
            tv2,
            ctx.read_at,
        )
        verified = {}
        for (name, index), guard in guards.items():
            error = producer_error(answers[(name, index)], tv2, request.api_version >= 11)
            if error is not ErrorCode.NONE:
                partition = ctx.topics.partition(name, index)
                if partition is not None:
                    partition.producers.end_verification(producer_id, guard)
            verified[(name, index)] = (error, guard)
        answer = _produce(ctx, request, None, verified, denied)
    finally:
        _set_appended(appended)
    if hasattr(answer, "__await__"):
        return await answer
    return answer


def _refuse_transactional(body: Any) -> tuple[ErrorCode, str] | None:
    """Kafka's request-wide checks of transactional batches (each partition's first batch,
    as ProduceRequest.hasTransactionalRecords reads them): they need a transactional id,
    else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; and one producer id, else
    INVALID_PRODUCER_ID_MAPPING. None when the request passes."""
    producer_ids: set[int] | None = None
    for topic_data in body.topic_data:
        for data in topic_data.partition_data:
            records = data.records
            if not records or len(records) < HEADER_SIZE:
                continue
            if not records[ATTRIBUTES_AT + 1] & TRANSACTIONAL_MASK:
                continue
            if body.transactional_id is None:
                return (
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "transactional batches need a transactional id",
                )
            if producer_ids is None:
                producer_ids = set()
            producer_ids.add(_PRODUCER_ID.unpack_from(records)[0])
    if producer_ids is not None and len(producer_ids) > 1:
        return (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            "transactional batches of more than one producer id in one request",
        )
    return None


def _append(
    ctx: TopicsContext,
    partition: Partition,
    records: bytes | None,
    result: _PartitionResult,
    guard: object | None = None,
    tv2: bool = False,
) -> None:
    """Check and append one partition's records into `result`; `guard`: the partition's
    KIP-890 verification, `tv2`: by a transactions V2 Produce (v12+)."""
    if not records:
        result.error = ErrorCode.INVALID_RECORD
        result.message = "empty record set"
        return
    try:
        headers = split_batches(records)
    except InvalidBatch as e:
        result.error = ErrorCode.CORRUPT_MESSAGE
        result.message = str(e)
        return
    limit = int(partition.topic.config_value("max.message.bytes", ctx.settings))
    for header in headers:
        if header.is_control or (
            header.is_transactional
            and (header.producer_id == NO_PRODUCER_ID or header.base_sequence == NO_SEQUENCE)
        ):
            # Kafka's LogValidator: markers come from coordinators only, and a
            # transactional batch must carry its producer id and sequence.
            result.error = ErrorCode.INVALID_RECORD
            result.message = (
                "control batches are written by the transaction coordinator only"
                if header.is_control
                else "a transactional batch needs a producer id and a base sequence"
            )
            return
        if header.size_bytes > limit:
            result.error = ErrorCode.MESSAGE_TOO_LARGE
            result.message = f"batch of {header.size_bytes} bytes exceeds max.message.bytes {limit}"
            return
    # Kafka's LogValidator checks a record's key (compacted topics) before its timestamp.
    refused = refuse_keyless(partition, records, headers, ctx.settings)
    if refused is not None:
        result.error, result.message, result.record_errors = refused
        return
    # Kafka's LogValidator: timestamps are checked before the producer sequence, and the
    # append time is the broker's clock once per partition payload.
    policy = TimestampPolicy.of(partition.topic, ctx.settings)
    now_ms = time.time_ns() // 1_000_000
    try:
        max_timestamps = policy.check(records, headers, now_ms)
    except InvalidTimestamps as e:
        result.error = ErrorCode.INVALID_TIMESTAMP
        result.message = str(e)
        result.record_errors = e.record_errors
        return
    except RecordsUnreadable as e:
        result.error = ErrorCode.INVALID_RECORD
        result.message = str(e)
        return
    if len(headers) == 1:
        groups = [(records, headers)]
    else:
        # Several batches in one partition's payload (rare): each is checked for its
        # producer sequence and appended on its own.
        groups = []
        pos = 0
        for header in headers:
            groups.append((records[pos : pos + header.size_bytes], [header]))
            pos += header.size_bytes
    compression = CompressionPolicy.of(partition.topic, ctx.settings)
    producers = partition.producers
    log_ = partition.log
    first_base = -1
    for (payload, group_headers), max_timestamp in zip(groups, max_timestamps, strict=True):
        header = group_headers[0]
        if (
            guard is not None
            and header.is_transactional
            and producers.opens_transaction(header)
            and not producers.verified(header.producer_id, guard)
        ):
            # Kafka's verification guard: a marker (or another append) of the producer
            # came between the coordinator's answer and this append.
            result.error = ErrorCode.INVALID_TXN_STATE
            result.message = "Record was not part of an ongoing transaction"
            result.log_start_offset = log_.log_start_offset
            return
        try:
            # Kafka's verificationStateEntry.supportsEpochBump: a V2 batch verified now.
            duplicate = producers.check(header, tv2 and guard is not None)
        except SequenceError as e:
            # As Kafka (ReplicaManager: an error other than a record's): the log start
            # offset, and no message.
            result.error = e.code
            result.log_start_offset = log_.log_start_offset
            return
        if duplicate is not None:
            base, last = duplicate.base_offset, duplicate.last_offset
            # As Kafka (UnifiedLog.append of a duplicate): a retried batch answers its
            # original's max timestamp as stored as its log_append_time, whatever the
            # topic's timestamp type (on a LogAppendTime topic: its append time).
            result.log_append_time = duplicate.max_timestamp
        else:
            buffer = bytearray(payload)
            if compression is not None:
                try:
                    buffer, header = compression.apply(buffer, header)
                except InvalidBatch as e:
                    result.error = ErrorCode.INVALID_RECORD
                    result.message = str(e)
                    return
                if header.size_bytes > limit:
                    result.error = ErrorCode.MESSAGE_TOO_LARGE
                    result.message = (
                        f"batch of {header.size_bytes} bytes once recompressed exceeds "
                        f"max.message.bytes {limit}"
                    )
                    return
            header = policy.stamp(buffer, 0, header, max_timestamp, now_ms)
            if policy.log_append_time:
                result.log_append_time = now_ms
            try:
                base = log_.append(buffer, [header])
            except PartitionFenced:
                # Cluster mode: this node's lease on the partition moved (Kafka: a replica
                # that is no longer the leader); the client goes to the new leader.
                result.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                return
            except (OSError, StorageError) as e:
                # StorageError: a log failed by an earlier write or fsync (LogFailed) or
                # closed refuses appends. Answered per partition: raised, it would cost the
                # request's other partitions their answers (no top-level error code).
                log.error(
                    "append failed",
                    topic=partition.topic.name,
                    partition=partition.index,
                    error=str(e),
                )
                ctx.committer.health.write_failed("append", log_.directory, e)
                result.error = ErrorCode.KAFKA_STORAGE_ERROR
                result.message = "append failed"
                return
            producers.record(header, base)
            last = base + header.last_offset_delta
            ctx.metrics.produced_records.labels(partition.topic.name).inc(header.records_count)
        if first_base < 0:
            first_base = base
        result.last_offset = max(result.last_offset, last)
    result.base_offset = first_base
    result.partition = partition


async def _await_durable(ctx: TopicsContext, appended: list[_PartitionResult]) -> None:
    """Wait for each partition's appends to be fsynced, then wake its long-poll fetchers."""
    committer = ctx.committer
    outcomes: list[BaseException | None] = []
    # Awaited one after the other: one fsync round covers them all, and a gather would cost
    # a task per partition on the hot path.
    for r in appended:
        try:
            await committer.wait_durable(r.partition.log, r.last_offset)  # type: ignore[union-attr]
            outcomes.append(None)
        except Exception as e:
            outcomes.append(e)
    for result, outcome in zip(appended, outcomes, strict=True):
        if isinstance(outcome, PartitionFenced):
            # Cluster mode: the lease moved before the round committed; nothing was stored.
            result.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif isinstance(outcome, BaseException):
            log.error(
                "flush failed",
                topic=result.partition.topic.name,  # type: ignore[union-attr]
                partition=result.index,
                error=str(outcome),
            )
            result.error = ErrorCode.KAFKA_STORAGE_ERROR
            result.message = "fsync failed"
        else:
            wake_waiters(result.partition)  # type: ignore[arg-type]


async def _respond_when_durable(
    ctx: TopicsContext,
    request: Request,
    results: list[tuple[str, list[_PartitionResult]]],
    appended: list[_PartitionResult],
) -> Any:
    started = time.perf_counter()
    await _await_durable(ctx, appended)
    ctx.metrics.flush_latency.observe(time.perf_counter() - started)
    return _response(request, results)


def _response(request: Request, results: list[tuple[str, list[_PartitionResult]]]) -> Any:
    m = response_types(ApiKey.PRODUCE, request.api_version)
    record_error = getattr(m, "BatchIndexAndErrorMessage", None)  # v8+
    topics = []
    for name, partition_results in results:
        partitions = []
        for r in partition_results:
            partition = r.partition
            ok = r.error == ErrorCode.NONE
            record_errors = ()
            if r.record_errors and record_error is not None:
                record_errors = tuple(
                    build(record_error, batch_index=i, batch_index_error_message=text)
                    for i, text in r.record_errors
                )
            partitions.append(
                build(
                    m.PartitionProduceResponse,
                    index=r.index,
                    error_code=r.error,
                    base_offset=r.base_offset if ok else -1,
                    log_append_time=_EPOCH + datetime.timedelta(milliseconds=r.log_append_time)
                    if ok and r.log_append_time >= 0
                    else None,
                    log_start_offset=partition.log.log_start_offset
                    if partition
                    else r.log_start_offset,
                    record_errors=record_errors,
                    error_message=r.message,
                )
            )
        topics.append(
            build(m.TopicProduceResponse, name=name, partition_responses=tuple(partitions))
        )
    return build(m.ProduceResponse, responses=tuple(topics))

"""Transaction markers on data partitions (Kafka's WriteTxnMarkers, partition side).

The transaction coordinator's marker router (coordinator/server/txn_markers.py) calls
`write_txn_marker` for every data partition of a transaction it completes; the
WriteTxnMarkers API (coordinator/server/write_txn_markers_api.py) appends through
`append_txn_marker` too, then waits for all its markers at once.

A marker is a control batch (protocol/control_batches.py) appended to the partition's log
like a produced batch: checked against the producer's state first (producers.py:
INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED), then appended, then recorded (the
producer's transaction ends; an ABORT adds an aborted-index entry). It is answered once
durable (the group-commit fsync round, as Produce), and then the partition's long-poll
fetchers are woken: the last stable offset moved, which read_committed readers wait for.
"""

from __future__ import annotations

import time

from groupcoord.protocol.control_batches import marker_batch
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import StorageError
from groupcoord.storage.errors import PartitionFenced

from ..observability.logging import get_logger
from .context import TopicsContext
from .producers import SequenceError
from .registry import Partition, wake_waiters

log = get_logger("groupcoord.txn_markers")


class MarkerAppended:
    """A marker in the page cache: `offset` to wait for on `partition`'s log."""

    __slots__ = ("partition", "offset")

    def __init__(self, partition: Partition, offset: int) -> None:
        self.partition = partition
        self.offset = offset


def append_txn_marker(
    ctx: TopicsContext,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    transaction_version: int = 0,
) -> MarkerAppended | ErrorCode:
    """Check and append one marker (not yet durable: see `await_marker`). Errors:
    UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (led by another worker),
    INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, KAFKA_STORAGE_ERROR."""
    target = ctx.topics.partition(topic, partition)
    if target is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not target.led:  # serve --workers: another worker leads it
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    producers = target.producers
    try:
        producers.check_marker(
            producer_id, producer_epoch, coordinator_epoch, tv2=transaction_version >= 2
        )
    except SequenceError as e:
        log.info(
            "transaction marker refused",
            topic=topic,
            partition=partition,
            producer_id=producer_id,
            error=e.code.name,
            reason=str(e),
        )
        return e.code
    buffer, header = marker_batch(
        producer_id, producer_epoch, coordinator_epoch, commit, time.time_ns() // 1_000_000
    )
    log_ = target.log
    try:
        offset = log_.append(buffer, [header])
    except PartitionFenced:  # cluster mode: the partition's lease moved
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    except (OSError, StorageError) as e:
        log.error("marker append failed", topic=topic, partition=partition, error=str(e))
        ctx.committer.health.write_failed("append", log_.directory, e)
        return ErrorCode.KAFKA_STORAGE_ERROR
    producers.record_marker(header, offset, coordinator_epoch, commit, transaction_version)
    return MarkerAppended(target, offset)


async def await_marker(ctx: TopicsContext, appended: MarkerAppended) -> ErrorCode:
    """Wait until the marker is durable, then wake the partition's long-poll fetchers.
    Errors: KAFKA_STORAGE_ERROR (the fsync failed), NOT_LEADER_OR_FOLLOWER (cluster mode:
    the partition's lease moved before the marker was committed)."""
    partition = appended.partition
    try:
        await ctx.committer.wait_durable(partition.log, appended.offset)
    except PartitionFenced:  # cluster mode: the lease moved before the marker committed
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    except Exception as e:
        log.error(
            "marker flush failed",
            topic=partition.topic.name,
            partition=partition.index,
            error=str(e),
        )
        return ErrorCode.KAFKA_STORAGE_ERROR
    wake_waiters(partition)
    return ErrorCode.NONE


def marker_written(
    ctx: TopicsContext, topic: str, partition: int, producer_id: int, epoch: int, commit: bool
) -> bool:
    """Whether `topic`-`partition`'s last marker of `producer_id` is this one, with no
    transaction of it opened since (ProducerStates.marker_written); False for a partition
    that does not exist."""
    target = ctx.topics.partition(topic, partition)
    return target is not None and target.producers.marker_written(producer_id, epoch, commit)


async def write_txn_marker(
    ctx: TopicsContext,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    transaction_version: int = 0,
) -> ErrorCode:
    """Write one COMMIT (`commit`) or ABORT marker for `producer_id` at `producer_epoch` to
    `topic`-`partition`; returns once it is durable. Errors: UNKNOWN_TOPIC_OR_PARTITION,
    INVALID_PRODUCER_EPOCH (an epoch below the partition's; with transaction version 2
    also an equal one while a transaction is open), TRANSACTION_COORDINATOR_FENCED (a
    coordinator epoch below one of an earlier marker), KAFKA_STORAGE_ERROR."""
    appended = append_txn_marker(
        ctx,
        topic,
        partition,
        producer_id,
        producer_epoch,
        coordinator_epoch,
        commit,
        transaction_version,
    )
    if isinstance(appended, ErrorCode):
        return appended
    return await await_marker(ctx, appended)

"""Transaction markers on data partitions (Kafka's WriteTxnMarkers, partition side).

INTERFACE SKELETON (session 13): the transaction coordinator's marker router
(coordinator/server/txn_markers.py) calls `write_txn_marker` for every data partition of a
transaction it completes. The data-plane branch replaces the body: append a control batch
(COMMIT or ABORT, Kafka's EndTxnMarker), durable before returning, and advance the
partition's last stable offset and aborted-transaction index.
"""

from __future__ import annotations

from groupcoord.protocol.errors import ErrorCode

from .context import TopicsContext


async def write_txn_marker(
    ctx: TopicsContext,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
) -> ErrorCode:
    """Write one COMMIT (`commit`) or ABORT marker for `producer_id` at `producer_epoch` to
    `topic`-`partition`; returns once it is durable. Errors: UNKNOWN_TOPIC_OR_PARTITION,
    INVALID_PRODUCER_EPOCH (an epoch below the partition's), KAFKA_STORAGE_ERROR."""
    raise NotImplementedError("write_txn_marker: the data-plane branch implements it")

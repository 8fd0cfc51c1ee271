"""KIP-890 on the partition side: before a transactional batch opens its producer's
transaction on a partition, the partition leader asks the transaction coordinator about the
partition (Kafka's ReplicaManager.maybeSendPartitionsToTransactionCoordinator and
AddPartitionsToTxnManager, one node here: the transaction gateway is called directly).

Theory of operation. Transactions V1 clients (Produce v11 and older, TxnOffsetCommit v4 and
older) add partitions themselves with AddPartitionsToTxn; the leader only verifies (Kafka's
AddPartitionsToTxn v4 VerifyOnly), when transaction.partition.verification.enable is on, so
a batch for a partition the transaction does not hold (a hanging transaction in the
making) is refused. Transactions V2 clients (Produce v12+, TxnOffsetCommit v5+) never send
AddPartitionsToTxn: the leader adds the partition (AddPartitionsToTxn v5, not verify-only),
always. A partition whose producer already has a transaction open at the batch's epoch is
not asked about (Kafka's sentinel guard).

A guard (producers.py's `start_verification`) is taken before asking and checked at the
append (`verified`): a marker or another transactional append of the producer in between
voids it, and the batch is refused with INVALID_TXN_STATE as Kafka refuses it.

Answers are mapped as Kafka's AddPartitionsToTxnManager maps them for the producer:
PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH; TRANSACTION_ABORTABLE -> INVALID_TXN_STATE for
Produce v10 and older (TxnOffsetCommit v3 and older); COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR -> NOT_ENOUGH_REPLICAS (retriable for every
client); CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being
written) -> retried every ADD_RETRY_BACKOFF_MS for up to ADD_RETRY_MAX_MS for transactions
V2 (add.partitions.to.txn.retry.backoff.ms / .max.ms), then answered as is; before V2
NOT_ENOUGH_REPLICAS.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from groupcoord.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]

ADD_RETRY_BACKOFF_MS = 20
ADD_RETRY_MAX_MS = 100

_RETRIABLE = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NETWORK_EXCEPTION,
    }
)


async def ask_coordinator(
    txns: Any,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    add: bool,
    read_at: float,
) -> dict[TopicPartition, ErrorCode]:
    """The coordinator's answer per partition, unmapped: `add` (transactions V2) adds the
    partitions to the transaction, retrying CONCURRENT_TRANSACTIONS for a little while;
    otherwise they are verified (NONE or TRANSACTION_ABORTABLE each, or one error)."""
    wanted = tuple(partitions)
    if not add:
        verified = await txns.verify_partitions(
            transactional_id, producer_id, producer_epoch, wanted, read_at
        )
        if isinstance(verified, ErrorCode):
            return dict.fromkeys(wanted, verified)
        return dict(verified)
    deadline = time.monotonic() + ADD_RETRY_MAX_MS / 1000
    while True:
        # Transaction version 2, as Kafka's AddPartitionsToTxn v4+ add path records it.
        error = await txns.add_partitions(
            transactional_id, producer_id, producer_epoch, wanted, read_at, 2
        )
        if error is not ErrorCode.CONCURRENT_TRANSACTIONS or time.monotonic() >= deadline:
            return dict.fromkeys(wanted, error)
        await asyncio.sleep(ADD_RETRY_BACKOFF_MS / 1000)


def producer_error(error: ErrorCode, tv2: bool, abortable_known: bool) -> ErrorCode:
    """A coordinator's answer as the producer gets it (see the module docstring);
    `abortable_known`: the request's version knows TRANSACTION_ABORTABLE."""
    if error is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error is ErrorCode.TRANSACTION_ABORTABLE and not abortable_known:
        return ErrorCode.INVALID_TXN_STATE
    if error in _RETRIABLE or (error is ErrorCode.CONCURRENT_TRANSACTIONS and not tv2):
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return error

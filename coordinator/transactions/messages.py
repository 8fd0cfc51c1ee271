"""What the transaction shard answers, and the marker jobs it hands the marker router."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from groupcoord.protocol.errors import ErrorCode

from .metadata import TopicPartition


@dataclass(frozen=True, slots=True)
class InitProducerIdAnswer:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EndTxnAnswer:
    """EndTxn v5 (transaction version 2): the error and, on success, the producer id and
    epoch the client continues with (the bumped epoch, or a new id at epoch 0); -1, -1 with
    an error, as Kafka answers."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """A transaction in PrepareCommit (`commit`) or PrepareAbort whose markers must be
    written: every partition with (producer id, epoch) as of the Prepare record, then the
    Complete record (TxnShard.complete_transaction). `transaction_version`: the
    transaction's client version (2: the markers carry a bumped epoch, which the
    partitions check strictly, as Kafka's WriteTxnMarkers v2 TransactionVersion)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    coordinator_epoch: int
    # Handed over by a load (recovery): some markers may be written already.
    recovered: bool = field(default=False, kw_only=True)
    transaction_version: int = field(default=0, kw_only=True)


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    """An error's fields are the schema's defaults (0, ""), as Kafka leaves them."""

    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    timeout_ms: int = 0
    start_ms: int = 0
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListFilters:
    """ListTransactions' filters, ANDed: state names (empty: all; unknown names match
    nothing), producer ids (empty: all), duration (-1: none; else running longer than it),
    and a transactional id predicate (None: all)."""

    states: frozenset[str] = frozenset()
    producer_ids: frozenset[int] = frozenset()
    duration_ms: int = -1
    id_matches: Callable[[str], bool] | None = None

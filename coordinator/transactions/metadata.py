"""TransactionMetadata: one transactional id's state, and its log value.

Every field but `last_producer_epoch` is durable: it is what the TransactionLogValue holds,
and only TxnShard.replay sets it. `last_producer_epoch` (the epoch before the last bump,
for KIP-360 retries) is memory only, as in Kafka: a load sets it to -1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from groupcoord.protocol.txn_records import TransactionLogValue, TxnTopicPartitions

from .state import EMPTY, TxnState

# Short.MAX_VALUE: the epoch kept for fencing, never handed to a client.
EPOCH_MAX = 32767
NO_PRODUCER_ID = -1
NO_EPOCH = -1

TopicPartition = tuple[str, int]


def epoch_exhausted(epoch: int) -> bool:
    """TransactionMetadata.isEpochExhausted: a bump would reach MAX (kept for fencing)."""
    return epoch >= EPOCH_MAX - 1


@dataclass(slots=True, eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    last_producer_epoch: int = NO_EPOCH

    def to_value(self) -> TransactionLogValue:
        """The log value (TransactionLog.valueToBytes: partitions null in Empty, grouped by
        topic otherwise; sorted here, where Kafka's order is a hash map's)."""
        partitions: tuple[TxnTopicPartitions, ...] | None = None
        if self.state is not EMPTY:
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(self.partitions):
                by_topic.setdefault(topic, []).append(index)
            partitions = tuple(TxnTopicPartitions(t, tuple(p)) for t, p in by_topic.items())
        return TransactionLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.timeout_ms,
            transaction_status=self.state.id,
            transaction_partitions=partitions,
            transaction_last_update_timestamp_ms=self.last_update_ms,
            transaction_start_timestamp_ms=self.start_ms,
            previous_producer_id=self.prev_producer_id,
            next_producer_id=self.next_producer_id,
            client_transaction_version=self.client_transaction_version,
        )

    def durable(self) -> TransactionLogValue:
        """What replaying the log rebuilds (the tests compare it with the live state)."""
        return self.to_value()

    @classmethod
    def from_value(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        meta = cls(transactional_id, value.producer_id, value.producer_epoch, 0)
        meta.apply(value)
        return meta

    def apply(self, value: TransactionLogValue) -> None:
        """Take every durable field from `value` (the reader ignores partitions in Empty)."""
        self.producer_id = value.producer_id
        self.producer_epoch = value.producer_epoch
        self.timeout_ms = value.transaction_timeout_ms
        self.state = TxnState.from_id(value.transaction_status)
        self.partitions = (
            set()
            if self.state is EMPTY or value.transaction_partitions is None
            else {(p.topic, i) for p in value.transaction_partitions for i in p.partition_ids}
        )
        self.start_ms = value.transaction_start_timestamp_ms
        self.last_update_ms = value.transaction_last_update_timestamp_ms
        self.prev_producer_id = value.previous_producer_id
        self.next_producer_id = value.next_producer_id
        self.client_transaction_version = value.client_transaction_version

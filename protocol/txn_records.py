"""Transaction state log records: byte for byte what Kafka's TransactionLog.java writes to
``__transaction_state``.

A key is an int16 key version (0; Kafka's reader returns UnknownKeyVersion for any other,
and the loader skips the record) followed by TransactionLogKey v0 (the transactional id).
A value is an int16 value version followed by TransactionLogValue at that version: v0
(classic) on a cluster whose ``transaction.version`` is 0, v1 (flexible: compact arrays,
tagged fields PreviousProducerId 0, NextProducerId 1, ClientTransactionVersion 2, written
only when they differ from their defaults) from TV1. A null value is a tombstone. The
partitions are null in Empty and grouped by topic otherwise.

These key versions are their own namespace: the records live on another topic than the
group coordinator's, whose int16 prefix is a record type. The codec is the generic one of
record_schema.py, compiled from the schemas copied into ``schemas/``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from .record_schema import SchemaCompiler, decode_prefixed, encode_prefixed, load_schema
from .record_types import UnknownRecordType, UnsupportedRecordVersion

KEY_VERSION: Final = 0
# TransactionVersion.transactionLogValueVersion(): 0 for TV0, 1 from TV1.
VALUE_VERSION_TV0: Final = 0
VALUE_VERSION_TV1: Final = 1


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class TxnTopicPartitions:
    """TransactionLogValue.PartitionsSchema: one topic's partitions in the transaction."""

    topic: str
    partition_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: tuple[TxnTopicPartitions, ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


TXN_SCHEMAS: Final[dict[str, dict[str, type]]] = {
    "TransactionLogKey": {"TransactionLogKey": TransactionLogKey},
    "TransactionLogValue": {
        "TransactionLogValue": TransactionLogValue,
        "PartitionsSchema": TxnTopicPartitions,
    },
}

_KEY_CODECS = {
    KEY_VERSION: SchemaCompiler(
        load_schema("TransactionLogKey"), TXN_SCHEMAS["TransactionLogKey"], 0
    ).message()
}
_KEY_WRITE = _KEY_CODECS[KEY_VERSION][1]
_VALUE_SCHEMA = load_schema("TransactionLogValue")
_VALUE_CODECS = {
    v: SchemaCompiler(_VALUE_SCHEMA, TXN_SCHEMAS["TransactionLogValue"], v).message()
    for v in (VALUE_VERSION_TV0, VALUE_VERSION_TV1)
}


def encode_txn_key(key: TransactionLogKey) -> bytes:
    return encode_prefixed(KEY_VERSION, _KEY_WRITE, key)


def decode_txn_key(data: bytes) -> TransactionLogKey:
    """Raises UnknownRecordType (an unknown key version: skip the record, as Kafka's
    loader does) or MalformedRecord."""
    key = decode_prefixed(_KEY_CODECS, data, "transaction log key", UnknownRecordType)
    assert isinstance(key, TransactionLogKey)
    return key


def encode_txn_value(value: TransactionLogValue, version: int = VALUE_VERSION_TV1) -> bytes:
    """Version prefix + TransactionLogValue at `version` (v0 drops the tagged fields, as a
    TV0 cluster does)."""
    codec = _VALUE_CODECS.get(version)
    if codec is None:
        raise UnsupportedRecordVersion(f"TransactionLogValue has no version {version}")
    if version == VALUE_VERSION_TV0:
        # The v0 schema lacks the tagged fields; Kafka's writer simply does not write them.
        value = _without_tagged(value)
    try:
        return encode_prefixed(version, codec[1], value)
    except struct.error as e:
        raise ValueError(f"TransactionLogValue: {e}") from e


def decode_txn_value(data: bytes) -> TransactionLogValue:
    """Raises UnsupportedRecordVersion or MalformedRecord."""
    value = decode_prefixed(_VALUE_CODECS, data, "transaction log value", _unsupported)
    assert isinstance(value, TransactionLogValue)
    return value


def _unsupported(version: int) -> UnsupportedRecordVersion:
    return UnsupportedRecordVersion(f"TransactionLogValue version {version}")


def _without_tagged(value: TransactionLogValue) -> Any:
    return TransactionLogValue(
        value.producer_id,
        value.producer_epoch,
        value.transaction_timeout_ms,
        value.transaction_status,
        value.transaction_partitions,
        value.transaction_last_update_timestamp_ms,
        value.transaction_start_timestamp_ms,
    )


__all__ = [
    "TXN_SCHEMAS",
    "TransactionLogKey",
    "TransactionLogValue",
    "TxnTopicPartitions",
    "UnsupportedRecordVersion",
    "decode_txn_key",
    "decode_txn_value",
    "encode_txn_key",
    "encode_txn_value",
]

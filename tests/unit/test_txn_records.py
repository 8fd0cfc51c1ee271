"""The `__transaction_state` record codec (protocol/txn_records.py) against bytes written by
hand from Kafka's TransactionLogKey/TransactionLogValue schemas, as TransactionLog.java
writes them: key version 0 + the id; value v0 (classic) and v1 (flexible, tagged fields
only when not default)."""

from __future__ import annotations

import pytest

from groupcoord.protocol.records import MalformedRecord, UnknownRecordType
from groupcoord.protocol.txn_records import (
    TransactionLogKey,
    TransactionLogValue,
    TxnTopicPartitions,
    UnsupportedRecordVersion,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


ONGOING = TransactionLogValue(
    producer_id=1000,
    producer_epoch=2,
    transaction_timeout_ms=60_000,
    transaction_status=1,
    transaction_partitions=(TxnTopicPartitions("t", (0, 1)),),
    transaction_last_update_timestamp_ms=10,
    transaction_start_timestamp_ms=5,
)

# int16 version | int64 pid | int16 epoch | int32 timeout | int8 status | partitions |
# int64 last update | int64 start | (v1) tagged fields
ONGOING_V0 = h(
    "0000 00000000000003e8 0002 0000ea60 01"
    " 00000001 0001 74 00000002 00000000 00000001"  # int32 count; string; int32 array
    " 000000000000000a 0000000000000005"
)
ONGOING_V1 = h(
    "0001 00000000000003e8 0002 0000ea60 01"
    " 02 02 74 03 00000000 00000001 00"  # compact array, compact string, element tags
    " 000000000000000a 0000000000000005"
    " 00"  # no tagged field differs from its default
)
# Empty after InitProducerId: partitions null, start -1, PreviousProducerId (tag 0) and
# ClientTransactionVersion (tag 2) set.
EMPTY = TransactionLogValue(
    producer_id=1000,
    producer_epoch=0,
    transaction_timeout_ms=60_000,
    transaction_status=0,
    transaction_partitions=None,
    transaction_last_update_timestamp_ms=10,
    transaction_start_timestamp_ms=-1,
    previous_producer_id=1000,
    client_transaction_version=2,
)
EMPTY_V1 = h(
    "0001 00000000000003e8 0000 0000ea60 00 00"
    " 000000000000000a ffffffffffffffff"
    " 02 00 08 00000000000003e8 02 02 0002"  # 2 tagged fields: tag 0 (8 bytes), tag 2 (2)
)


def test_key() -> None:
    assert encode_txn_key(TransactionLogKey("tx")) == h("0000 0002 7478")
    assert decode_txn_key(h("0000 0002 7478")) == TransactionLogKey("tx")
    with pytest.raises(UnknownRecordType):
        decode_txn_key(h("0001 0002 7478"))  # Kafka's reader: UnknownKeyVersion, skipped
    with pytest.raises(MalformedRecord):
        decode_txn_key(h("0000 0002 74"))


def test_values_byte_for_byte() -> None:
    assert encode_txn_value(ONGOING, 0) == ONGOING_V0
    assert encode_txn_value(ONGOING) == ONGOING_V1
    assert decode_txn_value(ONGOING_V0) == ONGOING
    assert decode_txn_value(ONGOING_V1) == ONGOING
    assert encode_txn_value(EMPTY) == EMPTY_V1
    assert decode_txn_value(EMPTY_V1) == EMPTY


def test_v0_drops_the_tagged_fields() -> None:
    """A TV0 cluster writes v0, which lacks them: they read back as their defaults."""
    decoded = decode_txn_value(encode_txn_value(EMPTY, 0))
    assert (decoded.previous_producer_id, decoded.client_transaction_version) == (-1, 0)


def test_bad_values() -> None:
    with pytest.raises(UnsupportedRecordVersion):
        decode_txn_value(h("0002") + ONGOING_V1[2:])
    with pytest.raises(MalformedRecord):
        decode_txn_value(ONGOING_V1[:-3])
    with pytest.raises(MalformedRecord):
        decode_txn_value(ONGOING_V1 + b"\x00")

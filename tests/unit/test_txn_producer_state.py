"""Producer state with transactions (coordinator/topics/producers.py), the aborted index
(aborted_txns.py) and the marker codec (protocol/control_batches.py): Kafka's
ProducerStateManagerTest / UnifiedLogTest scenarios (reference §8 rows 54-64), and live
state equal to the state rebuilt from the log."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from groupcoord.coordinator.topics.aborted_txns import AbortedTxns
from groupcoord.coordinator.topics.producers import NO_TXN, ProducerStates, SequenceError
from groupcoord.protocol.batches import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
    split_batches,
)
from groupcoord.protocol.control_batches import marker_batch, marker_of
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import LogConfig, PartitionLog
from tests.support import client_batch


def _data(
    pid: int, epoch: int, seq: int, records: int = 1, txn: bool = True, offset: int = 0
) -> BatchHeader:
    return BatchHeader(
        base_offset=offset,
        batch_length=0,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=TRANSACTIONAL_MASK if txn else 0,
        last_offset_delta=records - 1,
        base_timestamp=0,
        max_timestamp=5,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=records,
    )


def _marker(pid: int, epoch: int) -> BatchHeader:
    return dataclasses.replace(_data(pid, epoch, -1), attributes=TRANSACTIONAL_MASK | CONTROL_MASK)


def _code(fn: object, *args: object, **kw: object) -> ErrorCode:
    with pytest.raises(SequenceError) as e:
        fn(*args, **kw)  # type: ignore[operator]
    return e.value.code


def test_marker_codec_is_kafkas_end_transaction_marker() -> None:
    buf, header = marker_batch(42, 3, 9, commit=False, timestamp_ms=1234)
    assert split_batches(buf) == [header]  # length, CRC, record count all valid
    assert header.attributes == 0x30 and header.base_sequence == -1
    assert (header.producer_id, header.producer_epoch, header.records_count) == (42, 3, 1)
    (record,) = list(DefaultRecordBatch(bytes(buf)))
    assert record.key == b"\x00\x00\x00\x00"  # version 0, type ABORT
    assert record.value == b"\x00\x00\x00\x00\x00\x09"  # version 0, coordinator epoch 9
    assert marker_of(buf) == (False, 9)
    assert marker_of(marker_batch(42, 3, 1, True, 0)[0]) == (True, 1)
    # A data batch is no marker.
    assert marker_of(client_batch([(b"k", b"v", 1)])) is None


def test_marker_without_producer_state_then_data() -> None:
    """Row 54: only a COMMIT marker (epoch 2) is known: data at epoch 0 is fenced, epoch 2
    must start at sequence 0."""
    s = ProducerStates()
    s.record_marker(_marker(1, 2), 0, 0, commit=True)
    assert _code(s.check, _data(1, 0, 0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _code(s.check, _data(1, 2, 17)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert s.check(_data(1, 2, 0)) is None


def test_sequences_restart_after_a_marker_bumps_the_epoch() -> None:
    """Row 55: data at epoch 0 seq 0, 1; ABORT marker at epoch 1."""
    s = ProducerStates()
    s.record(_data(1, 0, 0), 0)
    s.record(_data(1, 0, 1), 1)
    s.record_marker(_marker(1, 1), 2, 0, commit=False)
    assert _code(s.check, _data(1, 1, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _code(s.check, _data(1, 2, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert s.check(_data(1, 1, 0)) is None


def test_non_transactional_batch_inside_an_open_transaction() -> None:
    """Row 56, and the transaction's first offset is the first transactional batch's."""
    s = ProducerStates()
    s.record(_data(1, 0, 0, records=3), 10)
    assert s.producers[1].txn_first_offset == 10 and s.open_txns == {1: 10}
    s.record(_data(1, 0, 3), 13)
    assert s.producers[1].txn_first_offset == 10
    assert _code(s.check, _data(1, 0, 4, txn=False)) == ErrorCode.INVALID_TXN_STATE
    # A duplicate of a transactional batch is still answered as one.
    duplicate = s.check(_data(1, 0, 0, records=3))
    assert duplicate is not None and duplicate.base_offset == 10
    s.record_marker(_marker(1, 0), 14, 0, commit=True)
    assert s.check(_data(1, 0, 4, txn=False)) is None


def test_marker_epoch_and_coordinator_epoch_fencing() -> None:
    """Rows 62-63: an older marker epoch is INVALID_PRODUCER_EPOCH (TV2: also an equal one
    while a transaction is open); an older coordinator epoch is fenced."""
    s = ProducerStates()
    s.record(_data(1, 5, 0), 0)
    assert _code(s.check_marker, 1, 4, 0) == ErrorCode.INVALID_PRODUCER_EPOCH
    s.check_marker(1, 5, 0)
    assert _code(s.check_marker, 1, 5, 0, tv2=True) == ErrorCode.INVALID_PRODUCER_EPOCH
    s.check_marker(1, 6, 0, tv2=True)
    s.record_marker(_marker(1, 5), 1, 2, commit=False)
    assert _code(s.check_marker, 1, 5, 1) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    # A retry of the marker (nothing open): accepted under TV2 too (KAFKA-19999).
    s.check_marker(1, 5, 2, tv2=True)
    s.check_marker(99, 0, 0)  # an unknown producer: anything goes


def test_last_stable_offset_follows_the_earliest_undecided_transaction() -> None:
    """Row 60: open transactions of P1@s, P2@s+25, P3@s+57 complete as P1, P3, P2."""
    s = ProducerStates()
    start = 100
    s.record(_data(1, 0, 0), start)
    s.record(_data(2, 0, 0), start + 25)
    s.record(_data(3, 0, 0), start + 57)
    hw = start + 60
    assert s.last_stable_offset(hw, 0) == start
    s.record_marker(_marker(1, 0), hw, 0, commit=True)
    # The marker is not durable yet (it is at the high watermark): P1 still holds it.
    assert s.last_stable_offset(hw, 0) == start
    hw += 1
    assert s.last_stable_offset(hw, 0) == start + 25
    s.record_marker(_marker(3, 0), hw, 0, commit=True)
    hw += 1
    assert s.last_stable_offset(hw, 0) == start + 25
    s.record_marker(_marker(2, 0), hw, 0, commit=True)
    hw += 1
    assert s.last_stable_offset(hw, 0) == hw
    # Never below the log start.
    s.record(_data(4, 0, 0), hw)
    assert s.last_stable_offset(hw + 1, hw + 1) == hw + 1


def test_aborted_index_of_interleaved_transactions() -> None:
    """Row 64: pid1 from 0, pid2 from 8, pid3 from 14, pid4 from 36; ABORT pid1 @29,
    COMMIT pid3 @58, ABORT pid2 @74, COMMIT pid4 @89."""
    s = ProducerStates()
    s.record(_data(1, 0, 0), 0)
    s.record(_data(2, 0, 0), 8)
    s.record(_data(3, 0, 0), 14)
    s.record_marker(_marker(1, 0), 29, 0, commit=False)
    assert s.last_stable_offset(30, 0) == 8
    s.record(_data(4, 0, 0), 36)
    s.record_marker(_marker(3, 0), 58, 0, commit=True)
    s.record_marker(_marker(2, 0), 74, 0, commit=False)
    assert s.last_stable_offset(75, 0) == 36
    s.record_marker(_marker(4, 0), 89, 0, commit=True)
    assert [tuple(e) for e in s.aborted.entries] == [(1, 0, 29, 8), (2, 8, 74, 36)]
    assert s.aborted_between(0, 30) == [(1, 0), (2, 8)]
    assert s.aborted_between(30, 40) == [(2, 8)]
    assert s.aborted_between(75, 90) == []
    # pid1's entry's LSO (8) is at the bound: the walk stops there.
    assert s.aborted_between(0, 8) == [(1, 0)]


def test_aborted_index_lookup_and_retention() -> None:
    index = AbortedTxns()
    index.append(1, 0, 10, 11)
    index.append(2, 12, 20, 21)
    index.append(3, 15, 30, 31)
    assert index.between(11, 16) == [(2, 12)]  # stops at entry 2: its LSO 21 >= 16
    assert index.between(11, 40) == [(2, 12), (3, 15)]
    index.drop_below(12)
    assert [e.producer_id for e in index.entries] == [2, 3]
    assert index.between(0, 40) == [(2, 12), (3, 15)]


def test_state_rebuilt_from_the_log_equals_the_live_state(tmp_path: Path) -> None:
    """Random transactional, idempotent and plain batches and markers of a few producers,
    appended to a real log as the server does (check, append, record): the state rebuilt
    from the log (the checks skipped) is the live state, field by field."""
    rng = random.Random(18)
    log = PartitionLog.open(tmp_path / "p", LogConfig(segment_bytes_max=2_000))
    live = ProducerStates()
    epochs = {pid: 0 for pid in (1, 2, 3)}
    seqs = {pid: 0 for pid in (1, 2, 3)}
    coordinator_epoch = 0
    for _ in range(400):
        pid = rng.choice((1, 2, 3))
        roll = rng.random()
        if roll < 0.25:
            commit = rng.random() < 0.5
            if rng.random() < 0.2:
                epochs[pid] += 1  # a fencing marker, as the coordinator writes it
                seqs[pid] = 0
            coordinator_epoch += rng.random() < 0.1
            try:
                live.check_marker(pid, epochs[pid], coordinator_epoch)
            except SequenceError:
                continue
            buf, header = marker_batch(pid, epochs[pid], coordinator_epoch, commit, 7)
            offset = log.append(buf, [header])
            live.record_marker(header, offset, coordinator_epoch, commit)
        else:
            txn = roll < 0.8
            count = rng.randint(1, 3)
            raw = bytearray(
                _batch(pid, epochs[pid], seqs[pid], count, txn)
                if rng.random() < 0.9
                else client_batch([(b"k", b"v", 1)])  # a plain batch
            )
            (header,) = split_batches(raw)
            try:
                assert live.check(header) is None
            except SequenceError as e:
                assert e.code == ErrorCode.INVALID_TXN_STATE
                continue
            offset = log.append(raw, [header])
            live.record(header, offset)
            if header.producer_id != -1:
                seqs[pid] += count
    log.flush()
    hw = log.durable_offset
    rebuilt = ProducerStates.rebuild(log)
    assert live.last_stable_offset(hw, 0) == rebuilt.last_stable_offset(hw, 0)
    assert live.open_txns == rebuilt.open_txns
    assert live.aborted.entries == rebuilt.aborted.entries and live.aborted.entries
    assert set(live.producers) == set(rebuilt.producers)
    for pid, state in live.producers.items():
        other = rebuilt.producers[pid]
        assert (state.epoch, state.coordinator_epoch, state.txn_first_offset) == (
            other.epoch,
            other.coordinator_epoch,
            other.txn_first_offset,
        )
        assert list(state.batches) == list(other.batches)
        assert state.last_timestamp == other.last_timestamp
    assert {pid for pid, s in live.producers.items() if s.txn_first_offset != NO_TXN} == set(
        live.open_txns
    )
    log.close()


def _batch(pid: int, epoch: int, seq: int, count: int, txn: bool) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1 if txn else 0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=10**6,
    )
    for i in range(count):
        builder.append(i, timestamp=100 + i, key=b"k", value=b"v%d" % i, headers=[])
    return bytes(builder.build())

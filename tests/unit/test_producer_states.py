"""Idempotent-producer sequence checks (coordinator/topics/producers.py), Kafka's rules."""

from __future__ import annotations

import pytest

from groupcoord.coordinator.topics.producers import ProducerStates, SequenceError
from groupcoord.protocol.batches import BatchHeader
from groupcoord.protocol.errors import ErrorCode


def _header(producer_id: int, epoch: int, first: int, records: int = 1) -> BatchHeader:
    return BatchHeader(
        base_offset=0,
        batch_length=0,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=records - 1,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=first,
        records_count=records,
    )


def test_a_producer_unknown_to_the_partition_may_start_at_any_sequence() -> None:
    """Retention can delete every batch a long-lived producer wrote to a partition; after a
    restart the partition knows nothing of it and its next batch continues at, say, 999.
    Kafka accepts that (checkSequence: no current producer epoch, any sequence); from then
    on the sequence is checked."""
    states = ProducerStates()
    assert states.check(_header(7, 0, 999, records=2)) is None
    states.record(_header(7, 0, 999, records=2), 40)
    assert states.check(_header(7, 0, 1001)) is None
    with pytest.raises(SequenceError) as gap:
        states.check(_header(7, 0, 1005))
    assert gap.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    duplicate = states.check(_header(7, 0, 999, records=2))
    assert duplicate is not None and duplicate.base_offset == 40
    # A known producer's new epoch still starts at 0.
    with pytest.raises(SequenceError):
        states.check(_header(7, 1, 3))

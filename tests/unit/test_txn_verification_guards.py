"""KIP-890 verification guards in a partition's producer state (producers.py): which batches
make the leader ask the transaction coordinator, and a guard voided by a marker or another
transactional append of the producer between the question and the append (Kafka's
VerificationStateEntry), except a transactions V2 marker at the verified epoch."""

from __future__ import annotations

from groupcoord.coordinator.topics.producers import ProducerStates
from tests.unit.test_txn_producer_state import _data, _marker


def test_only_a_batch_that_would_open_the_transaction_asks() -> None:
    states = ProducerStates()
    assert states.opens_transaction(_data(7, 0, 0))  # an unknown producer
    states.record(_data(7, 0, 0), 0)
    assert not states.opens_transaction(_data(7, 0, 1))  # its transaction is open
    assert states.opens_transaction(_data(7, 1, 0))  # a new epoch: a new transaction
    states.record_marker(_marker(7, 1), 1, 0, True, 2)
    assert states.opens_transaction(_data(7, 1, 0))  # the marker ended it
    assert not states.opens_transaction(_data(7, 0, 5))  # fenced: refused without asking


def test_a_marker_between_the_question_and_the_append_voids_the_guard() -> None:
    states = ProducerStates()
    guard = states.start_verification(7, 0)
    assert states.start_verification(7, 0) is guard  # reused while it stands
    assert states.verified(7, guard)
    states.record_marker(_marker(7, 0), 0, 0, False)
    assert not states.verified(7, guard)
    fresh = states.start_verification(7, 0)
    assert fresh is not guard and states.verified(7, fresh)
    states.record(_data(7, 0, 0), 1)  # the verified append itself ends it
    assert not states.verified(7, fresh)
    failed = states.start_verification(8, 0)
    states.end_verification(8, failed)
    assert not states.verified(8, failed) and states.verifying == {}


def test_a_v2_marker_at_the_verified_epoch_keeps_the_next_transactions_guard() -> None:
    states = ProducerStates()
    states.record(_data(7, 0, 0), 0)
    # The next transaction (epoch 1, after EndTxn v5's bump) is verified before the marker
    # of the previous one (written at epoch 1) lands: that marker does not void it.
    guard = states.start_verification(7, 1)
    states.record_marker(_marker(7, 1), 1, 0, True, 2)
    assert states.verified(7, guard)
    # A transactions V1 marker at that epoch does.
    states.record_marker(_marker(7, 1), 2, 0, True, 0)
    assert not states.verified(7, guard)

"""Transaction version 2 (KIP-890 part 2) in the transaction shard, pure: EndTxn v5 bumps
the epoch at the end of every transaction and answers the id and epoch to continue with,
the producer id rotates when the epoch is exhausted, a retry of an end after the bump is
answered as Kafka's endTransaction answers it, the old epoch is fenced, and the log replayed
(and compacted) gives the live state."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from groupcoord.coordinator.transactions.messages import EndTxnAnswer, MarkerJob
from groupcoord.coordinator.transactions.metadata import EPOCH_MAX
from groupcoord.coordinator.transactions.state import TxnState
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.txn_records import TransactionLogKey, encode_txn_key, encode_txn_value
from tests.unit.test_txn_shard import Harness

E = ErrorCode
S = TxnState
TV2 = 2


class V2(Harness):
    def add2(self, pid: int, epoch: int, *partitions: tuple[str, int], txn: str = "tx") -> Any:
        """AddPartitionsToTxn v5 from a partition leader (Produce v12): transaction version 2."""
        added = self.shard.add_partitions(
            txn, pid, epoch, list(partitions), [].append, self.now_ms, TV2
        )
        return self._one(added)

    def end2(self, pid: int, epoch: int, commit: bool, txn: str = "tx") -> EndTxnAnswer:
        answer: EndTxnAnswer = self.call("end_transaction_v2", txn, pid, epoch, commit)
        return answer

    def epoch(self, txn: str = "tx") -> int:
        return self.shard.txns[txn].producer_epoch

    def force_epoch(self, epoch: int, txn: str = "tx") -> None:
        """The id's log value rewritten at `epoch` (as if that many transactions ran)."""
        value = replace(self.shard.txns[txn].to_value(), producer_epoch=epoch)
        key = TransactionLogKey(txn)
        self.shard.replay(key, value, self.now_ms)
        self.log.append((encode_txn_key(key), encode_txn_value(value)))


@pytest.fixture
def h() -> V2:
    return V2()


def test_every_end_bumps_the_epoch_and_a_retry_is_answered_with_it(h: V2) -> None:
    assert h.init().producer_epoch == 0
    assert h.add2(1000, 0, ("t", 0), ("t", 1)) is E.NONE
    assert h.shard.txns["tx"].client_transaction_version == TV2
    assert h.end2(1000, 0, True) == EndTxnAnswer(E.NONE, 1000, 1)
    assert h.state() is S.PREPARE_COMMIT and h.epoch() == 1
    # The markers carry the bumped epoch and say they are of transaction version 2.
    assert h.jobs == [
        MarkerJob("tx", 1000, 1, True, (("t", 0), ("t", 1)), 0, transaction_version=TV2)
    ]
    # A retry with the epoch before the bump while the markers are written; the other end.
    assert h.end2(1000, 0, True) == EndTxnAnswer(E.CONCURRENT_TRANSACTIONS)
    assert h.end2(1000, 0, False) == EndTxnAnswer(E.INVALID_TXN_STATE)
    # The bumped epoch while Prepare*: the next transaction cannot start yet.
    assert h.end2(1000, 1, True) == EndTxnAnswer(E.PRODUCER_FENCED)
    assert h.add2(1000, 1, ("t", 0)) is E.CONCURRENT_TRANSACTIONS
    assert h.complete(h.jobs[0]) is E.NONE
    assert h.state() is S.COMPLETE_COMMIT and h.epoch() == 1
    # The retry of the completed commit: NONE, no write, the current id and epoch.
    records = len(h.log)
    assert h.end2(1000, 0, True) == EndTxnAnswer(E.NONE, 1000, 1)
    assert len(h.log) == records
    assert h.end2(1000, 0, False) == EndTxnAnswer(E.INVALID_TXN_STATE)
    # The same epoch again is the next transaction's end, not a retry.
    assert h.end2(1000, 1, True) == EndTxnAnswer(E.INVALID_TXN_STATE)
    # The next transaction runs at the bumped epoch and ends at the next one.
    assert h.add2(1000, 1, ("u", 0)) is E.NONE
    assert h.end2(1000, 1, False) == EndTxnAnswer(E.NONE, 1000, 2)
    assert h.jobs[1] == MarkerJob("tx", 1000, 2, False, (("u", 0),), 0, transaction_version=TV2)
    assert h.complete(h.jobs[1]) is E.NONE
    assert h.state() is S.COMPLETE_ABORT and h.epoch() == 2
    h.assert_replay_equals_live()


def test_the_epoch_before_a_bump_is_fenced(h: V2) -> None:
    h.init()
    h.add2(1000, 0, ("t", 0))
    h.end2(1000, 0, True)
    h.complete(h.jobs[0])
    assert h.add2(1000, 0, ("t", 0)) is E.PRODUCER_FENCED
    assert h.add(1000, 0, ("t", 0)) is E.PRODUCER_FENCED
    verified = h.read("verify_partitions", "tx", 1000, 0, [("t", 0)])
    assert verified is E.PRODUCER_FENCED
    assert h.end(1000, 0, True) is E.PRODUCER_FENCED  # EndTxn v4 with the old epoch
    assert h.end2(1000, 2, True) == EndTxnAnswer(E.PRODUCER_FENCED)  # above the current
    assert h.end2(999, 1, True) == EndTxnAnswer(E.INVALID_PRODUCER_ID_MAPPING)
    assert h.end2(1000, 1, True, txn="unknown") == EndTxnAnswer(E.INVALID_PRODUCER_ID_MAPPING)
    assert h.end2(1000, 1, True, txn="") == EndTxnAnswer(E.INVALID_REQUEST)
    # A producer that lost the answer re-initialises with the epoch before the bump: the
    # bump is its own (last epoch), so it keeps the epoch it missed (Kafka's retry rule).
    assert h.init(pid=1000, epoch=0).producer_epoch == 1


def test_empty_aborts_bump_the_epoch_and_commits_without_a_transaction_are_refused(
    h: V2,
) -> None:
    h.init()
    assert h.end2(1000, 0, True) == EndTxnAnswer(E.INVALID_TXN_STATE)  # Empty: commit
    assert h.end(1000, 0, False) is E.INVALID_TXN_STATE  # EndTxn v4: Empty refuses both
    h.now_ms += 7
    assert h.end2(1000, 0, False) == EndTxnAnswer(E.NONE, 1000, 1)  # Empty: empty abort
    assert h.state() is S.PREPARE_ABORT
    assert h.shard.txns["tx"].start_ms == h.now_ms
    assert h.jobs == [MarkerJob("tx", 1000, 1, False, (), 0, transaction_version=TV2)]
    h.complete(h.jobs[0])
    assert h.end2(1000, 0, False) == EndTxnAnswer(E.NONE, 1000, 1)  # its retry
    assert h.end2(1000, 1, False) == EndTxnAnswer(E.NONE, 1000, 2)  # CompleteAbort: again
    h.complete(h.jobs[1])
    h.add2(1000, 2, ("t", 0))
    h.end2(1000, 2, True)
    h.complete(h.jobs[2])
    assert h.state() is S.COMPLETE_COMMIT
    assert h.end2(1000, 2, False) == EndTxnAnswer(E.INVALID_TXN_STATE)  # retry, other end
    assert h.end2(1000, 3, False) == EndTxnAnswer(E.NONE, 1000, 4)  # CompleteCommit: abort
    assert h.jobs[3].partitions == ()
    h.assert_replay_equals_live()


def test_an_exhausted_epoch_rotates_the_producer_id(h: V2) -> None:
    h.init()
    h.force_epoch(EPOCH_MAX - 1)
    assert h.add2(1000, EPOCH_MAX - 1, ("t", 0)) is E.NONE
    # Answered with the next id at epoch 0; the markers carry the old id at MAX.
    assert h.end2(1000, EPOCH_MAX - 1, True) == EndTxnAnswer(E.NONE, 1001, 0)
    assert h.jobs == [
        MarkerJob("tx", 1000, EPOCH_MAX, True, (("t", 0),), 0, transaction_version=TV2)
    ]
    assert h.shard.txns["tx"].next_producer_id == 1001
    # The retry while the markers are written; the new id cannot be used yet.
    assert h.end2(1000, EPOCH_MAX - 1, True) == EndTxnAnswer(E.CONCURRENT_TRANSACTIONS)
    assert h.add2(1001, 0, ("t", 0)) is E.INVALID_PRODUCER_ID_MAPPING
    assert h.complete(h.jobs[0]) is E.NONE
    meta = h.shard.txns["tx"]
    assert (meta.producer_id, meta.producer_epoch, meta.prev_producer_id) == (1001, 0, 1000)
    assert meta.next_producer_id == -1
    assert h.state() is S.COMPLETE_COMMIT
    # The retry after the rotation: NONE with the new id (retry on overflow).
    assert h.end2(1000, EPOCH_MAX - 1, True) == EndTxnAnswer(E.NONE, 1001, 0)
    assert h.end2(1000, EPOCH_MAX - 2, True) == EndTxnAnswer(E.INVALID_PRODUCER_ID_MAPPING)
    assert h.add2(1000, EPOCH_MAX - 1, ("t", 0)) is E.INVALID_PRODUCER_ID_MAPPING
    assert h.add2(1001, 0, ("t", 0)) is E.NONE
    assert h.end2(1001, 0, True) == EndTxnAnswer(E.NONE, 1001, 1)
    h.assert_replay_equals_live()


def test_a_version_2_transaction_fenced_by_init_producer_id(h: V2) -> None:
    h.init()
    h.add2(1000, 0, ("t", 0))
    assert h.init().error is E.CONCURRENT_TRANSACTIONS  # a second instance fences it
    assert h.state() is S.PREPARE_ABORT and h.epoch() == 1
    assert h.jobs == [MarkerJob("tx", 1000, 1, False, (("t", 0),), 0, transaction_version=TV2)]
    h.complete(h.jobs[0])
    # The fenced instance's end: its epoch is not the current one.
    assert h.end2(1000, 0, True) == EndTxnAnswer(E.INVALID_TXN_STATE)
    assert h.init().producer_epoch == 2
    assert h.end2(1000, 1, False) == EndTxnAnswer(E.PRODUCER_FENCED)
    h.assert_replay_equals_live()


def test_a_version_2_fence_at_an_exhausted_epoch_rotates_on_completion(h: V2) -> None:
    h.init()
    h.force_epoch(EPOCH_MAX - 1)
    h.add2(1000, EPOCH_MAX - 1, ("t", 0))
    h.now_ms += 120_000  # past the transaction timeout
    h.apply(h.shard.abort_timed_out(h.now_ms))
    assert h.jobs == [
        MarkerJob("tx", 1000, EPOCH_MAX, False, (("t", 0),), 0, transaction_version=TV2)
    ]
    h.complete(h.jobs[0])
    meta = h.shard.txns["tx"]
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (1001, 0, S.COMPLETE_ABORT)
    h.assert_replay_equals_live()

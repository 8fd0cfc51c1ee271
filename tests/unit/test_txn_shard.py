"""The transaction shard (coordinator/transactions/shard.py), pure: every transition, fencing,
KIP-360 recovery, timeouts, expiration, reads, and the log replayed (and compacted) giving
the live state. Time is a number the test moves; producer ids come from a counter."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from groupcoord.coordinator.groups.result import Result
from groupcoord.coordinator.transactions.messages import (
    InitProducerIdAnswer,
    ListFilters,
    MarkerJob,
)
from groupcoord.coordinator.transactions.metadata import EPOCH_MAX
from groupcoord.coordinator.transactions.shard import TxnShard
from groupcoord.coordinator.transactions.state import (
    VALID_PREVIOUS_STATES,
    IllegalTransition,
    TxnState,
    check_transition,
)
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.txn_records import (
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)

MAX_TIMEOUT_MS = 900_000
E = ErrorCode


class Harness:
    """A shard, its log (every record applied, encoded as the runner writes it) and the
    marker jobs it handed over, delivered as the runner delivers replies."""

    def __init__(self, first_pid: int = 1000) -> None:
        self.ids = itertools.count(first_pid)
        self.jobs: list[MarkerJob] = []
        self.shard = TxnShard(0, self.ids.__next__, self.jobs.append, MAX_TIMEOUT_MS)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.now_ms = 1_000_000

    def apply(self, result: Result) -> list[Any]:
        answers: list[Any] = []
        for key, value in result.records:
            self.shard.replay(key, value, self.now_ms)
            self.log.append(
                (encode_txn_key(key), None if value is None else encode_txn_value(value))
            )
        for reply, response in result.replies:
            if reply is self.shard.markers:
                reply(response)
            else:
                answers.append(response)
        return answers

    def call(self, method: str, *args: Any) -> Any:
        """`method(*args, reply, now_ms)`; the reads (no now_ms) through `read`."""
        replies: list[Any] = []
        result = getattr(self.shard, method)(*args, replies.append, self.now_ms)
        return self._one(result)

    def read(self, method: str, *args: Any) -> Any:
        replies: list[Any] = []
        result = getattr(self.shard, method)(*args, replies.append)
        return self._one(result)

    def _one(self, result: Result) -> Any:
        answers = self.apply(result)
        assert len(answers) == 1, answers
        return answers[0]

    def init(
        self, txn: str = "tx", timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1
    ) -> InitProducerIdAnswer:
        answer: InitProducerIdAnswer = self.call("init_producer_id", txn, timeout_ms, pid, epoch)
        return answer

    def add(self, pid: int, epoch: int, *partitions: tuple[str, int], txn: str = "tx") -> Any:
        return self.call("add_partitions", txn, pid, epoch, list(partitions))

    def end(self, pid: int, epoch: int, commit: bool, txn: str = "tx") -> Any:
        return self.call("end_transaction", txn, pid, epoch, commit)

    def complete(self, job: MarkerJob) -> Any:
        return self.call("complete_transaction", job)

    def state(self, txn: str = "tx") -> TxnState:
        return self.shard.txns[txn].state

    def replayed(self) -> TxnShard:
        """A new shard rebuilt from the log, as a load does."""
        fresh = TxnShard(0, self.ids.__next__, [].append, MAX_TIMEOUT_MS)
        for key, value in self.log:
            fresh.replay(decode_txn_key(key), None if value is None else decode_txn_value(value), 0)
        return fresh

    def assert_replay_equals_live(self) -> None:
        for shard in (self.replayed(), self.compacted()):
            assert {k: m.durable() for k, m in shard.txns.items()} == {
                k: m.durable() for k, m in self.shard.txns.items()
            }

    def compacted(self) -> TxnShard:
        """The log compacted (the latest record per key, tombstones dropped), replayed."""
        latest: dict[bytes, bytes | None] = {}
        for key, value in self.log:
            latest.pop(key, None)
            latest[key] = value
        fresh = TxnShard(0, self.ids.__next__, [].append, MAX_TIMEOUT_MS)
        for key, value in latest.items():
            if value is not None:
                fresh.replay(decode_txn_key(key), decode_txn_value(value), 0)
        return fresh


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_valid_previous_states_are_kafkas() -> None:
    s = TxnState
    assert VALID_PREVIOUS_STATES[s.EMPTY] == {s.EMPTY, s.COMPLETE_COMMIT, s.COMPLETE_ABORT}
    assert VALID_PREVIOUS_STATES[s.ONGOING] == {
        s.ONGOING,
        s.EMPTY,
        s.COMPLETE_COMMIT,
        s.COMPLETE_ABORT,
    }
    assert VALID_PREVIOUS_STATES[s.PREPARE_COMMIT] == {s.ONGOING}
    assert VALID_PREVIOUS_STATES[s.PREPARE_ABORT] == {
        s.ONGOING,
        s.PREPARE_EPOCH_FENCE,
        s.EMPTY,
        s.COMPLETE_COMMIT,
        s.COMPLETE_ABORT,
    }
    assert VALID_PREVIOUS_STATES[s.COMPLETE_COMMIT] == {s.PREPARE_COMMIT}
    assert VALID_PREVIOUS_STATES[s.COMPLETE_ABORT] == {s.PREPARE_ABORT}
    assert VALID_PREVIOUS_STATES[s.DEAD] == {s.EMPTY, s.COMPLETE_COMMIT, s.COMPLETE_ABORT}
    assert VALID_PREVIOUS_STATES[s.PREPARE_EPOCH_FENCE] == {s.ONGOING}
    assert [(x.id, x.state_name) for x in s] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    with pytest.raises(IllegalTransition):
        check_transition(s.EMPTY, s.PREPARE_COMMIT)


def test_commit_cycle(h: Harness) -> None:
    """Empty -> Ongoing -> PrepareCommit (answered, then the markers) -> CompleteCommit, and
    the next transaction starts from CompleteCommit with a fresh partition set."""
    init = h.init()
    assert init == InitProducerIdAnswer(E.NONE, 1000, 0)
    assert h.state() is TxnState.EMPTY
    assert h.shard.txns["tx"].start_ms == -1
    assert h.add(1000, 0, ("t", 0), ("t", 1)) is E.NONE
    assert h.state() is TxnState.ONGOING
    start = h.shard.txns["tx"].start_ms
    assert start == h.now_ms
    h.now_ms += 5
    assert h.add(1000, 0, ("t", 1)) is E.NONE  # already in it: nothing written
    assert len(h.log) == 2
    assert h.add(1000, 0, ("u", 0)) is E.NONE
    assert h.shard.txns["tx"].partitions == {("t", 0), ("t", 1), ("u", 0)}
    assert h.shard.txns["tx"].start_ms == start
    assert h.end(1000, 0, True) is E.NONE
    assert h.state() is TxnState.PREPARE_COMMIT
    assert h.jobs == [MarkerJob("tx", 1000, 0, True, (("t", 0), ("t", 1), ("u", 0)), 0)]
    assert h.end(1000, 0, True) is E.CONCURRENT_TRANSACTIONS
    assert h.end(1000, 0, False) is E.INVALID_TXN_STATE
    assert h.add(1000, 0, ("t", 2)) is E.CONCURRENT_TRANSACTIONS
    assert h.init(pid=1000, epoch=0).error is E.CONCURRENT_TRANSACTIONS
    assert h.complete(h.jobs[0]) is E.NONE
    assert h.state() is TxnState.COMPLETE_COMMIT
    assert h.shard.txns["tx"].partitions == set()
    assert h.end(1000, 0, True) is E.NONE  # a retry of the completed commit: no write
    assert h.end(1000, 0, False) is E.INVALID_TXN_STATE
    records = len(h.log)
    assert h.complete(h.jobs[0]) is E.NONE  # a duplicate completion writes nothing
    assert len(h.log) == records
    h.now_ms += 10
    assert h.add(1000, 0, ("v", 0)) is E.NONE
    assert h.shard.txns["tx"].partitions == {("v", 0)}
    assert h.shard.txns["tx"].start_ms == h.now_ms
    h.assert_replay_equals_live()


def test_abort_cycle(h: Harness) -> None:
    h.init()
    h.add(1000, 0, ("t", 0))
    assert h.end(1000, 0, False) is E.NONE
    assert h.state() is TxnState.PREPARE_ABORT
    assert h.end(1000, 0, False) is E.CONCURRENT_TRANSACTIONS
    assert h.end(1000, 0, True) is E.INVALID_TXN_STATE
    h.complete(h.jobs[0])
    assert h.state() is TxnState.COMPLETE_ABORT
    assert h.end(1000, 0, False) is E.NONE
    assert h.end(1000, 0, True) is E.INVALID_TXN_STATE
    h.assert_replay_equals_live()


def test_end_and_add_errors(h: Harness) -> None:
    assert h.end(1, 0, True, txn="missing") is E.INVALID_PRODUCER_ID_MAPPING
    assert h.add(1, 0, ("t", 0), txn="missing") is E.INVALID_PRODUCER_ID_MAPPING
    assert h.add(1, 0, ("t", 0), txn="") is E.INVALID_REQUEST
    h.init()
    assert h.end(1000, 0, True) is E.INVALID_TXN_STATE  # Empty
    assert h.end(1000, 0, False) is E.INVALID_TXN_STATE
    assert h.end(999, 0, True) is E.INVALID_PRODUCER_ID_MAPPING
    assert h.end(1000, 1, True) is E.PRODUCER_FENCED
    assert h.add(999, 0, ("t", 0)) is E.INVALID_PRODUCER_ID_MAPPING
    assert h.add(1000, 3, ("t", 0)) is E.PRODUCER_FENCED


def test_init_producer_id_checks(h: Harness) -> None:
    assert h.init(txn="").error is E.INVALID_REQUEST
    assert h.init(pid=5).error is E.INVALID_REQUEST  # only one of pid and epoch
    assert h.init(epoch=5).error is E.INVALID_REQUEST
    assert h.init(timeout_ms=0).error is E.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout_ms=MAX_TIMEOUT_MS + 1).error is E.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout_ms=MAX_TIMEOUT_MS) == InitProducerIdAnswer(E.NONE, 1000, 0)
    assert h.log and len(h.log) == 1


def test_init_bumps_the_epoch_and_fences_the_old_instance(h: Harness) -> None:
    """A second InitProducerId bumps the epoch; one during an Ongoing transaction fences it:
    PrepareAbort at epoch + 1, markers, CONCURRENT_TRANSACTIONS until it completes."""
    h.init(timeout_ms=30_000)
    assert h.init() == InitProducerIdAnswer(E.NONE, 1000, 1)
    assert h.shard.txns["tx"].timeout_ms == 60_000
    assert h.add(1000, 0, ("t", 0)) is E.PRODUCER_FENCED  # the older instance
    assert h.add(1000, 1, ("t", 0)) is E.NONE
    assert h.init().error is E.CONCURRENT_TRANSACTIONS
    meta = h.shard.txns["tx"]
    assert meta.state is TxnState.PREPARE_ABORT
    assert meta.producer_epoch == 2
    assert meta.last_producer_epoch == -1
    assert h.jobs == [MarkerJob("tx", 1000, 2, False, (("t", 0),), 0)]
    assert h.end(1000, 1, False) is E.PRODUCER_FENCED  # the fenced producer
    assert h.init().error is E.CONCURRENT_TRANSACTIONS  # while the abort completes
    h.complete(h.jobs[0])
    assert h.init() == InitProducerIdAnswer(E.NONE, 1000, 3)
    h.assert_replay_equals_live()


def test_kip360_recovery(h: Harness) -> None:
    """InitProducerId with the caller's producer id and epoch: a bump from that epoch; the
    same call retried (epoch == last epoch) gets the same epoch; an older one is fenced."""
    h.init()
    assert h.init(pid=1000, epoch=0) == InitProducerIdAnswer(E.NONE, 1000, 1)
    assert h.init(pid=1000, epoch=0) == InitProducerIdAnswer(E.NONE, 1000, 1)  # retried
    assert h.init(pid=1000, epoch=1) == InitProducerIdAnswer(E.NONE, 1000, 2)
    assert h.init(pid=1000, epoch=0).error is E.PRODUCER_FENCED
    assert h.init(pid=77, epoch=2).error is E.PRODUCER_FENCED  # another producer id
    # lastProducerEpoch is memory only: after a load the retry is fenced (as in Kafka).
    reloaded = h.replayed()
    h.shard = reloaded
    reloaded.markers = h.jobs.append
    assert h.init(pid=1000, epoch=1).error is E.PRODUCER_FENCED
    assert h.init(pid=1000, epoch=2) == InitProducerIdAnswer(E.NONE, 1000, 3)


def test_unknown_id_with_a_producer_pair_gets_a_new_producer(h: Harness) -> None:
    """After expiration (or for any unknown id) the expected pair is ignored: new pid, 0."""
    assert h.init(pid=55, epoch=7) == InitProducerIdAnswer(E.NONE, 1000, 0)


def test_epoch_exhaustion_rotates_the_producer_id(h: Harness) -> None:
    h.init()
    meta = h.shard.txns["tx"]
    meta.producer_epoch = EPOCH_MAX - 2  # as if bumped that often
    assert h.init() == InitProducerIdAnswer(E.NONE, 1000, EPOCH_MAX - 1)
    # KIP-360 with the current, exhausted pair: a new producer id at epoch 0.
    assert h.init(pid=1000, epoch=EPOCH_MAX - 1) == InitProducerIdAnswer(E.NONE, 1001, 0)
    assert h.shard.txns["tx"].prev_producer_id == 1000
    # The same call retried (the previous pid at an exhausted epoch, equal to the last
    # epoch): the same answer, nothing rotated again.
    assert h.init(pid=1000, epoch=EPOCH_MAX - 1) == InitProducerIdAnswer(E.NONE, 1001, 0)
    assert h.init(pid=1000, epoch=5).error is E.PRODUCER_FENCED
    # Without a pair an exhausted epoch rotates too.
    h.shard.txns["tx"].producer_epoch = EPOCH_MAX - 1
    assert h.init() == InitProducerIdAnswer(E.NONE, 1002, 0)


def test_fence_at_the_epoch_limit(h: Harness) -> None:
    """A fence from MAX - 1 goes to MAX; the next InitProducerId rotates the producer id."""
    h.init()
    h.shard.txns["tx"].producer_epoch = EPOCH_MAX - 1
    assert h.add(1000, EPOCH_MAX - 1, ("t", 0)) is E.NONE
    assert h.init().error is E.CONCURRENT_TRANSACTIONS
    assert h.shard.txns["tx"].producer_epoch == EPOCH_MAX
    h.complete(h.jobs[-1])
    assert h.init() == InitProducerIdAnswer(E.NONE, 1001, 0)


def test_timeout_abort(h: Harness) -> None:
    """abort_timed_out aborts Ongoing transactions started more than their timeout ago (the
    persisted start time counts), with the epoch bumped; others are left alone."""
    h.init(txn="a", timeout_ms=1_000)
    h.init(txn="b", timeout_ms=10_000)
    h.init(txn="c", timeout_ms=1_000)
    h.add(1000, 0, ("t", 0), txn="a")
    h.add(1001, 0, ("t", 0), txn="b")
    h.now_ms += 1_000
    assert h.apply(h.shard.abort_timed_out(h.now_ms)) == []
    assert h.state("a") is TxnState.ONGOING  # exactly its timeout: not yet
    h.now_ms += 1
    h.apply(h.shard.abort_timed_out(h.now_ms))
    assert h.state("a") is TxnState.PREPARE_ABORT
    assert h.shard.txns["a"].producer_epoch == 1
    assert h.state("b") is TxnState.ONGOING
    assert h.state("c") is TxnState.EMPTY  # no transaction: nothing to abort
    assert h.jobs == [MarkerJob("a", 1000, 1, False, (("t", 0),), 0)]
    assert h.add(1000, 0, ("t", 1), txn="a") is E.PRODUCER_FENCED
    assert h.end(1000, 0, True, txn="a") is E.PRODUCER_FENCED
    h.complete(h.jobs[0])
    assert h.state("a") is TxnState.COMPLETE_ABORT
    h.assert_replay_equals_live()


def test_transactional_id_expiration(h: Harness) -> None:
    h.init(txn="idle")
    h.init(txn="busy")
    h.add(1001, 0, ("t", 0), txn="busy")
    h.now_ms += 7 * 24 * 3600 * 1000
    h.apply(h.shard.expire_transactional_ids(h.now_ms, 7 * 24 * 3600 * 1000))
    assert "idle" not in h.shard.txns  # a tombstone, replayed
    assert h.log[-1][1] is None
    assert h.state("busy") is TxnState.ONGOING  # in a transaction: never expired
    assert h.add(1000, 0, ("t", 0), txn="idle") is E.INVALID_PRODUCER_ID_MAPPING
    assert h.init(txn="idle", pid=1000, epoch=0) == InitProducerIdAnswer(E.NONE, 1002, 0)
    h.assert_replay_equals_live()


def test_verify_partitions(h: Harness) -> None:
    h.init()
    h.add(1000, 0, ("t", 0))
    assert h.read("verify_partitions", "tx", 1000, 0, [("t", 0), ("t", 1)]) == {
        ("t", 0): E.NONE,
        ("t", 1): E.TRANSACTION_ABORTABLE,
    }
    assert h.read("verify_partitions", "tx", 1000, 1, [("t", 0)]) is E.PRODUCER_FENCED
    assert h.read("verify_partitions", "tx", 9, 0, [("t", 0)]) is E.INVALID_PRODUCER_ID_MAPPING
    assert h.read("verify_partitions", "no", 9, 0, [("t", 0)]) is E.INVALID_PRODUCER_ID_MAPPING
    h.end(1000, 0, True)
    assert h.read("verify_partitions", "tx", 1000, 0, [("t", 0)]) is E.CONCURRENT_TRANSACTIONS
    assert len(h.log) == 3  # verification writes nothing


def test_broker_add_records_transaction_version_2(h: Harness) -> None:
    h.init()
    h.apply(h.shard.add_partitions("tx", 1000, 0, [("t", 0)], [].append, h.now_ms, 2))
    assert h.shard.txns["tx"].client_transaction_version == 2
    h.assert_replay_equals_live()


def test_end_txn_below_v5_ends_with_transaction_version_0(h: Harness) -> None:
    """EndTxn v0-v4 ends a transaction whose partitions a version 2 add joined (a
    TxnOffsetCommit v5, a Produce v12) with version 0 markers at the transaction's epoch,
    as Kafka's prepareAbortOrCommit takes the EndTxn's version: a version 2 marker at
    that epoch would be refused by the partitions as stale."""
    h.init()
    h.apply(h.shard.add_partitions("tx", 1000, 0, [("t", 0)], [].append, h.now_ms, 2))
    assert h.end(1000, 0, False) is ErrorCode.NONE
    assert [(job.producer_epoch, job.transaction_version) for job in h.jobs] == [(0, 0)]
    h.assert_replay_equals_live()


def test_describe_and_list(h: Harness) -> None:
    h.init(txn="a")
    h.init(txn="b")
    h.add(1001, 0, ("t", 1), ("t", 0), txn="b")
    described = h.read("describe", ["a", "b", "", "zz"])
    assert [d.error for d in described] == [
        E.NONE,
        E.NONE,
        E.INVALID_REQUEST,
        E.TRANSACTIONAL_ID_NOT_FOUND,
    ]
    a, b = described[0], described[1]
    assert (a.state, a.producer_id, a.producer_epoch, a.start_ms) == ("Empty", 1000, 0, -1)
    assert (b.state, b.start_ms, b.partitions) == ("Ongoing", h.now_ms, (("t", 0), ("t", 1)))

    def listed(**filters: Any) -> list[str]:
        return [t.transactional_id for t in h.call("list_transactions", ListFilters(**filters))]

    assert listed() == ["a", "b"]
    assert listed(states=frozenset({"Ongoing"})) == ["b"]
    assert listed(states=frozenset({"Bogus"})) == []
    assert listed(producer_ids=frozenset({1000})) == ["a"]
    h.now_ms += 100
    assert listed(duration_ms=99) == ["a", "b"]  # Empty: start -1 passes every filter
    assert listed(duration_ms=100) == ["a"]
    assert listed(id_matches=lambda t: t == "b") == ["b"]


def test_describe_lists_every_partition_while_prepared(h: Harness) -> None:
    """Kafka's DescribeTransactions in PrepareCommit/PrepareAbort lists the transaction's
    partitions (the markers still to write), also after a load; Complete* lists none."""
    offsets = ("__consumer_offsets", 7)
    for txn, commit in (("c", True), ("a", False)):
        pid = h.init(txn=txn).producer_id
        h.add(pid, 0, ("t", 2), ("u", 0), offsets, txn=txn)
        assert h.end(pid, 0, commit, txn=txn) is E.NONE
        (prepared,) = h.read("describe", [txn])
        state = "PrepareCommit" if commit else "PrepareAbort"
        partitions = (offsets, ("t", 2), ("u", 0))
        assert (prepared.state, prepared.partitions) == (state, partitions)
        (loaded,) = h.replayed().describe([txn], [].append).replies[0][1]
        assert (loaded.state, loaded.partitions) == (state, partitions)
    fenced = h.init(txn="f").producer_id
    h.add(fenced, 0, ("t", 0), txn="f")
    assert h.init(txn="f").error is E.CONCURRENT_TRANSACTIONS  # fences: PrepareAbort
    (prepared,) = h.read("describe", ["f"])
    assert (prepared.state, prepared.producer_epoch, prepared.partitions) == (
        "PrepareAbort",
        1,
        (("t", 0),),
    )
    h.complete(h.jobs[-1])
    (completed,) = h.read("describe", ["f"])
    assert (completed.state, completed.partitions) == ("CompleteAbort", ())

"""The transaction coordinator over the wire, with a raw client (tests/rawclient.py):
FindCoordinator key type 1, InitProducerId with a transactional id (new producer, epoch bump,
fencing an older instance, KIP-360, its errors by version), AddPartitionsToTxn v3 and v5,
AddOffsetsToTxn, EndTxn (answered once PrepareCommit/PrepareAbort is durable),
DescribeTransactions, ListTransactions, a timeout abort, and a SIGKILL in PrepareCommit:
the restarted server resumes the transaction's markers and completes it (its only partition's
topic is deleted after the restart, so it completes without the data plane's markers)."""

from __future__ import annotations

import datetime
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.server.txn_markers import TEST_MARKER_PAUSE_ENV
from groupcoord.protocol.errors import ErrorCode
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving

E = ErrorCode
OFFSETS = "__consumer_offsets"


@pytest.fixture
def txn_server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", transaction_abort_interval_ms=100) as proc:
        yield proc


def _module(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def init_pid(
    c: RawClient,
    txn: str | None,
    timeout_ms: int = 60_000,
    pid: int = -1,
    epoch: int = -1,
    version: int = 5,
) -> Any:
    fields: dict[str, Any] = {
        "transactional_id": txn,
        "transaction_timeout": datetime.timedelta(milliseconds=timeout_ms),
    }
    if version >= 3:
        fields.update(producer_id=pid, producer_epoch=epoch)
    return c.request(22, version, request_class(22, version)(**fields))


def add_partitions(
    c: RawClient, txn: str, pid: int, epoch: int, topics: dict[str, list[int]], version: int = 3
) -> dict[tuple[str, int], ErrorCode]:
    m = _module(24, version)
    request = request_class(24, version)(
        v3_and_below_transactional_id=txn,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=tuple(
            m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()
        ),
    )
    response = c.request(24, version, request)
    return {
        (t.name, p.partition_index): E(p.partition_error_code)
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def add_offsets(c: RawClient, txn: str, pid: int, epoch: int, group: str, version: int = 4) -> E:
    request = request_class(25, version)(
        transactional_id=txn, producer_id=pid, producer_epoch=epoch, group_id=group
    )
    return E(c.request(25, version, request).error_code)


def end_txn(c: RawClient, txn: str, pid: int, epoch: int, commit: bool, version: int = 4) -> E:
    request = request_class(26, version)(
        transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return E(c.request(26, version, request).error_code)


def describe(c: RawClient, *txns: str) -> list[Any]:
    response = c.request(65, 0, request_class(65, 0)(transactional_ids=txns))
    return list(response.transaction_states)


def list_txns(c: RawClient, states: tuple[str, ...] = (), pattern: str | None = None) -> Any:
    request = request_class(66, 2)(
        state_filters=states,
        producer_id_filters=(),
        duration_filter=-1,
        transactional_id_pattern=pattern,
    )
    return c.request(66, 2, request)


def create_topic(c: RawClient, name: str) -> None:
    m = _module(3, 12)
    request = request_class(3, 12)(
        topics=(m.MetadataRequestTopic(name=name, topic_id=None),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    assert c.request(3, 12, request).topics[0].error_code == 0


def delete_topic(c: RawClient, name: str) -> None:
    m = _module(20, 6)
    request = request_class(20, 6)(
        topics=(m.DeleteTopicState(name=name, topic_id=None),),
        timeout=datetime.timedelta(seconds=30),
    )
    assert c.request(20, 6, request).responses[0].error_code == 0


def wait_state(c: RawClient, txn: str, state: str, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        described = describe(c, txn)[0]
        if described.transaction_state == state:
            return described
        assert time.monotonic() < deadline, described
        time.sleep(0.05)


def test_find_coordinator_answers_this_node_for_transactional_ids(server: ServerProcess) -> None:
    with RawClient(server.bootstrap) as c:
        m4 = _module(10, 4)
        assert m4  # the module exists at v4
        r = c.request(10, 4, request_class(10, 4)(key_type=1, coordinator_keys=("a", "b")))
        assert [(x.key, x.error_code, x.port) for x in r.coordinators] == [
            ("a", 0, server.port),
            ("b", 0, server.port),
        ]
        r = c.request(10, 3, request_class(10, 3)(key="a", key_type=1))
        assert (r.error_code, r.port) == (0, server.port)


def test_init_producer_id_fences_and_bumps(txn_server: ServerProcess) -> None:
    with RawClient(txn_server.bootstrap) as c:
        create_topic(c, "t")
        first = init_pid(c, "tx")
        assert first.error_code == 0 and first.producer_epoch == 0
        pid = first.producer_id
        assert add_partitions(c, "tx", pid, 0, {"t": [0]}) == {("t", 0): E.NONE}
        # A second instance: the ongoing transaction of the first is fenced (epoch 1) and
        # aborted; CONCURRENT_TRANSACTIONS while its markers are written, as Kafka.
        again = init_pid(c, "tx")
        deadline = time.monotonic() + 30
        while again.error_code == E.CONCURRENT_TRANSACTIONS:
            assert time.monotonic() < deadline, "the fenced transaction never completed"
            time.sleep(0.05)
            again = init_pid(c, "tx")
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, pid, 2)
        # The first instance is fenced: PRODUCER_FENCED from EndTxn v2, earlier versions
        # INVALID_PRODUCER_EPOCH.
        assert end_txn(c, "tx", pid, 0, True) == E.PRODUCER_FENCED
        assert end_txn(c, "tx", pid, 0, True, version=1) == E.INVALID_PRODUCER_EPOCH
        assert add_offsets(c, "tx", pid, 0, "g") == E.PRODUCER_FENCED
        assert add_offsets(c, "tx", pid, 0, "g", version=1) == E.INVALID_PRODUCER_EPOCH
        # KIP-360 with the current pair bumps; an older epoch is fenced (v4+ PRODUCER_FENCED,
        # v3 INVALID_PRODUCER_EPOCH).
        bumped = init_pid(c, "tx", pid=pid, epoch=2)
        assert (bumped.error_code, bumped.producer_epoch) == (0, 3)
        assert init_pid(c, "tx", pid=pid, epoch=1).error_code == E.PRODUCER_FENCED
        assert init_pid(c, "tx", pid=pid, epoch=1, version=3).error_code == (
            E.INVALID_PRODUCER_EPOCH
        )


def test_init_producer_id_errors(server: ServerProcess) -> None:
    with RawClient(server.bootstrap) as c:
        for version in (0, 3, 5):
            r = init_pid(c, "tx", timeout_ms=900_001, version=version)
            assert (r.error_code, r.producer_id, r.producer_epoch) == (
                E.INVALID_TRANSACTION_TIMEOUT,
                -1,
                -1,
            )
        assert init_pid(c, "tx", timeout_ms=0).error_code == E.INVALID_TRANSACTION_TIMEOUT
        assert init_pid(c, "").error_code == E.INVALID_REQUEST
        assert init_pid(c, "tx", pid=5).error_code == E.INVALID_REQUEST
        # The idempotent (non-transactional) path is unchanged: a new pid at epoch 0.
        plain = init_pid(c, None)
        assert plain.error_code == 0 and plain.producer_epoch == 0
        r = init_pid(c, "tx", timeout_ms=900_000, version=0)
        assert r.error_code == 0 and r.producer_id != plain.producer_id


def test_add_partitions_and_offsets(server: ServerProcess) -> None:
    with RawClient(server.bootstrap) as c:
        create_topic(c, "t")
        r = init_pid(c, "tx")
        pid, epoch = r.producer_id, r.producer_epoch
        # An unknown topic, an internal one: the coordinator is not asked.
        assert add_partitions(c, "tx", pid, epoch, {"t": [0], "nope": [0], OFFSETS: [1]}) == {
            ("t", 0): E.OPERATION_NOT_ATTEMPTED,
            ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
            (OFFSETS, 1): E.TOPIC_AUTHORIZATION_FAILED,
        }
        assert add_partitions(c, "tx", pid, epoch, {"t": [5]}) == {
            ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION
        }
        assert add_partitions(c, "nobody", 1, 0, {"t": [0]}) == {
            ("t", 0): E.INVALID_PRODUCER_ID_MAPPING
        }
        assert add_partitions(c, "tx", pid + 1, epoch, {"t": [0]}) == {
            ("t", 0): E.INVALID_PRODUCER_ID_MAPPING
        }
        assert add_partitions(c, "tx", pid, epoch + 1, {"t": [0]}) == {("t", 0): E.PRODUCER_FENCED}
        assert add_partitions(c, "tx", pid, epoch + 1, {"t": [0]}, version=1) == {
            ("t", 0): E.INVALID_PRODUCER_EPOCH
        }
        assert add_partitions(c, "tx", pid, epoch, {"t": [0]}) == {("t", 0): E.NONE}
        assert add_offsets(c, "tx", pid, epoch, "group-a") == E.NONE
        assert add_offsets(c, "nobody", 1, 0, "group-a") == E.INVALID_PRODUCER_ID_MAPPING
        described = describe(c, "tx", "nobody", "")
        assert [d.error_code for d in described] == [
            E.NONE,
            E.TRANSACTIONAL_ID_NOT_FOUND,
            E.INVALID_REQUEST,
        ]
        topics = {t.topic: list(t.partitions) for t in described[0].topics}
        # abs(hashCode("group-a")) % 50
        assert topics == {"t": [0], OFFSETS: [_offsets_partition("group-a")]}
        assert described[0].transaction_state == "Ongoing"
        assert described[0].transaction_timeout == datetime.timedelta(seconds=60)
        # v5 (batched, from partition leaders): verify-only and add.
        m = _module(24, 5)
        request = request_class(24, 5)(
            transactions=(
                m.AddPartitionsToTxnTransaction(
                    transactional_id="tx",
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=True,
                    topics=(m.AddPartitionsToTxnTopic(name="t", partitions=(0, 1)),),
                ),
                m.AddPartitionsToTxnTransaction(
                    transactional_id="nobody",
                    producer_id=1,
                    producer_epoch=0,
                    verify_only=True,
                    topics=(m.AddPartitionsToTxnTopic(name="t", partitions=(0,)),),
                ),
            )
        )
        response = c.request(24, 5, request)
        assert response.error_code == 0
        assert [
            [(p.partition_index, p.partition_error_code) for p in t.results_by_partition]
            for r in response.results_by_transaction
            for t in r.topic_results
        ] == [[(0, E.NONE), (1, E.TRANSACTION_ABORTABLE)], [(0, E.INVALID_PRODUCER_ID_MAPPING)]]
        listed = list_txns(c)
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
            ("tx", "Ongoing")
        ]
        assert list_txns(c, states=("Empty", "Bogus")).unknown_state_filters == ("Bogus",)
        assert list_txns(c, states=("Empty",)).transaction_states == ()
        assert list_txns(c, pattern="t.").transaction_states[0].transactional_id == "tx"
        assert list_txns(c, pattern="t").transaction_states == ()  # a full match
        assert list_txns(c, pattern="(").error_code == E.INVALID_REGULAR_EXPRESSION


def test_end_txn_answers_once_prepared(server: ServerProcess) -> None:
    with RawClient(server.bootstrap) as c:
        create_topic(c, "t")
        r = init_pid(c, "tx")
        pid, epoch = r.producer_id, r.producer_epoch
        assert end_txn(c, "tx", pid, epoch, True) == E.INVALID_TXN_STATE  # Empty
        assert end_txn(c, "nobody", 1, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
        assert add_partitions(c, "tx", pid, epoch, {"t": [0]}) == {("t", 0): E.NONE}
        assert end_txn(c, "tx", pid, epoch, True) == E.NONE
        # PrepareCommit until the markers are written: a retry of the commit is answered
        # CONCURRENT_TRANSACTIONS meanwhile and NONE once complete; an abort never.
        assert describe(c, "tx")[0].transaction_state in ("PrepareCommit", "CompleteCommit")
        assert end_txn(c, "tx", pid, epoch, True) in (E.CONCURRENT_TRANSACTIONS, E.NONE)
        assert end_txn(c, "tx", pid, epoch, False) == E.INVALID_TXN_STATE
        wait_state(c, "tx", "CompleteCommit")
        assert end_txn(c, "tx", pid, epoch, True) == E.NONE
        assert [t.transaction_state for t in list_txns(c).transaction_states] == ["CompleteCommit"]


def test_timed_out_transaction_is_aborted(txn_server: ServerProcess) -> None:
    with RawClient(txn_server.bootstrap) as c:
        create_topic(c, "t")
        r = init_pid(c, "tx", timeout_ms=500)
        pid = r.producer_id
        assert add_partitions(c, "tx", pid, 0, {"t": [0]}) == {("t", 0): E.NONE}
        aborted = wait_state(c, "tx", "CompleteAbort")
        assert aborted.producer_epoch == 1
        assert add_partitions(c, "tx", pid, 0, {"t": [0]}) == {("t", 0): E.PRODUCER_FENCED}
        assert end_txn(c, "tx", pid, 0, True) == E.PRODUCER_FENCED


def test_sigkill_in_prepare_commit_resumes_the_markers(txn_server: ServerProcess) -> None:
    """EndTxn answered (PrepareCommit durable), then SIGKILL at once. After the restart the
    transaction is loaded in PrepareCommit and its markers are sent again (or, when the kill
    came after them, in CompleteCommit); it completes, durably across another SIGKILL."""
    with RawClient(txn_server.bootstrap) as c:
        create_topic(c, "t")
        r = init_pid(c, "tx")
        pid, epoch = r.producer_id, r.producer_epoch
        assert add_partitions(c, "tx", pid, epoch, {"t": [0]}) == {("t", 0): E.NONE}
        assert end_txn(c, "tx", pid, epoch, True) == E.NONE
    txn_server.restart()
    with RawClient(txn_server.bootstrap) as c:
        deadline = time.monotonic() + 30
        while (loaded := describe(c, "tx")[0]).error_code != E.NONE:  # the shard loading
            assert time.monotonic() < deadline, loaded
            time.sleep(0.05)
        assert loaded.transaction_state in ("PrepareCommit", "CompleteCommit")
        assert (loaded.producer_id, loaded.producer_epoch) == (pid, epoch)
        wait_state(c, "tx", "CompleteCommit")
    txn_server.restart()
    with RawClient(txn_server.bootstrap) as c:
        done = wait_state(c, "tx", "CompleteCommit")
        assert (done.producer_id, done.producer_epoch) == (pid, epoch)
        assert end_txn(c, "tx", pid, epoch, True) == E.NONE  # a retry of the commit
        bumped = init_pid(c, "tx")
        assert (bumped.error_code, bumped.producer_epoch) == (0, epoch + 1)


def _offsets_partition(group: str) -> int:
    h = 0
    for unit in group.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return abs(signed) % 50


def test_add_during_the_markers_is_answered_once_they_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next transaction's AddPartitionsToTxn / AddOffsetsToTxn sent right after EndTxn,
    while the markers are still being written (held 300 ms by the router's test hook): the
    server waits for the transaction to complete (transaction_concurrent_wait_ms) and
    answers NONE, not CONCURRENT_TRANSACTIONS (which clients retry only after 20 ms)."""
    monkeypatch.setenv(TEST_MARKER_PAUSE_ENV, "300,0")
    with serving(tmp_path / "data", transaction_concurrent_wait_ms=60_000) as server:
        with RawClient(server.bootstrap) as c:
            create_topic(c, "t")
            create_topic(c, "u")
            r = init_pid(c, "tx")
            pid, epoch = r.producer_id, r.producer_epoch
            assert add_partitions(c, "tx", pid, epoch, {"t": [0]}) == {("t", 0): E.NONE}
            assert end_txn(c, "tx", pid, epoch, True) == E.NONE
            assert describe(c, "tx")[0].transaction_state == "PrepareCommit"
            assert add_partitions(c, "tx", pid, epoch, {"u": [0]}) == {("u", 0): E.NONE}
            described = describe(c, "tx")[0]
            assert described.transaction_state == "Ongoing"
            assert [(t.topic, list(t.partitions)) for t in described.topics] == [("u", [0])]
            assert end_txn(c, "tx", pid, epoch, False) == E.NONE
            assert describe(c, "tx")[0].transaction_state == "PrepareAbort"
            assert add_offsets(c, "tx", pid, epoch, "g") == E.NONE
            assert describe(c, "tx")[0].transaction_state == "Ongoing"

"""The partition side of transactions with a raw client (issue 18 item 3): transactional
Produce, markers through WriteTxnMarkers, Fetch read_committed / read_uncommitted,
ListOffsets, DescribeProducers, restarts after SIGKILL, retention and compaction."""

from __future__ import annotations

import datetime
import threading
import time

from groupcoord.protocol.control_batches import marker_batch
from tests.integration.test_clients import create_topic
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    _m,
    consume,
    describe_producers,
    fetch,
    list_offset,
    produce,
    read_all,
    txn_batch,
    write_markers,
)
from tests.rawclient import RawClient
from tests.support import ServerProcess

NONE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 0, 47, 48
UNKNOWN_TOPIC_OR_PARTITION, TRANSACTION_COORDINATOR_FENCED = 3, 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_PRODUCER_ID_MAPPING, INVALID_RECORD = 53, 49, 87
LATEST, EARLIEST = -1, -2


def _txn(client: RawClient, topic: str, pid: int, epoch: int, seq: int, *values: bytes) -> int:
    """Produce one transactional batch; returns its base offset."""
    r = produce(client, topic, 0, txn_batch(list(values), pid, epoch, seq))
    assert r.error_code == NONE, r
    return int(r.base_offset)


def test_commit_and_abort_markers_decide_what_read_committed_readers_see(
    server: ServerProcess,
) -> None:
    """Two producers interleave on one partition; a commit marker makes one transaction
    visible to read_committed, an abort hides the other for good; read_uncommitted sees
    every record all along. The last stable offset stays at the first offset of the
    earliest undecided transaction, and ListOffsets latest answers it for read_committed."""
    create_topic(server.bootstrap, "t", 1)
    with RawClient(server.bootstrap) as c:
        a0 = _txn(c, "t", 100, 0, 0, b"a1", b"a2")
        b0 = _txn(c, "t", 200, 3, 0, b"b1")
        _txn(c, "t", 100, 0, 2, b"a3")
        end = b0 + 2  # a1 a2 | b1 | a3
        p = fetch(c, "t", 0, 0, READ_COMMITTED)
        assert (p.high_watermark, p.last_stable_offset) == (end, a0)
        assert p.records == b"" and list(p.aborted_transactions) == []
        assert list_offset(c, "t", 0, LATEST, READ_COMMITTED) == (NONE, a0)
        assert list_offset(c, "t", 0, LATEST, READ_UNCOMMITTED) == (NONE, end)
        assert read_all(c, "t", 0, READ_UNCOMMITTED).values == [b"a1", b"a2", b"b1", b"a3"]

        # A's commit: B's transaction still pins the LSO at its first offset.
        assert write_markers(c, [(100, 0, True, {"t": [0]})]) == {(100, "t", 0): NONE}
        assert list_offset(c, "t", 0, LATEST, READ_COMMITTED) == (NONE, b0)
        assert read_all(c, "t", 0, READ_COMMITTED).values == [b"a1", b"a2"]

        # B aborts: everything is decided; B's record is never shown to read_committed.
        assert write_markers(c, [(200, 3, False, {"t": [0]})], coordinator_epoch=2) == {
            (200, "t", 0): NONE
        }
        hw = end + 2  # two markers
        assert list_offset(c, "t", 0, LATEST, READ_COMMITTED) == (NONE, hw)
        p = fetch(c, "t", 0, 0, READ_COMMITTED)
        assert (p.high_watermark, p.last_stable_offset) == (hw, hw)
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(200, b0)]
        assert read_all(c, "t", 0, READ_COMMITTED).values == [b"a1", b"a2", b"a3"]
        assert read_all(c, "t", 0, READ_UNCOMMITTED).values == [b"a1", b"a2", b"b1", b"a3"]
        u = fetch(c, "t", 0, 0, READ_UNCOMMITTED)
        assert u.aborted_transactions is None and u.last_stable_offset == hw

        # A fetch of the abort marker alone still lists its transaction (Kafka: last
        # offset >= fetch offset); one at the LSO returns nothing and lists nothing.
        p = fetch(c, "t", 0, hw - 1, READ_COMMITTED)
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(200, b0)]
        p = fetch(c, "t", 0, hw, READ_COMMITTED)
        assert p.records == b"" and list(p.aborted_transactions) == []

        # DescribeProducers: both, with the epochs and coordinator epochs of their markers.
        producers = {s.producer_id: s for s in describe_producers(c, "t", 0).active_producers}
        assert set(producers) == {100, 200}
        assert producers[100].producer_epoch == 0 and producers[100].coordinator_epoch == 0
        assert producers[100].current_txn_start_offset == -1
        assert producers[200].producer_epoch == 3 and producers[200].coordinator_epoch == 2


def test_marker_and_produce_errors_follow_kafka(server: ServerProcess) -> None:
    """Markers with an older producer epoch (INVALID_PRODUCER_EPOCH) or coordinator epoch
    (TRANSACTION_COORDINATOR_FENCED); a non-transactional batch inside an open transaction
    (INVALID_TXN_STATE); transactional batches without a transactional id (53), of two
    producers in one request (49); a control batch from a client (INVALID_RECORD); an
    unknown partition."""
    create_topic(server.bootstrap, "e", 1)
    with RawClient(server.bootstrap) as c:
        _txn(c, "e", 7, 2, 0, b"x")
        r = produce(c, "e", 0, txn_batch([b"y"], 7, 2, 1, transactional=False))
        assert r.error_code == INVALID_TXN_STATE
        r = produce(c, "e", 0, txn_batch([b"y"], 7, 2, 1), transactional_id=None)
        assert r.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert write_markers(c, [(7, 1, True, {"e": [0]})]) == {(7, "e", 0): INVALID_PRODUCER_EPOCH}
        assert write_markers(c, [(7, 2, False, {"e": [0], "nope": [0]})], coordinator_epoch=5) == {
            (7, "e", 0): NONE,
            (7, "nope", 0): UNKNOWN_TOPIC_OR_PARTITION,
        }
        # A retried marker (no transaction open) is appended again and changes nothing.
        assert write_markers(c, [(7, 2, False, {"e": [0]})], coordinator_epoch=5) == {
            (7, "e", 0): NONE
        }
        assert write_markers(c, [(7, 2, True, {"e": [0]})], coordinator_epoch=4) == {
            (7, "e", 0): TRANSACTION_COORDINATOR_FENCED
        }
        # After the marker the epoch's data may be plain again (the next batch is seq 1).
        r = produce(c, "e", 0, txn_batch([b"z"], 7, 2, 1, transactional=False))
        assert r.error_code == NONE
        # TV2 (WriteTxnMarkers v2): an equal epoch while a transaction is open is stale.
        _txn(c, "e", 7, 2, 2, b"w")
        assert write_markers(
            c, [(7, 2, True, {"e": [0]})], 5, version=2, transaction_version=2
        ) == {(7, "e", 0): INVALID_PRODUCER_EPOCH}
        assert write_markers(
            c, [(7, 3, True, {"e": [0]})], 5, version=2, transaction_version=2
        ) == {(7, "e", 0): NONE}
        # Old epoch data after the marker's epoch bump.
        r = produce(c, "e", 0, txn_batch([b"old"], 7, 2, 3))
        assert r.error_code == INVALID_PRODUCER_EPOCH
        # Two producers' transactional batches in one request.
        r = produce(c, "e", 0, txn_batch([b"p"], 8, 0, 0))
        assert r.error_code == NONE
        m = _m(0, 11)
        resp = c.request(
            0,
            11,
            m.ProduceRequest(
                transactional_id="two",
                acks=-1,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(
                    m.TopicProduceData(
                        name="e",
                        partition_data=(
                            m.PartitionProduceData(index=0, records=txn_batch([b"q"], 8, 0, 1)),
                        ),
                    ),
                    m.TopicProduceData(
                        name="e",
                        partition_data=(
                            m.PartitionProduceData(index=0, records=txn_batch([b"r"], 9, 0, 0)),
                        ),
                    ),
                ),
            ),
        )
        assert {p.error_code for t in resp.responses for p in t.partition_responses} == {
            INVALID_PRODUCER_ID_MAPPING
        }
        # A control batch sent by a client.
        r = produce(c, "e", 0, bytes(marker_batch(8, 0, 0, True, 1)[0]))
        assert r.error_code == INVALID_RECORD


def test_read_committed_long_poll_wakes_when_a_marker_moves_the_lso(
    server: ServerProcess,
) -> None:
    """A read_committed fetch parked at the last stable offset is answered when the commit
    marker arrives (not at max_wait): the marker moved the LSO, no new data did."""
    create_topic(server.bootstrap, "w", 1)
    with RawClient(server.bootstrap, timeout_s=60) as c, RawClient(server.bootstrap) as marker:
        _txn(c, "w", 5, 0, 0, b"v")
        answered: list[object] = []

        def park() -> None:
            answered.append(fetch(c, "w", 0, 0, READ_COMMITTED, max_wait_ms=30_000))

        started = time.monotonic()
        thread = threading.Thread(target=park)
        thread.start()
        time.sleep(0.5)  # the fetch is parked (nothing below the LSO)
        assert thread.is_alive()
        assert write_markers(marker, [(5, 0, True, {"w": [0]})]) == {(5, "w", 0): NONE}
        thread.join(25)
        assert not thread.is_alive() and time.monotonic() - started < 25
        p = answered[0]
        assert consume(p.records, []).values == [b"v"]  # type: ignore[attr-defined]

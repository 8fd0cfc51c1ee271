"""The partition side of transactions with a raw client (issue 18 item 3): transactional
Produce, markers through WriteTxnMarkers, Fetch read_committed / read_uncommitted,
ListOffsets, DescribeProducers, restarts after SIGKILL, retention and compaction.

The producers here are made up (no transaction coordinator knows them), so the servers run
with transaction_partition_verification_enable off, as a Kafka broker would need
transaction.partition.verification.enable=false to take such batches (KIP-890 verification
is tested in test_txn_v2.py)."""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

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
from tests.support import ServerProcess, client_batch, serving

NONE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 0, 47, 48
UNKNOWN_TOPIC_OR_PARTITION, TRANSACTION_COORDINATOR_FENCED = 3, 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, INVALID_PRODUCER_ID_MAPPING, INVALID_RECORD = 53, 49, 87
LATEST, EARLIEST = -1, -2
UNVERIFIED = {"transaction_partition_verification_enable": "false"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", **UNVERIFIED) as proc:
        yield proc


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


def _now_ms() -> int:
    return int(time.time() * 1000)


def _create(bootstrap: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, num_partitions=1, replication_factor=1, config=configs)
    admin.create_topics([topic])[name].result(10)


def _producers(client: RawClient, topic: str) -> dict[int, tuple[int, int, int, int]]:
    """producer id -> (epoch, last sequence, coordinator epoch, txn start offset)."""
    return {
        s.producer_id: (
            s.producer_epoch,
            s.last_sequence,
            s.coordinator_epoch,
            s.current_txn_start_offset,
        )
        for s in describe_producers(client, topic, 0).active_producers
    }


def _committed_view(
    client: RawClient, topic: str
) -> tuple[list[bytes], int, list[tuple[int, int]]]:
    """read_committed values, the LSO, and the aborted list of a fetch from the start."""
    start = list_offset(client, topic, 0, EARLIEST, READ_COMMITTED)[1]
    p = fetch(client, topic, 0, start, READ_COMMITTED)
    aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
    return read_all(client, topic, 0, READ_COMMITTED).values, int(p.last_stable_offset), aborted


def test_transactions_survive_sigkill_and_restart(server: ServerProcess) -> None:
    """An open transaction (its LSO pin, its first offset), a committed and an aborted one
    (the index) and the producers' epochs survive a SIGKILL: rebuilt from the log at start.
    After the restart the open transaction is still ended by its marker, and the fencing
    rules still hold."""
    create_topic(server.bootstrap, "k", 1)
    with RawClient(server.bootstrap) as c:
        _txn(c, "k", 1, 0, 0, b"aborted")  # 0
        open_first = _txn(c, "k", 2, 4, 0, b"open-1")  # 1
        _txn(c, "k", 3, 1, 0, b"committed")  # 2
        assert write_markers(c, [(1, 0, False, {"k": [0]})], coordinator_epoch=3) == {
            (1, "k", 0): NONE
        }
        assert write_markers(c, [(3, 1, True, {"k": [0]})], coordinator_epoch=3) == {
            (3, "k", 0): NONE
        }
        _txn(c, "k", 2, 4, 1, b"open-2")
        before = _committed_view(c, "k")
        producers = _producers(c, "k")
        uncommitted = read_all(c, "k", 0, READ_UNCOMMITTED).values
    assert before == ([], open_first, [(1, 0)])
    assert producers[2] == (4, 1, -1, open_first)
    server.restart()
    with RawClient(server.bootstrap) as c:
        assert _committed_view(c, "k") == before
        assert _producers(c, "k") == producers
        assert read_all(c, "k", 0, READ_UNCOMMITTED).values == uncommitted
        # Fencing survived: the marker's coordinator epoch and the producers' epochs.
        assert write_markers(c, [(1, 0, True, {"k": [0]})], coordinator_epoch=2) == {
            (1, "k", 0): TRANSACTION_COORDINATOR_FENCED
        }
        r = produce(c, "k", 0, txn_batch([b"zombie"], 2, 3, 2))
        assert r.error_code == INVALID_PRODUCER_EPOCH
        # The sequence continues where it was.
        _txn(c, "k", 2, 4, 2, b"open-3")
        assert write_markers(c, [(2, 4, True, {"k": [0]})], coordinator_epoch=3) == {
            (2, "k", 0): NONE
        }
        values, stable, aborted = _committed_view(c, "k")
        assert values == [b"open-1", b"committed", b"open-2", b"open-3"]
        assert aborted == [(1, 0)]
    server.restart()
    with RawClient(server.bootstrap) as c:
        assert _committed_view(c, "k") == (values, stable, aborted)


def test_retention_below_an_open_transaction(tmp_path: Path) -> None:
    """Retention deletes segments below the high watermark whatever transactions they hold
    (as Kafka's): an aborted transaction's entry goes with its data, and an open
    transaction whose first batches are gone pins the LSO at the log start until its
    marker comes; after a SIGKILL the same holds."""
    with serving(tmp_path / "data", log_retention_check_interval_ms=100, **UNVERIFIED) as server:
        # One batch per segment; retention keeps at least 400 bytes.
        _create(server.bootstrap, "r", **{"segment.bytes": "100", "retention.bytes": "400"})
        with RawClient(server.bootstrap) as c:
            _txn(c, "r", 1, 0, 0, b"aborted")
            assert write_markers(c, [(1, 0, False, {"r": [0]})]) == {(1, "r", 0): NONE}
            open_first = _txn(c, "r", 2, 0, 0, b"open")
            for i in range(12):
                r = produce(c, "r", 0, client_batch([(b"k", b"plain-%02d" % i, _now_ms())]), None)
                assert r.error_code == NONE
            start = _wait_log_start_above(c, "r", open_first)
            values, stable, aborted = _committed_view(c, "r")
            assert (values, stable, aborted) == ([], start, [])
            assert write_markers(c, [(2, 0, True, {"r": [0]})]) == {(2, "r", 0): NONE}
            # The marker's segment may let retention move once more: wait until it is done.
            _wait_log_start_above(c, "r", start - 1)
            values, stable, aborted = _committed_view(c, "r")
            assert values and all(v.startswith(b"plain-") for v in values)
            assert aborted == [] and stable == list_offset(c, "r", 0, LATEST, READ_UNCOMMITTED)[1]
        server.restart()
        with RawClient(server.bootstrap) as c:
            assert _committed_view(c, "r") == (values, stable, aborted)


def _wait_log_start_above(client: RawClient, topic: str, offset: int) -> int:
    """The log start once retention moved it above `offset` and then left it alone for a
    second (ten retention checks)."""
    deadline = time.monotonic() + 30
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        start = list_offset(client, topic, 0, EARLIEST, READ_UNCOMMITTED)[1]
        if start != last:
            last, since = start, time.monotonic()
        elif start > offset and time.monotonic() - since >= 1:
            return start
        time.sleep(0.1)
    raise AssertionError("retention never moved the log start")


def test_compaction_keeps_aborted_records_hidden_and_committed_ones(tmp_path: Path) -> None:
    """A compacted topic with an aborted and a committed transaction and an open one: the
    cleaner (every 100 ms) drops superseded plain records and the aborted record (Kafka's
    cleaner), never cleans past the open transaction (a1 stays while k3, of its key, is
    open; it goes once k3 commits), never makes the aborted record visible to
    read_committed readers nor loses a committed one; across a SIGKILL the same."""
    with serving(tmp_path / "data", log_cleaner_interval_ms=100, **UNVERIFIED) as server:
        # Any dirty segment makes the log due: a pass that ran early must not leave the
        # later segments below the dirty ratio.
        _create(
            server.bootstrap,
            "c",
            **{
                "cleanup.policy": "compact",
                "segment.bytes": "100",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        with RawClient(server.bootstrap) as c:

            def plain(key: bytes, value: bytes) -> None:
                r = produce(c, "c", 0, client_batch([(key, value, _now_ms())]), None)
                assert r.error_code == NONE

            plain(b"K", b"a1")  # 0
            r = produce(c, "c", 0, txn_batch([b"a2"], 1, 0, 0, keys=[b"K"]))  # 1
            assert r.error_code == NONE
            assert write_markers(c, [(1, 0, False, {"c": [0]})]) == {(1, "c", 0): NONE}  # 2
            r = produce(c, "c", 0, txn_batch([b"j1"], 2, 0, 0, keys=[b"J"]))  # 3
            assert r.error_code == NONE
            assert write_markers(c, [(2, 0, True, {"c": [0]})]) == {(2, "c", 0): NONE}  # 4
            plain(b"L", b"l1")  # 5
            plain(b"L", b"l2")  # 6
            r = produce(c, "c", 0, txn_batch([b"k3"], 3, 0, 0, keys=[b"K"]))  # 7
            assert r.error_code == NONE
            plain(b"M", b"m")  # 8
            plain(b"N", b"n")  # 9: the active segment
            _wait_cleaned(c, "c", b"l1")
            values, stable, aborted = _committed_view(c, "c")
            assert (values, stable, aborted) == ([b"a1", b"j1", b"l2"], 7, [(1, 1)])
            assert write_markers(c, [(3, 0, True, {"c": [0]})]) == {(3, "c", 0): NONE}
            # k3 committed supersedes a1 (same key): the next pass drops it, as Kafka's.
            _wait_cleaned(c, "c", b"a1")
            expected = [b"j1", b"l2", b"k3", b"m", b"n"]
            assert read_all(c, "c", 0, READ_COMMITTED).values == expected
            # Kafka's cleaner: the aborted record went (its ABORT marker stays, with the
            # index entry, for readers that fetched the record before it went).
            assert b"a2" not in read_all(c, "c", 0, READ_UNCOMMITTED).values
            assert _committed_view(c, "c")[2] == [(1, 1)]
        server.restart()
        with RawClient(server.bootstrap) as c:
            assert read_all(c, "c", 0, READ_COMMITTED).values == expected
            # Rebuilt from the compacted log: no record of the aborted transaction is left
            # to hide, so its marker makes no index entry.
            assert _committed_view(c, "c")[2] == []
            assert b"a2" not in read_all(c, "c", 0, READ_UNCOMMITTED).values


def _wait_cleaned(client: RawClient, topic: str, gone: bytes) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if gone not in read_all(client, topic, 0, READ_UNCOMMITTED).values:
            return
        time.sleep(0.1)
    raise AssertionError("the cleaner never ran")


def test_a_damaged_abort_marker_never_shows_the_aborted_records(tmp_path: Path) -> None:
    """Flipped bytes in an ABORT marker of a stopped server: the marker fails its checks and
    is removed at start (reported by the log's name), so its transaction reads as still
    open: the last stable offset stays at its first offset and read_committed readers get
    nothing past it (never the aborted record); a marker sent again (the coordinator's
    recovery, or an admin's abort) ends it and the committed data after it shows."""
    with serving(tmp_path / "data", **UNVERIFIED) as server:
        create_topic(server.bootstrap, "d", 1)
        with RawClient(server.bootstrap) as c:
            _txn(c, "d", 1, 0, 0, b"secret")  # 0
            assert write_markers(c, [(1, 0, False, {"d": [0]})]) == {(1, "d", 0): NONE}  # 1
            _txn(c, "d", 2, 0, 0, b"kept")  # 2
            assert write_markers(c, [(2, 0, True, {"d": [0]})]) == {(2, "d", 0): NONE}  # 3
            assert read_all(c, "d", 0, READ_COMMITTED).values == [b"kept"]
        assert server.terminate() == 0
        (segment,) = (tmp_path / "data" / "topics" / "d-0").glob("*.log")
        data = bytearray(segment.read_bytes())
        marker_at = int.from_bytes(data[8:12], "big") + 12  # the batch after the first
        assert int.from_bytes(data[marker_at : marker_at + 8], "big") == 1
        data[marker_at + 70] ^= 0xFF  # inside the marker's record (the CRC covers it)
        segment.write_bytes(bytes(data))
        server.start()
        with RawClient(server.bootstrap) as c:
            assert list_offset(c, "d", 0, LATEST, READ_COMMITTED) == (NONE, 0)
            assert read_all(c, "d", 0, READ_COMMITTED).values == []
            assert read_all(c, "d", 0, READ_UNCOMMITTED).values == [b"secret", b"kept"]
            assert any("log damaged" in line and "d-0" in line for line in _log(server))
            assert write_markers(c, [(1, 0, False, {"d": [0]})]) == {(1, "d", 0): NONE}
            assert read_all(c, "d", 0, READ_COMMITTED).values == [b"kept"]


def _log(server: ServerProcess) -> list[str]:
    return server.log_tail(400).splitlines()

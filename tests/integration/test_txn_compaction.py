"""Compaction of transactional data, as Kafka's log cleaner does it (storage/txn_cleaning.py),
and of the transaction state log.

A compacted data topic: the records of an aborted transaction go; committed transactional
records are compacted like any record; a marker goes once a pass found none of its
transaction's records and delete.retention.ms passed after that (two passes), unless it is
its producer's latest batch; never past an open transaction. read_committed and
read_uncommitted readers see the right records throughout, the log shrinks, and a SIGKILL
and restart change nothing (a second transaction of a producer whose ABORT marker went
still commits and shows). The __transaction_state log: finished transactional ids expire
(transactional.id.expiration.ms), their tombstones and older records are compacted away,
the log shrinks, and after a SIGKILL the live ids are intact and the expired ones gone."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient, ResourceType

from groupcoord.protocol.batches import parse_header
from groupcoord.protocol.control_batches import marker_of
from groupcoord.protocol.errors import ErrorCode
from tests.integration.test_topic_configs import alter
from tests.integration.test_txn_coordinator import add_partitions as add_txn_partitions
from tests.integration.test_txn_coordinator import describe, end_txn, init_pid, wait_state
from tests.integration.test_txn_data_plane import UNVERIFIED, _create, _now_ms
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    fetch,
    list_offset,
    produce,
    read_all,
    txn_batch,
    write_markers,
)
from tests.rawclient import RawClient
from tests.support import ServerProcess, client_batch, serving

E = ErrorCode
NONE = 0
LATEST = -1
TOPIC = "c"


def _markers(c: RawClient) -> list[tuple[int, int, bool]]:
    """(offset, producer id, commit) of every marker in the partition's raw log."""
    found: list[tuple[int, int, bool]] = []
    offset = list_offset(c, TOPIC, 0, -2, READ_UNCOMMITTED)[1]
    while True:
        data = fetch(c, TOPIC, 0, offset, READ_UNCOMMITTED).records or b""
        if not data:
            return found
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            batch = data[pos : pos + header.size_bytes]
            pos += header.size_bytes
            offset = header.last_offset + 1
            if header.is_control:
                marker = marker_of(batch)
                assert marker is not None
                found.append((header.base_offset, header.producer_id, marker[0]))


def _log_bytes(server: ServerProcess, name: str, below: int) -> int:
    """Bytes of the segments based below offset `below`."""
    return sum(
        f.stat().st_size
        for f in (server.data_dir / "topics" / name).glob("*.log")
        if int(f.name.split(".")[0]) < below
    )


def _until(c: RawClient, what: str, done: Callable[[], bool], timeout_s: float = 90) -> None:
    """Plain filler records (one key, so they compact away) until `done()`: every produce
    closes a segment (segment.bytes=100), which makes the log due for another pass."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, what
        r = produce(c, TOPIC, 0, client_batch([(b"F", b"filler", _now_ms())]), None)
        assert r.error_code == NONE
        time.sleep(0.1)


def _committed(c: RawClient) -> list[bytes]:
    return [v for v in read_all(c, TOPIC, 0, READ_COMMITTED).values if v != b"filler"]


def _uncommitted(c: RawClient) -> list[bytes]:
    return [v for v in read_all(c, TOPIC, 0, READ_UNCOMMITTED).values if v != b"filler"]


def test_compaction_removes_aborted_records_then_markers(tmp_path: Path) -> None:
    with serving(tmp_path / "data", log_cleaner_interval_ms=100, **UNVERIFIED) as server:
        # Written first as a plain topic, then compacted: the cleaner starts on a known log.
        _create(
            server.bootstrap,
            TOPIC,
            **{
                "cleanup.policy": "delete",
                "segment.bytes": "100",
                "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "1000",
            },
        )
        with RawClient(server.bootstrap) as c:

            def plain(key: bytes, value: bytes) -> None:
                r = produce(c, TOPIC, 0, client_batch([(key, value, _now_ms())]), None)
                assert r.error_code == NONE

            def txn(pid: int, seq: int, keys: list[bytes], values: list[bytes]) -> None:
                r = produce(c, TOPIC, 0, txn_batch(values, pid, 0, seq, keys=keys))
                assert r.error_code == NONE

            def marker(pid: int, commit: bool) -> None:
                assert write_markers(c, [(pid, 0, commit, {TOPIC: [0]})]) == {(pid, TOPIC, 0): NONE}

            plain(b"K", b"a1")  # 0
            txn(1, 0, [b"K", b"A"], [b"a2", b"x2"])  # 1-2 aborted
            marker(1, False)  # 3
            txn(2, 0, [b"K", b"J"], [b"k2", b"j1"])  # 4-5 committed
            marker(2, True)  # 6
            plain(b"K", b"k3")  # 7: supersedes k2, j1 stays
            txn(4, 0, [b"L"], [b"l1"])  # 8 committed
            marker(4, True)  # 9
            plain(b"L", b"l2")  # 10: supersedes l1, the transaction has no record left
            txn(1, 2, [b"P"], [b"p1"])  # 11: producer 1 again, its ABORT is not its last
            marker(1, True)  # 12
            txn(4, 1, [b"Q"], [b"q1"])  # 13
            marker(4, True)  # 14
            txn(5, 0, [b"O"], [b"open"])  # 15: open: nothing from here on is cleaned
            assert _markers(c) == [
                (3, 1, False),
                (6, 2, True),
                (9, 4, True),
                (12, 1, True),
                (14, 4, True),
            ]
            every = [b"a1", b"a2", b"x2", b"k2", b"j1", b"k3", b"l1", b"l2", b"p1", b"q1"]
            assert _uncommitted(c) == [*every, b"open"]
            size_before = _log_bytes(server, f"{TOPIC}-0", 15)
            admin = AdminClient({"bootstrap.servers": server.bootstrap})
            alter(admin, ResourceType.TOPIC, TOPIC, ("cleanup.policy", "compact"))

            # The aborted records and the superseded ones go in the first passes ...
            _until(c, "aborted records removed", lambda: b"a2" not in _uncommitted(c))
            _until(c, "superseded records removed", lambda: b"l1" not in _uncommitted(c))
            # ... and the markers of transactions with no record left go two passes and
            # delete.retention.ms later; the one whose j1 stays, and each producer's
            # latest, stay.
            _until(c, "markers removed", lambda: len(_markers(c)) == 3)
            assert _markers(c) == [(6, 2, True), (12, 1, True), (14, 4, True)]
            committed = [b"j1", b"k3", b"l2", b"p1", b"q1"]
            assert _committed(c) == committed
            assert _uncommitted(c) == [*committed, b"open"]
            assert list_offset(c, TOPIC, 0, LATEST, READ_COMMITTED)[1] == 15  # the open one
            # Nothing is listed as aborted any more: its marker went, and so did the entry.
            start = list_offset(c, TOPIC, 0, -2, READ_COMMITTED)[1]
            assert list(fetch(c, TOPIC, 0, start, READ_COMMITTED).aborted_transactions) == []
            # Below the open transaction (the fillers come after it, never cleaned).
            assert _log_bytes(server, f"{TOPIC}-0", 15) < size_before

        server.kill()
        server.start()
        with RawClient(server.bootstrap) as c:
            assert _committed(c) == committed
            assert _uncommitted(c) == [*committed, b"open"]
            assert _markers(c) == [(6, 2, True), (12, 1, True), (14, 4, True)]
            assert list_offset(c, TOPIC, 0, LATEST, READ_COMMITTED)[1] == 15
            # The producers go on after the restart: the open one commits, producer 1
            # (whose aborted transaction left nothing) aborts another.
            assert write_markers(c, [(5, 0, True, {TOPIC: [0]})]) == {(5, TOPIC, 0): NONE}
            r = produce(c, TOPIC, 0, txn_batch([b"gone"], 1, 0, 3, keys=[b"G"]))
            assert r.error_code == NONE
            assert write_markers(c, [(1, 0, False, {TOPIC: [0]})]) == {(1, TOPIC, 0): NONE}
            assert _committed(c) == [*committed, b"open"]
            assert b"gone" in _uncommitted(c)
            _until(c, "the new aborted record removed", lambda: b"gone" not in _uncommitted(c))
            assert _committed(c) == [*committed, b"open"]


def _txn_state_bytes(server: ServerProcess) -> int:
    return sum(f.stat().st_size for f in server.data_dir.glob("__transaction_state-*/*.log"))


def test_transaction_state_log_is_compacted(tmp_path: Path) -> None:
    """Finished transactional ids expire and compaction takes their records away: the
    __transaction_state log shrinks; a live id survives it and a SIGKILL."""
    settings = {
        "transaction_state_partitions": 1,
        "transaction_state_segment_bytes": 2048,
        "transactional_id_expiration_ms": 2000,
        "transaction_expiration_interval_ms": 100,
        "offsets_compaction_interval_ms": 200,
        "offsets_tombstone_retention_ms": 0,
    }
    with serving(tmp_path / "data", **settings) as server:
        _create(server.bootstrap, "d")
        with RawClient(server.bootstrap) as c:
            for n in range(60):  # each id: Empty, Ongoing, PrepareCommit, CompleteCommit
                txn_id = f"done-{n}"
                r = init_pid(c, txn_id)
                pid, epoch = r.producer_id, r.producer_epoch
                assert add_txn_partitions(c, txn_id, pid, epoch, {"d": [0]}) == {("d", 0): E.NONE}
                assert end_txn(c, txn_id, pid, epoch, True) == E.NONE
            wait_state(c, "done-59", "CompleteCommit")
            peak = _txn_state_bytes(server)
            deadline = time.monotonic() + 90
            r = init_pid(c, "live")
            live = (r.producer_id, r.producer_epoch)
            while True:
                # A live id, kept alive by its transactions, while the others expire.
                assert add_txn_partitions(c, "live", *live, {"d": [0]}) == {("d", 0): E.NONE}
                assert end_txn(c, "live", *live, True) == E.NONE
                wait_state(c, "live", "CompleteCommit")
                # Every finished id expired, not only the first: on a loaded machine the last
                # one finished seconds after it (a CI run restarted before it expired).
                gone = all(
                    d.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
                    for d in describe(c, *(f"done-{n}" for n in range(60)))
                )
                if gone and _txn_state_bytes(server) < peak // 4:
                    break
                assert time.monotonic() < deadline, (_txn_state_bytes(server), peak)
                time.sleep(0.2)
        server.kill()
        server.start()
        with RawClient(server.bootstrap) as c:
            deadline = time.monotonic() + 30
            while (got := describe(c, "live")[0]).error_code != E.NONE:
                assert time.monotonic() < deadline, got
                time.sleep(0.05)
            assert (got.producer_id, got.producer_epoch) == live
            assert got.transaction_state == "CompleteCommit"
            assert all(
                d.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
                for d in describe(c, *(f"done-{n}" for n in range(60)))
            )
            r = init_pid(c, "done-7")  # an expired id starts afresh
            assert (r.error_code, r.producer_epoch) == (0, 0)

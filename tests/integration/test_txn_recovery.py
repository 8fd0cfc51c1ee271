"""SIGKILL of the real server at two certain points of a transaction's completion, then
recovery: after the PrepareCommit/PrepareAbort record is durable but before any marker, and
after the first partition's marker but before the second's. The points are made certain by
the marker router's test hook (GROUPCOORD_TEST_MARKER_PAUSE_MS, server/txn_markers.py): the
router pauses before its first marker and after it, and the test watches the pause from
outside (DescribeTransactions in PrepareCommit, the first partition's last stable offset
moved by its marker, the second's not) before it kills. The restarted server (without the
hook) completes the transaction: every partition holds exactly one marker for it, counted
in the raw log, read_committed readers see exactly the committed records, the last stable
offsets reach the high watermarks; a second SIGKILL changes none of that."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.coordinator.server.txn_markers import TEST_MARKER_PAUSE_ENV
from groupcoord.protocol.batches import parse_header
from groupcoord.protocol.control_batches import marker_of
from groupcoord.protocol.errors import ErrorCode
from tests.integration.test_clients import create_topic
from tests.integration.test_txn_coordinator import add_partitions as add_txn_partitions
from tests.integration.test_txn_coordinator import describe, end_txn, init_pid, wait_state
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    fetch,
    list_offset,
    produce,
    read_all,
    txn_batch,
)
from tests.rawclient import RawClient
from tests.support import ServerProcess, serving

E = ErrorCode
LATEST = -1
TOPIC = "t"
VALUES = {0: [b"p0-a", b"p0-b", b"p0-c"], 1: [b"p1-a", b"p1-b"]}
# Long enough that the router never reaches its next step while the test looks.
PAUSE_MS = 600_000


@pytest.fixture
def paused_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kill_at: str
) -> Iterator[ServerProcess]:
    """The server with the router's pause before the first marker (kill_at "prepared") or
    after it ("first_marker")."""
    pauses = f"{PAUSE_MS},0" if kill_at == "prepared" else f"0,{PAUSE_MS}"
    monkeypatch.setenv(TEST_MARKER_PAUSE_ENV, pauses)
    with serving(tmp_path / "data") as server:
        monkeypatch.delenv(TEST_MARKER_PAUSE_ENV)  # restarts run without the hook
        yield server


def _markers(c: RawClient, partition: int, producer_id: int) -> list[bool]:
    """The markers (True: COMMIT) of `producer_id` in the partition's raw log, in order."""
    found: list[bool] = []
    offset = 0
    while True:
        answer = fetch(c, TOPIC, partition, offset, READ_UNCOMMITTED)
        assert answer.error_code == 0, answer
        data = answer.records or b""
        if not data:
            return found
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            batch = data[pos : pos + header.size_bytes]
            pos += header.size_bytes
            offset = header.last_offset + 1
            if header.is_control and header.producer_id == producer_id:
                marker = marker_of(batch)
                assert marker is not None
                found.append(marker[0])


def _stable(c: RawClient, partition: int) -> int:
    return list_offset(c, TOPIC, partition, LATEST, READ_COMMITTED)[1]


def _wait(what: str, check: object, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize("kill_at", ["prepared", "first_marker"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_sigkill_while_completing_a_transaction(
    paused_server: ServerProcess, commit: bool, kill_at: str
) -> None:
    server = paused_server
    create_topic(server.bootstrap, TOPIC, 2)
    prepared = "PrepareCommit" if commit else "PrepareAbort"
    with RawClient(server.bootstrap) as c:
        r = init_pid(c, "tx")
        pid, epoch = r.producer_id, r.producer_epoch
        assert add_txn_partitions(c, "tx", pid, epoch, {TOPIC: [0, 1]}) == {
            (TOPIC, 0): E.NONE,
            (TOPIC, 1): E.NONE,
        }
        for p, values in VALUES.items():
            assert produce(c, TOPIC, p, txn_batch(values, pid, epoch, 0), "tx").error_code == 0
        assert end_txn(c, "tx", pid, epoch, commit) == E.NONE
        assert describe(c, "tx")[0].transaction_state == prepared
        if kill_at == "first_marker":
            # The first marker's write moves partition 0's stable offset past it.
            _wait("the first marker", lambda: _stable(c, 0) == len(VALUES[0]) + 1)
        assert describe(c, "tx")[0].transaction_state == prepared
        assert _markers(c, 0, pid) == ([commit] if kill_at == "first_marker" else [])
        assert _markers(c, 1, pid) == []
        assert _stable(c, 1) == 0
    server.kill()
    for round_ in range(2):  # recovery, then a SIGKILL after it: nothing written twice
        server.start()
        with RawClient(server.bootstrap) as c:
            done = wait_state(c, "tx", "CompleteCommit" if commit else "CompleteAbort", 60)
            assert (done.producer_id, done.producer_epoch) == (pid, epoch)
            for p, values in VALUES.items():
                assert _markers(c, p, pid) == [commit], p
                end = len(values) + 1
                assert _stable(c, p) == end
                assert list_offset(c, TOPIC, p, LATEST, READ_UNCOMMITTED)[1] == end
                assert read_all(c, TOPIC, p, READ_COMMITTED).values == (values if commit else [])
                assert read_all(c, TOPIC, p, READ_UNCOMMITTED).values == values
            if round_ == 1:  # the producer goes on: a new epoch, nothing left open
                bumped = init_pid(c, "tx")
                assert (bumped.error_code, bumped.producer_epoch) == (0, epoch + 1)
        server.kill()

"""SIGKILL of the real server at two certain points of a transaction's completion, then
recovery: after the PrepareCommit/PrepareAbort record is durable but before any marker, and
after the first partition's marker but before the others'. The points are made certain by
the marker router's test hook (GROUPCOORD_TEST_MARKER_PAUSE_MS, server/txn_markers.py): the
router pauses before its first marker or after it (offsets partitions come first, then data
partitions in order), and the test watches the pause from outside (DescribeTransactions in
PrepareCommit; the first partition's marker in its log: a data partition's last stable
offset moved by it, or the control batch in the offsets shard's log; the other partitions
without one) before it kills. The restarted server (without the hook) completes the
transaction: every partition, the offsets shard's included, holds exactly one marker for
it, counted in the raw logs; read_committed readers see exactly the committed records and
OffsetFetch the committed offset (nothing for an abort); the last stable offsets reach the
high watermarks; a second SIGKILL changes none of that."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from groupcoord.coordinator.server.txn_markers import TEST_MARKER_PAUSE_ENV
from groupcoord.protocol.batches import parse_header
from groupcoord.protocol.control_batches import marker_of
from groupcoord.protocol.errors import ErrorCode
from tests.integration.test_clients import create_topic
from tests.integration.test_txn_coordinator import (
    _offsets_partition,
    add_offsets,
    describe,
    end_txn,
    init_pid,
    wait_state,
)
from tests.integration.test_txn_coordinator import add_partitions as add_txn_partitions
from tests.integration.test_txn_offsets_raw import fetch as offset_fetch
from tests.integration.test_txn_offsets_raw import txn_commit
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
TOPIC = "t"  # txn_commit's offsets are for topic "t" too
GROUP = "g"
VALUES = {0: [b"p0-a", b"p0-b", b"p0-c"], 1: [b"p1-a", b"p1-b"]}
# Long enough that the router never reaches its next step while the test looks.
PAUSE_MS = 600_000
# (where the kill comes, whether the transaction holds offsets: then the first marker is
# the offsets shard's, else partition 0's)
CASES = [("prepared", False), ("first_marker", False), ("first_marker", True)]


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


def _batch_markers(data: bytes, producer_id: int) -> Iterator[tuple[int, bool]]:
    """(offset, commit) of the whole marker batches of `producer_id` in `data`."""
    pos = 0
    while pos + 61 <= len(data):
        header = parse_header(data, pos)
        if pos + header.size_bytes > len(data):
            return  # a batch still being written
        batch = data[pos : pos + header.size_bytes]
        pos += header.size_bytes
        if header.is_control and header.producer_id == producer_id:
            marker = marker_of(batch)
            assert marker is not None
            yield header.base_offset, marker[0]


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
        for _, commit in _batch_markers(data, producer_id):
            found.append(commit)
        offset = parse_last_offset(data) + 1


def parse_last_offset(data: bytes) -> int:
    pos = last = 0
    while pos < len(data):
        header = parse_header(data, pos)
        pos += header.size_bytes
        last = header.last_offset
    return last


def _offsets_markers(server: ServerProcess, producer_id: int) -> list[bool]:
    """The markers of `producer_id` in the offsets shard's log files of the group."""
    shard = server.data_dir / f"__consumer_offsets-{_offsets_partition(GROUP)}"
    found: list[tuple[int, bool]] = []
    for segment in sorted(shard.glob("*.log")):
        found.extend(_batch_markers(segment.read_bytes(), producer_id))
    return [commit for _, commit in sorted(found)]


def _stable(c: RawClient, partition: int) -> int:
    return list_offset(c, TOPIC, partition, LATEST, READ_COMMITTED)[1]


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.parametrize(("kill_at", "with_offsets"), CASES)
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_sigkill_while_completing_a_transaction(
    paused_server: ServerProcess, commit: bool, kill_at: str, with_offsets: bool
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
        if with_offsets:
            assert add_offsets(c, "tx", pid, epoch, GROUP) == E.NONE
            offsets = {(TOPIC, 0): 3}
            assert txn_commit(c, GROUP, offsets, producer_id=pid, producer_epoch=epoch) == {
                (TOPIC, 0): 0
            }
        assert end_txn(c, "tx", pid, epoch, commit) == E.NONE
        assert describe(c, "tx")[0].transaction_state == prepared
        data_marked = kill_at == "first_marker" and not with_offsets
        if kill_at == "first_marker":
            if with_offsets:
                _wait("the offsets marker", lambda: _offsets_markers(server, pid) == [commit])
            else:  # the first marker's write moves partition 0's stable offset past it
                _wait("the first marker", lambda: _stable(c, 0) == len(VALUES[0]) + 1)
        assert describe(c, "tx")[0].transaction_state == prepared
        assert _markers(c, 0, pid) == ([commit] if data_marked else [])
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
            if with_offsets:
                assert _offsets_markers(server, pid) == [commit]
                committed = (3, 0) if commit else (-1, 0)
                assert offset_fetch(c, GROUP, [0], True) == (0, {0: committed})
            if round_ == 1:  # the producer goes on: a new epoch, nothing left open
                bumped = init_pid(c, "tx")
                assert (bumped.error_code, bumped.producer_epoch) == (0, epoch + 1)
        server.kill()

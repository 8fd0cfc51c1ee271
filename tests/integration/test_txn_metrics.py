"""The transaction metrics in /metrics, driven over the wire with a raw client: each
counter moves exactly with the transactions that should move it (started, committed,
aborted, timed out), the open gauge follows a transaction from its first partition to its
completion, the completion histogram counts one observation per completed transaction by
result, and a marker write refused by a partition (a producer epoch above the
transaction's, set there by an earlier WriteTxnMarkers) counts as a marker error."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from groupcoord.protocol.errors import ErrorCode
from tests.integration.test_clients import create_topic
from tests.integration.test_txn_coordinator import (
    add_partitions,
    end_txn,
    init_pid,
    wait_state,
)
from tests.integration.txn_support import produce, txn_batch, write_markers
from tests.rawclient import RawClient
from tests.support import ServerProcess, serving

E = ErrorCode


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", transaction_abort_interval_ms=100) as proc:
        yield proc


def _samples(server: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(server.metrics_text())
        for s in family.samples
    }


def _txn_figures(server: ServerProcess) -> dict[str, float]:
    samples = _samples(server)

    def one(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    return {
        "started": one("groupcoord_transactions_started_total"),
        "committed": one("groupcoord_transactions_committed_total"),
        "aborted": one("groupcoord_transactions_aborted_total"),
        "timed_out": one("groupcoord_transactions_timed_out_total"),
        "open": one("groupcoord_transactions_open"),
        "commit_times": one("groupcoord_transaction_completion_seconds_count", result="commit"),
        "abort_times": one("groupcoord_transaction_completion_seconds_count", result="abort"),
        "epoch_errors": one(
            "groupcoord_transaction_marker_errors_total", error="INVALID_PRODUCER_EPOCH"
        ),
    }


def _expect(server: ServerProcess, **changed: float) -> None:
    """Every figure is 0 except `changed`."""
    expected = dict.fromkeys(_txn_figures(server), 0.0) | changed
    assert _txn_figures(server) == expected


def test_transaction_metrics_follow_the_transactions(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "t", 2)
    _expect(server)
    assert "groupcoord_transactions_open" in server.metrics_text()
    with RawClient(server.bootstrap) as c:
        r = init_pid(c, "a")
        pid, epoch = r.producer_id, r.producer_epoch
        assert add_partitions(c, "a", pid, epoch, {"t": [0]}) == {("t", 0): E.NONE}
        _expect(server, started=1, open=1)
        assert produce(c, "t", 0, txn_batch([b"x"], pid, epoch, 0), "a").error_code == 0
        assert end_txn(c, "a", pid, epoch, True) == E.NONE
        wait_state(c, "a", "CompleteCommit")
        _expect(server, started=1, committed=1, commit_times=1)

        # The same producer again: a second transaction, aborted.
        assert add_partitions(c, "a", pid, epoch, {"t": [0]}) == {("t", 0): E.NONE}
        _expect(server, started=2, committed=1, commit_times=1, open=1)
        assert end_txn(c, "a", pid, epoch, False) == E.NONE
        wait_state(c, "a", "CompleteAbort")
        _expect(server, started=2, committed=1, aborted=1, commit_times=1, abort_times=1)

        # One past its timeout: the coordinator aborts it.
        r = init_pid(c, "b", timeout_ms=300)
        assert add_partitions(c, "b", r.producer_id, 0, {"t": [1]}) == {("t", 1): E.NONE}
        wait_state(c, "b", "CompleteAbort")
        done = dict(started=3, committed=1, aborted=2, timed_out=1, commit_times=1, abort_times=2)
        _expect(server, **done)

        # A partition that saw a later epoch of the producer refuses the marker: counted,
        # and the transaction stays prepared (open).
        r = init_pid(c, "c")
        pid, epoch = r.producer_id, r.producer_epoch
        assert write_markers(c, [(pid, epoch + 5, False, {"t": [1]})]) == {(pid, "t", 1): 0}
        assert add_partitions(c, "c", pid, epoch, {"t": [1]}) == {("t", 1): E.NONE}
        assert end_txn(c, "c", pid, epoch, True) == E.NONE
        wait_state(c, "c", "PrepareCommit")
        done["started"] += 1
        _wait_for(server, "epoch_errors")
        _expect(server, **done, open=1, epoch_errors=1)


def _wait_for(server: ServerProcess, figure: str) -> None:
    deadline = time.monotonic() + 30
    while _txn_figures(server)[figure] == 0:
        assert time.monotonic() < deadline, figure
        time.sleep(0.05)

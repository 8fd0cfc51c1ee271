"""Transaction coordinator metrics: outcome counters and the open-transaction gauge read
from the coordinator at scrape time (transactions/counters.py, nothing on the request
path), and what the marker router observes: the time from a transaction's Prepare record
being durable (EndTxn answered) to its Complete record being durable, and the marker
writes that failed, by error."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..transactions.counters import TxnCounters
from .metrics import LATENCY_BUCKETS_S


class _TxnCollector(Collector):
    def __init__(self, counters: TxnCounters, open_transactions: Callable[[], int]) -> None:
        self.counters = counters
        self.open_transactions = open_transactions

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        c = self.counters
        yield CounterMetricFamily(
            "groupcoord_transactions_started",
            "Transactions started (the first AddPartitionsToTxn or AddOffsetsToTxn)",
            value=c.started,
        )
        yield CounterMetricFamily(
            "groupcoord_transactions_committed",
            "Transactions completed by a commit (CompleteCommit written)",
            value=c.committed,
        )
        yield CounterMetricFamily(
            "groupcoord_transactions_aborted",
            "Transactions completed by an abort (CompleteAbort written), timed out included",
            value=c.aborted,
        )
        yield CounterMetricFamily(
            "groupcoord_transactions_timed_out",
            "Transactions the coordinator aborted because they outlived their timeout",
            value=c.timed_out,
        )
        yield GaugeMetricFamily(
            "groupcoord_transactions_open",
            "Transactions started and not completed (Ongoing, PrepareCommit, PrepareAbort)",
            value=self.open_transactions(),
        )


class TxnMetrics:
    """Registers the transaction metrics on `registry`; `counters` and
    `open_transactions()`: the coordinator's (TxnCoordinatorService)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        counters: TxnCounters,
        open_transactions: Callable[[], int],
    ) -> None:
        registry.register(_TxnCollector(counters, open_transactions))
        self.completion = Histogram(
            "groupcoord_transaction_completion_seconds",
            "Time from a transaction's PrepareCommit/PrepareAbort being durable (EndTxn"
            " answered) to its CompleteCommit/CompleteAbort being durable: every marker written",
            ["result"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self.marker_errors = Counter(
            "groupcoord_transaction_marker_errors",
            "Transaction marker writes that failed (each try), by error; retried unless the"
            " error fences the marker",
            ["error"],
            registry=registry,
        )

    def completed(self, commit: bool, seconds: float) -> None:
        self.completion.labels("commit" if commit else "abort").observe(seconds)

    def marker_failed(self, error: str) -> None:
        self.marker_errors.labels(error).inc()


__all__ = ["TxnMetrics"]

"""Counts of transaction outcomes, for the server's metrics (observability/txn_metrics.py).

One TxnCounters is shared by every shard of the transaction coordinator and outlives the
shards' reloads, so the counters only grow. The shards count what their handlers decide:
a transaction started (AddPartitionsToTxn/AddOffsetsToTxn from Empty or a completed
state), completed (its CompleteCommit/CompleteAbort written), aborted by its timeout. A
write that then fails (the shard reloads) was counted anyway: the counts are for
dashboards, not for accounting.
"""

from __future__ import annotations


class TxnCounters:
    __slots__ = ("started", "committed", "aborted", "timed_out")

    def __init__(self) -> None:
        self.started = 0
        self.committed = 0
        self.aborted = 0
        self.timed_out = 0


__all__ = ["TxnCounters"]

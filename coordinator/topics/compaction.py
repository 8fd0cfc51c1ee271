"""The log cleaner of data topics: compacts the partitions of topics whose cleanup.policy
includes `compact`, as Kafka's LogCleaner does, with the cleaner that compacts the
coordinator's own logs (storage/cleaner.py).

Theory of operation
-------------------
Every `log_cleaner_interval_ms` (Kafka's log.cleaner.backoff.ms) a pass looks at each
partition of each compacted topic and cleans the ones that are due (storage/cleaner.py
`cleanable_range`, Kafka's rule): more than min.cleanable.dirty.ratio of its cleanable
bytes were never cleaned, or a dirty segment's first batch is older than
max.compaction.lag.ms. Cleanable are the closed segments up to the first dirty one holding
a record newer than min.compaction.lag.ms; never the active segment. The latest record of
each key stays at its offset (readers skip the gaps); a tombstone stays for
delete.retention.ms after the pass that first cleans it (KIP-534); the latest batch of each
producer id stays, emptied if need be, so idempotent producers keep their sequence state
across a restart (producers.py rebuilds it from batch headers).

One partition at a time: reading and rewriting its segments (prepare_compaction) runs in a
worker thread while produce and fetch go on; the swap (install_compaction) runs here, on the
event loop, which is the writer thread of every data log, between appends, as the
coordinator's compaction does (runtime/service.py). A plan that the log outran meanwhile
(retention, a deleted topic) is discarded; a crash during the swap leaves the old segments
or the new ones (storage/compaction_swap.py).

serve --cluster: a partition stored in PostgreSQL is compacted by its lease owner, with the
same rules over its rows (cluster/partition_compaction.py); reached through its log's
`*_stored` methods, as Fetch reaches its rows.

Where each log's last pass ended (Kafka's cleaner-offset-checkpoint) is kept in memory
only: after a restart every log counts as wholly dirty, so its first pass cleans it, as
Kafka does without a checkpoint.

Transactional data, as Kafka's cleaner (storage/txn_cleaning.py): a pass cleans only below
the partition's last stable offset (every transaction there is decided) and is given the
partition's aborted-transactions index. Records of aborted transactions go; committed
transactional records are compacted like any other; a marker goes once a pass found no
record of its transaction left, delete.retention.ms after that pass (the delete horizon
stamped on it), unless it is its producer's latest batch. The index entry of an ABORT
marker that goes is dropped with it (here, once the swap is in), and the index rebuilt at
start-up from the compacted log has none for it either.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from groupcoord.storage import (
    CleanableRange,
    CompactionPlan,
    CompactionStats,
    PartitionLog,
    cleanable_range,
    install_compaction,
    prepare_compaction,
)
from groupcoord.storage.log import wall_clock_ms

from ..observability.logging import get_logger
from ..runtime.periodic import run_periodically
from .cleanup_policy import CleanupPolicy

if TYPE_CHECKING:
    from ..config import Config
    from .registry import Partition, TopicRegistry

log = get_logger("groupcoord.cleaner")


class TopicCompactor:
    """Compacts the partitions of compacted topics; see the module docstring."""

    def __init__(
        self,
        topics: TopicRegistry,
        config: Config,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._topics = topics
        self._config = config
        self._clock_ms = clock_ms
        # Where the last pass over a log ended: its first dirty offset. Keyed by the log
        # object, so a re-created topic starts dirty.
        self._cleaned_to: weakref.WeakKeyDictionary[PartitionLog, int] = weakref.WeakKeyDictionary()

    async def run(self, interval_ms: int) -> None:
        """A pass every `interval_ms` until cancelled; a failed pass is logged and the
        next one runs as usual."""
        await run_periodically(interval_ms, self.clean_once, "topics")

    async def clean_once(self) -> int:
        """Clean every due partition of every compacted topic; returns the records
        dropped. A partition whose pass fails is logged and skipped."""
        dropped = 0
        for topic in self._topics.topics():
            policy = CleanupPolicy.of(topic, self._config)
            if not policy.compact:
                continue
            for partition in list(topic.partitions):
                try:
                    stats = await self.clean(partition, policy)
                except Exception as e:
                    if self._registered(partition):  # else its topic was deleted meanwhile
                        log.error(
                            "log compaction failed",
                            topic=topic.name,
                            partition=partition.index,
                            error=repr(e),
                        )
                    continue
                if stats is not None:
                    dropped += stats.records_dropped
        return dropped

    async def clean(self, partition: Partition, policy: CleanupPolicy) -> CompactionStats | None:
        """Clean `partition` when it is due. Returns the pass's stats; None when it was
        not due, its log is failed or closed, or the log changed under the pass. Raises
        what prepare_compaction / install_compaction raise (CompactionError, storage
        errors, OSError); an error during the swap fails the log until a restart."""
        log_ = partition.log
        if log_.closed or log_.failed:
            return None
        if not isinstance(log_, PartitionLog):
            return await self._clean_stored(partition, log_, policy)
        now_ms = self._clock_ms()
        span = cleanable_range(
            log_, self._cleaned_to.get(log_, -1), now_ms, policy.min_lag_ms, policy.max_lag_ms
        )
        if not span.due(policy.min_dirty_ratio):
            return None
        # A snapshot: the worker thread reads it while markers go on being appended.
        aborted = [
            (e.producer_id, e.first_offset, e.last_offset)
            for e in partition.producers.aborted.entries
        ]
        prepare = functools.partial(
            prepare_compaction,
            log_,
            now_ms,
            policy.delete_retention_ms,
            end_offset=min(span.end_offset, partition.last_stable_offset),
            delete_horizon=True,
            aborted_txns=aborted,
        )
        future = asyncio.get_running_loop().run_in_executor(None, prepare)
        try:
            # Shielded: cancelled (shutdown), the worker still finishes, and its plan is
            # discarded then rather than left holding .cleaned files.
            plan = await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(_discard_plan)
            raise
        if log_.closed or not self._registered(partition):
            plan.discard()  # the topic was deleted meanwhile
            return None
        removed_abort_markers = plan.removed_abort_markers
        stats = install_compaction(log_, plan)
        if stats is not None:
            self._cleaned_to[log_] = plan.end_offset
            partition.producers.aborted.remove_markers(removed_abort_markers)
        return stats

    async def _clean_stored(
        self, partition: Partition, log_: Any, policy: CleanupPolicy
    ) -> CompactionStats | None:
        """serve --cluster: a partition stored in PostgreSQL (cluster/partition_compaction.py),
        compacted by its lease owner only (a log whose lease moved is failed: fenced)."""
        now_ms = self._clock_ms()
        span: CleanableRange = await log_.cleanable_range_stored(
            self._cleaned_to.get(log_, -1), now_ms, policy.min_lag_ms, policy.max_lag_ms
        )
        if not span.due(policy.min_dirty_ratio):
            return None
        aborted = [
            (e.producer_id, e.first_offset, e.last_offset)
            for e in partition.producers.aborted.entries
        ]
        done = await log_.compact_stored(
            now_ms,
            policy.delete_retention_ms,
            min(span.end_offset, partition.last_stable_offset),
            aborted,
        )
        self._cleaned_to[log_] = done.end_offset
        partition.producers.aborted.remove_markers(done.removed_abort_markers)
        stats: CompactionStats = done.stats
        return stats

    def _registered(self, partition: Partition) -> bool:
        return self._topics.partition(partition.topic.name, partition.index) is partition


def _discard_plan(future: asyncio.Future[CompactionPlan]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().discard()

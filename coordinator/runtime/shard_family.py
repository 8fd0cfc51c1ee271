"""A family of coordinator shards over logs in the data directory (the group coordinator's
`__consumer_offsets-N`, the transaction coordinator's `__transaction_state-N`): loading at
start-up, routing of a key to its shard (Kafka's abs(hashCode) % partitions), compaction
and closing. service.py and txn_service.py make the runners."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from groupcoord.storage import DataDirError, PartitionLog, install_compaction, prepare_compaction

from ..observability.logging import get_logger
from .log_runner import CoordinatorShardRunner, ShardState
from .partitioning import shard_for
from .periodic import run_periodically

log = get_logger("groupcoord.coordinator")

SHARD_CACHE_MAX = 1_000_000

RunnerT = TypeVar("RunnerT", bound=CoordinatorShardRunner)


class ShardFamily(Generic[RunnerT]):
    """`runners[i]` serves shard i. `logs` names the family in log lines."""

    logs = "shards"

    def __init__(self, runners: list[RunnerT]) -> None:
        self.runners = runners
        self.shard_count = len(runners)
        self._shard_of: dict[str, int] = {}
        self.loaded = asyncio.Event()
        self.load_time_s = 0.0

    def runner_for(self, key: str) -> RunnerT:
        index = self._shard_of.get(key)
        if index is None:
            # Java's String.hashCode in Python is a loop per character: remember the answer
            # (bounded, so a client inventing keys cannot grow it without limit).
            if len(self._shard_of) >= SHARD_CACHE_MAX:
                self._shard_of.clear()
            index = self._shard_of[key] = shard_for(key, self.shard_count)
        return self.runners[index]

    def shard_log(self, index: int) -> PartitionLog | None:
        """Shard `index`'s log as it is now, None while not open (before its first load,
        after close): what the data plane reads as the internal topic's partition `index`
        (topics/internal_topics.py's ShardLogs). A reload replaces it."""
        log_ = self.runners[index].log
        return None if log_ is None or log_.closed else log_

    def disown(self, owns: Callable[[int], bool]) -> None:
        """Mark the shards another node owns (`owns(index)` False) NOT_OWNED: never loaded
        here, their requests answered NOT_COORDINATOR so clients go to the owner."""
        for runner in self.runners:
            if not owns(runner.shard_id):
                runner.state = ShardState.NOT_OWNED

    async def load(self, salvage: bool = False) -> None:
        """Load every shard this node owns (`salvage`: their logs were closed cleanly, the
        runner's load); a shard that fails to load is FAILED, logged, and the others load.
        A shard log whose files disagree with its data raises DataDirError: the server
        refuses to start."""
        started = time.monotonic()
        for runner in self.runners:
            if runner.state is ShardState.NOT_OWNED:
                continue
            try:
                await runner.load(salvage)
            except DataDirError:
                runner.state = ShardState.FAILED
                raise
            except Exception as e:
                runner.state = ShardState.FAILED
                log.error("shard load failed", shard=runner.shard_id, error=repr(e))
        self.load_time_s = time.monotonic() - started
        self.loaded.set()
        log.info(
            f"{self.logs} loaded",
            shards=self.shard_count,
            records=sum(r.loaded_records for r in self.runners),
            **self.loaded_counts(),
            seconds=round(self.load_time_s, 3),
        )

    async def compact(self, tombstone_retention_ms: int) -> int:
        """Compact every active shard's log: the latest record per key survives, tombstones
        for tombstone_retention_ms. The reading and rewriting runs in a worker thread; the
        swap runs here, on the writer's thread. Returns how many records were dropped."""
        loop = asyncio.get_running_loop()
        dropped = 0
        for runner in self.active_runners():
            log_ = runner.log
            if log_ is None or log_.segment_count < 2:
                continue  # only closed segments are cleaned
            now_ms = runner.clock_ms()
            plan = await loop.run_in_executor(
                None, prepare_compaction, log_, now_ms, tombstone_retention_ms
            )
            if runner.log is not log_ or runner.state is not ShardState.ACTIVE:
                plan.discard()  # the shard reloaded meanwhile
                continue
            stats = install_compaction(log_, plan)
            if stats is not None:
                dropped += stats.records_dropped
        return dropped

    async def compaction_loop(self, interval_ms: int, tombstone_retention_ms: int) -> None:
        """Compact the shard logs every `interval_ms` once loaded, until cancelled."""
        await self.loaded.wait()
        await run_periodically(interval_ms, lambda: self.compact(tombstone_retention_ms), self.logs)

    async def close(self) -> None:
        await asyncio.gather(*(r.close() for r in self.runners), return_exceptions=True)

    def queued_events(self) -> Iterator[int]:
        """Each shard's events waiting on its writes (the event queue size metric)."""
        for runner in self.runners:
            yield runner.queued_events()

    def active_runners(self) -> list[RunnerT]:
        return [r for r in self.runners if r.state is ShardState.ACTIVE]

    def loaded_counts(self) -> dict[str, int]:
        """What the "loaded" log line counts besides records."""
        return {}

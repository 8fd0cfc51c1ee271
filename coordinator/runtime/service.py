"""The coordinator service: every shard's runner, loading at start-up, routing of a group
id to its shard, and the shards' settings from the server's. The network layer reaches the
shards only through the gateway (gateway.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

from groupcoord.storage import (
    DataDirError,
    GroupCommitter,
    LogConfig,
    install_compaction,
    prepare_compaction,
)

from ..assignor_plugins import assignor_names, load_assignor_plugins
from ..config import Config
from ..groups.config import GroupConfig, GroupConfigSource, from_server
from ..groups.shard import ShardStats
from ..groups.topics import TopicImage
from ..observability.logging import get_logger
from ..observability.metrics import ServerMetrics
from .partitioning import OFFSETS_TOPIC, shard_for
from .periodic import run_periodically
from .runner import NotActive, ShardRunner, ShardState

log = get_logger("groupcoord.coordinator")

SHARD_CACHE_MAX = 1_000_000


class CoordinatorService:
    def __init__(
        self,
        data_dir: Path,
        shard_count: int,
        group_config: GroupConfig,
        log_config: LogConfig,
        committer: GroupCommitter,
        metrics: ServerMetrics | None = None,
        topics: TopicImage | None = None,
        group_configs: GroupConfigSource | None = None,
    ) -> None:
        self.shard_count = shard_count
        self.group_config = group_config
        self.runners = [
            ShardRunner(
                i,
                data_dir / f"{OFFSETS_TOPIC}-{i}",
                group_config,
                log_config,
                committer,
                metrics=metrics,
                topics=topics,
                group_configs=group_configs,
                groups_total=self.group_count,
            )
            for i in range(shard_count)
        ]
        self._shard_of: dict[str, int] = {}
        self.loaded = asyncio.Event()
        self.load_time_s = 0.0

    def group_count(self) -> int:
        """The groups of every shard (groups_max bounds it)."""
        return sum(runner.shard.group_count() for runner in self.runners)

    def runner_for(self, group_id: str) -> ShardRunner:
        index = self._shard_of.get(group_id)
        if index is None:
            # Java's String.hashCode in Python is a loop per character: remember the answer
            # (bounded, so a client inventing group ids cannot grow it without limit).
            if len(self._shard_of) >= SHARD_CACHE_MAX:
                self._shard_of.clear()
            index = self._shard_of[group_id] = shard_for(group_id, self.shard_count)
        return self.runners[index]

    async def load(self, salvage: bool = False) -> None:
        """Load every shard (`salvage`: their logs were closed cleanly, ShardRunner.load);
        a shard that fails to load is FAILED, logged, and the others load. A shard log whose
        files disagree with its data raises DataDirError: the server refuses to start."""
        started = time.monotonic()
        for runner in self.runners:
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
            "coordinator loaded",
            shards=self.shard_count,
            records=sum(r.loaded_records for r in self.runners),
            groups=sum(r.shard.group_count() for r in self.runners),
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
        await run_periodically(
            interval_ms, lambda: self.compact(tombstone_retention_ms), "coordinator"
        )

    async def close(self) -> None:
        await asyncio.gather(*(r.close() for r in self.runners), return_exceptions=True)

    def active_runners(self) -> list[ShardRunner]:
        return [r for r in self.runners if r.state is ShardState.ACTIVE]

    def shard_stats(self) -> Iterator[tuple[str, ShardStats]]:
        """Each shard's state ("loading", "active", ...) and counts, for the metrics (read at
        scrape time, between events)."""
        for runner in self.runners:
            yield runner.state.value, runner.shard.stats()


def group_config(config: Config) -> GroupConfig:
    """The shards' settings from the server's (the names are groups/config.py's)."""
    return from_server(
        config,
        consumer_assignors=assignor_names(config.group_consumer_assignors),
        consumer_assignor_plugins=load_assignor_plugins(
            assignor_names(config.group_consumer_assignors)
        ),
    )


__all__ = ["CoordinatorService", "NotActive", "OFFSETS_TOPIC", "group_config"]

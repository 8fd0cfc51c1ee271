"""The coordinator service: every shard's runner, loading at start-up, and routing of a
group id to its shard."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from storage import GroupCommitter, LogConfig

from ..groups.config import GroupConfig
from ..groups.result import Result
from ..observability.logging import get_logger
from ..observability.metrics import ServerMetrics
from .partitioning import shard_for
from .runner import NotActive, ShardRunner, ShardState

log = get_logger("groupcoord.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"


class CoordinatorService:
    def __init__(
        self,
        data_dir: Path,
        shard_count: int,
        group_config: GroupConfig,
        log_config: LogConfig,
        committer: GroupCommitter,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self.shard_count = shard_count
        self.runners = [
            ShardRunner(
                i,
                data_dir / f"{OFFSETS_TOPIC}-{i}",
                group_config,
                log_config,
                committer,
                metrics=metrics,
            )
            for i in range(shard_count)
        ]
        self.loaded = asyncio.Event()
        self.load_time_s = 0.0

    def runner_for(self, group_id: str) -> ShardRunner:
        return self.runners[shard_for(group_id, self.shard_count)]

    def run(self, group_id: str, event: Callable[[int], Result]) -> None:
        """Run an event on the group's shard; raises NotActive while it loads or failed."""
        self.runner_for(group_id).run(event)

    async def load(self) -> None:
        started = time.monotonic()
        for runner in self.runners:
            try:
                await runner.load()
            except Exception as e:
                runner.state = ShardState.FAILED
                log.error("shard load failed", shard=runner.shard_id, error=repr(e))
        self.load_time_s = time.monotonic() - started
        self.loaded.set()
        log.info(
            "coordinator loaded",
            shards=self.shard_count,
            records=sum(r.loaded_records for r in self.runners),
            groups=sum(len(r.shard.groups) for r in self.runners),
            seconds=round(self.load_time_s, 3),
        )

    async def close(self) -> None:
        await asyncio.gather(*(r.close() for r in self.runners), return_exceptions=True)

    def active_runners(self) -> list[ShardRunner]:
        return [r for r in self.runners if r.state is ShardState.ACTIVE]


__all__ = ["CoordinatorService", "NotActive", "OFFSETS_TOPIC"]

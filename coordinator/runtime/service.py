"""The coordinator service: every shard's runner, loading at start-up, routing of a group
id to its shard, and the shards' settings from the server's. The network layer reaches the
shards only through the gateway (gateway.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from groupcoord.storage import GroupCommitter, LogConfig

from ..assignor_plugins import assignor_names, load_assignor_plugins
from ..config import Config
from ..groups.config import GroupConfig, GroupConfigSource, from_server
from ..groups.shard import ShardStats
from ..groups.topics import TopicImage
from ..observability.metrics import ServerMetrics
from .group_pages import group_page, group_summaries
from .partitioning import OFFSETS_TOPIC
from .runner import NotActive, ShardRunner, ShardState
from .shard_family import ShardFamily

# Offsets listed for lag between two turns of the loop (~1 us each).
LAG_ROWS = 1000


class CoordinatorService(ShardFamily[ShardRunner]):
    """The group coordinator's shards (`__consumer_offsets-N`)."""

    logs = "coordinator"

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
        self.group_config = group_config
        # Each shard keeps its share of the timelines' events.
        shard_config = dataclasses.replace(
            group_config,
            timeline_events_total=-(-group_config.timeline_events_total // max(shard_count, 1)),
        )
        super().__init__(
            [
                ShardRunner(
                    i,
                    data_dir / f"{OFFSETS_TOPIC}-{i}",
                    shard_config,
                    log_config,
                    committer,
                    metrics=metrics,
                    topics=topics,
                    group_configs=group_configs,
                    groups_total=self.group_count,
                )
                for i in range(shard_count)
            ]
        )

    def group_count(self) -> int:
        """The groups of every shard (groups_max bounds it)."""
        return sum(runner.shard.group_count() for runner in self.runners)

    def loaded_counts(self) -> dict[str, int]:
        return {"groups": sum(r.shard.group_count() for r in self.runners)}

    def timeline(self, group_id: str) -> list[dict[str, Any]] | None:
        """The group's rebalance timeline, oldest first, as the HTTP API serves it; None
        for a group its shard has never seen (or a shard not loaded)."""
        runner = self.runner_for(group_id)
        if runner.state is not ShardState.ACTIVE:
            return None
        events = runner.shard.timeline(group_id)
        if events is None:
            # A group with no events (a simple group, made by commits) is still known.
            return [] if runner.shard.has_group(group_id) else None
        return [event.to_json() for event in events]

    def shard_stats(self) -> Iterator[tuple[str, ShardStats]]:
        """Each shard's state ("loading", "active", ...) and counts, for the metrics (read at
        scrape time, between events)."""
        for runner in self.runners:
            yield runner.state.value, runner.shard.stats()

    def lag_sources(
        self,
    ) -> Iterator[tuple[list[tuple[str, str, int, int, int]], dict[str, int]]]:
        """Per active shard, read between events when the iterator is advanced: its
        committed offsets as (group, topic, partition, offset, commit time in ms), whole
        groups of about LAG_ROWS offsets at a time, and its members per group (with the
        first of them).
        A caller may yield to the loop between two (observability/lag_metrics.py)."""
        for runner in self.runners:
            if runner.state is ShardState.ACTIVE:
                shard = runner.shard
                counts = shard.member_counts()
                for chunk in shard.offsets.committed_chunks(LAG_ROWS):
                    yield chunk, counts
                    counts = {}
                    if runner.state is not ShardState.ACTIVE:
                        break  # unloaded meanwhile: another server's now
                if counts:  # groups without offsets
                    yield [], counts

    def group_summaries(
        self, high_watermark: Callable[[str, int], int | None]
    ) -> Iterator[list[dict[str, Any]]]:
        """Per active shard, read between events when the iterator is advanced: its groups
        with state, protocol, members and lag (runtime/group_pages.py), for the web page's
        list of groups (a caller may yield to the loop between shards)."""
        for runner in self.runners:
            if runner.state is ShardState.ACTIVE:
                yield group_summaries(runner.shard, high_watermark)

    def group_page(self, group_id: str) -> dict[str, Any] | None:
        """The group's members, assignments and committed offsets for the web page
        (runtime/group_pages.py); None for a group not held (or its shard not active)."""
        runner = self.runner_for(group_id)
        if runner.state is not ShardState.ACTIVE:
            return None
        return group_page(runner.shard, group_id)


def group_config(config: Config) -> GroupConfig:
    """The shards' settings from the server's (the names are groups/config.py's)."""
    return from_server(
        config,
        consumer_assignors=assignor_names(config.group_consumer_assignors),
        consumer_assignor_plugins=load_assignor_plugins(
            assignor_names(config.group_consumer_assignors)
        ),
        regex_needs_member_check=config.authorizer_enabled,
    )


__all__ = ["CoordinatorService", "NotActive", "OFFSETS_TOPIC", "group_config"]

"""Handler contexts built from parts, for handler tests without a server: a topic registry on
a temp dir, and a group coordinator of one or two shards (or none at all) behind its
gateway. A handler is called as the connection calls it: `handler(context, request)`."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from groupcoord.coordinator.config import Config, load_config
from groupcoord.coordinator.group_admin import GroupConfigEntry
from groupcoord.coordinator.observability.metrics import ServerMetrics
from groupcoord.coordinator.runtime.gateway import GroupCoordinatorGateway
from groupcoord.coordinator.runtime.service import CoordinatorService, group_config
from groupcoord.coordinator.server.context import GroupContext
from groupcoord.coordinator.server.dispatch import build_dispatch
from groupcoord.coordinator.server.group_configs import GroupConfigStore
from groupcoord.coordinator.topics.context import HandlerContext, Node
from groupcoord.coordinator.topics.registry import TopicRegistry
from groupcoord.storage import GroupCommitter, LogConfig

CLUSTER_ID = "test-cluster-id"
SUPPORTED_VERSIONS = build_dispatch()[1]


def settings(data_dir: Path, **overrides: Any) -> Config:
    """The server's settings on `data_dir`, with `overrides`."""
    return load_config(
        overrides={"data_dir": str(data_dir), "metrics_listen": "", **overrides}, environ={}
    )


class NoGroupCoordinator:
    """The door of a context with no group coordinator: any use fails the test."""

    def topics_deleted(self, topics: Any) -> None:
        raise AssertionError("no group coordinator here")

    def group_configs(self, group_id: str) -> list[GroupConfigEntry]:
        raise AssertionError("no group coordinator here")

    def group_config_overrides(self, group_id: str) -> dict[str, str]:
        raise AssertionError("no group coordinator here")

    def alter_group_configs(self, group_id: str, overrides: Any, validate_only: bool) -> None:
        raise AssertionError("no group coordinator here")


def _spawn(coro: Coroutine[Any, Any, Any]) -> None:
    asyncio.ensure_future(coro)


def handler_context(config: Config, groups: Any, committer: GroupCommitter | None = None) -> Any:
    """A context over a loaded topic registry of `config` (close it: `ctx.topics.close()`),
    with `groups` as the group coordinator's door."""
    topics = TopicRegistry(config)
    topics.load()
    host, port = config.advertised_address
    return HandlerContext(
        groups,
        topics,
        config,
        Node(config.node_id, host, port, CLUSTER_ID),
        ServerMetrics(),
        committer or GroupCommitter(),
        _spawn,
        itertools.count().__next__,
        SUPPORTED_VERSIONS,
        client_host="/127.0.0.1",
    )


def unloaded_gateway(config: Config, shards: int = 1) -> GroupCoordinatorGateway:
    """A gateway over `shards` shards that are never loaded (no log opened): its group
    configs work, and its shards answer COORDINATOR_LOAD_IN_PROGRESS."""
    service = CoordinatorService(
        config.data_path,
        shards,
        group_config(config),
        LogConfig(segment_bytes_max=config.offsets_segment_bytes),
        GroupCommitter(),
    )
    store = GroupConfigStore(config.data_path / "group_configs.json")
    store.load()
    return GroupCoordinatorGateway(service, store)


@dataclass
class GroupTestbed:
    """A context whose gateway has a few loaded shards, and those shards (`coordinator`),
    for tests that look inside them or change their state."""

    context: GroupContext
    coordinator: CoordinatorService


async def group_testbed(
    data_dir: Path, shards: int = 2, **overrides: Any
) -> AsyncIterator[GroupTestbed]:
    """For an async fixture: a context whose gateway has `shards` loaded shards on
    `data_dir` (the registry is their topic image); closed after."""
    config = settings(data_dir, offsets_partitions=shards, **overrides)
    committer = GroupCommitter(waiters_max=config.durable_waiters_max)
    store = GroupConfigStore(config.data_path / "group_configs.json")
    store.load()
    ctx = handler_context(config, None, committer)
    service = CoordinatorService(
        config.data_path,
        shards,
        group_config(config),
        LogConfig(segment_bytes_max=config.offsets_segment_bytes),
        committer,
        topics=ctx.topics,
        group_configs=store,
    )
    ctx.groups = GroupCoordinatorGateway(service, store)
    await service.load()
    try:
        yield GroupTestbed(ctx, service)
    finally:
        await service.close()
        await committer.close()
        ctx.topics.close()

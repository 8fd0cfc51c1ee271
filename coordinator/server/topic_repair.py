"""serve --workers: a worker converges on the topic changes it missed while it was down.

Theory of operation. topic_sync.py repeats each topic change on every peer from an
in-memory queue, retried while the peer is away; a change is missed when that queue is
lost (the sending worker dies before the peer is back) or the receiver was stopped past
the sender's retries. So each worker also records, beside its topics.json, when it last
changed each topic and whether that change deleted it (topic_changes.json: name ->
changed_ms, deleted). Deleted topics stay listed there (tombstones) for
TOMBSTONE_RETENTION_MS, so a deletion is still known to a worker that was down.

Every `worker_topic_repair_interval_ms` (and once its shards are loaded after a start) a
worker reads each peer's image from the peer's data directory and takes, topic by topic,
the side changed last (last writer wins on changed_ms; every worker is on the same machine
and clock): a topic the peer deleted later is deleted here, with its offsets in the
shards this worker owns (as DeleteTopics does); one the peer created, extended or
reconfigured later is created, extended or given the peer's configs here (one with fewer
partitions than here was deleted and created again: deleted, then created). A topic this
worker changed later is left for the peer's own repair. Ties change nothing.

Why the peer's files and not a Kafka request: the image needs the change times and the
tombstones, which no Kafka response carries, and the workers share one machine and data
directory (worker_layout.py): reading two small files every few seconds costs less than a
request, and needs no peer process to answer (a stopped peer's files are as good). A peer
writes topics.json first and topic_changes.json after; the reader reads them in the other
order, so the configs and counts it reads are at least as new as the times, and a name the
two files disagree about (one mid-change) is left for the next round.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupcoord.protocol.api import ApiKey, Request
from groupcoord.storage import DataDirError
from groupcoord.storage.checkpoint import atomic_write, read_json_file

from ..observability.logging import get_logger
from ..topics.registry import TopicError, TopicRegistry

log = get_logger("groupcoord.topic_repair")

CHANGES_FILE = "topic_changes.json"
TOPICS_FILE = "topics.json"
TOMBSTONE_RETENTION_MS = 7 * 24 * 3600 * 1000
NEVER = -1  # the change time of a topic a worker never had
RESOURCE_TOPIC = 2  # ConfigResource type of IncrementalAlterConfigs


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Change:
    changed_ms: int
    deleted: bool


@dataclass(frozen=True, slots=True)
class PeerTopic:
    """A topic as a peer's image has it: its last change, and unless deleted its
    partition count and configs."""

    changed_ms: int
    deleted: bool
    partitions: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Action:
    """One step of a repair: kind "delete", "create", "recreate" (delete, then create),
    "extend", "configs" or "record" (only the change time is taken)."""

    kind: str
    name: str
    changed_ms: int
    partitions: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)


class TopicChanges:
    """This worker's topic_changes.json (module docstring)."""

    def __init__(self, data_dir: Path, clock_ms: Callable[[], int] = _wall_clock_ms) -> None:
        self.path = data_dir / CHANGES_FILE
        self.clock_ms = clock_ms
        self.changes: dict[str, Change] = {}

    def load(self) -> None:
        """DataDirError when the file is damaged (read_json_file)."""
        self.changes = read_changes(self.path)

    def changed_ms(self, name: str, present: bool) -> int:
        """When `name` last changed here: a topic present but never recorded (made before
        this file existed) counts as changed at 0."""
        change = self.changes.get(name)
        if change is not None:
            return change.changed_ms
        return 0 if present else NEVER

    def record(self, changed: Mapping[str, bool], at_ms: int | None = None) -> None:
        """Record topics changed now (or at `at_ms`, a peer's time taken by a repair):
        name -> whether the change deleted it. Saved before it returns (OSError when it
        cannot be); tombstones past TOMBSTONE_RETENTION_MS are dropped."""
        if not changed:
            return
        now_ms = self.clock_ms()
        stamp = now_ms if at_ms is None else at_ms
        for name, deleted in changed.items():
            old = self.changes.get(name)
            # Never back in time: a change recorded here stays the latest known.
            self.changes[name] = Change(max(stamp, old.changed_ms if old else NEVER), deleted)
        horizon_ms = now_ms - TOMBSTONE_RETENTION_MS
        self.changes = {
            n: c for n, c in self.changes.items() if not c.deleted or c.changed_ms >= horizon_ms
        }
        data = {n: [c.changed_ms, c.deleted] for n, c in self.changes.items()}
        atomic_write(self.path, json.dumps({"version": 1, "topics": data}).encode())


def read_changes(path: Path) -> dict[str, Change]:
    data = read_json_file(path)
    if data is None:
        return {}
    try:
        return {n: Change(int(v[0]), bool(v[1])) for n, v in dict(data["topics"]).items()}
    except (KeyError, TypeError, ValueError, IndexError):
        raise DataDirError(f"{path} is malformed: delete it to start again") from None


def read_peer_image(peer_dir: Path) -> dict[str, PeerTopic]:
    """A peer's topics with their last changes (module docstring: the times first, then
    topics.json); a name the two files disagree about is left out. DataDirError / OSError
    when a file cannot be read."""
    changes = read_changes(peer_dir / CHANGES_FILE)
    listed = read_json_file(peer_dir / TOPICS_FILE) or {"topics": []}
    topics = {t["name"]: t for t in listed["topics"]}
    image: dict[str, PeerTopic] = {}
    for name, change in changes.items():
        entry = topics.get(name)
        if change.deleted:
            if entry is None:
                image[name] = PeerTopic(change.changed_ms, True)
        elif entry is not None:
            image[name] = PeerTopic(change.changed_ms, False, entry["partitions"], entry["configs"])
    for name, entry in topics.items():
        if name not in changes:
            image[name] = PeerTopic(0, False, entry["partitions"], entry["configs"])
    return image


def plan_repair(
    local: Mapping[str, tuple[int, Mapping[str, str]]],
    changed_ms: Callable[[str, bool], int],
    peer: Mapping[str, PeerTopic],
) -> list[Action]:
    """The steps that bring this worker's topics (`local`: name -> partition count,
    configs; `changed_ms(name, present)`: TopicChanges.changed_ms) to the peer's where the
    peer changed a topic later (module docstring)."""
    actions: list[Action] = []
    for name, theirs in peer.items():
        mine = local.get(name)
        if theirs.changed_ms <= changed_ms(name, mine is not None):
            continue
        at = theirs.changed_ms
        if theirs.deleted:
            actions.append(Action("delete" if mine is not None else "record", name, at))
            continue
        if mine is None:
            actions.append(Action("create", name, at, theirs.partitions, theirs.configs))
            continue
        count, configs = mine
        if theirs.partitions < count:
            actions.append(Action("recreate", name, at, theirs.partitions, theirs.configs))
            continue
        if theirs.partitions > count:
            actions.append(Action("extend", name, at, theirs.partitions))
        if dict(theirs.configs) != dict(configs):
            actions.append(Action("configs", name, at, configs=theirs.configs))
        actions.append(Action("record", name, at))
    return actions


def changed_topics(api_key: int, request: Request, response: Any) -> dict[str, bool]:
    """The topics a synced request (topic_sync.SYNCED_APIS) changed, from its answer:
    name -> deleted. Validate-only requests and failed entries changed nothing (broker
    configs are not topics: not repaired)."""
    body = request.body
    if getattr(body, "validate_only", False):
        return {}
    if api_key == ApiKey.CREATE_TOPICS:
        return {t.name: False for t in response.topics if not t.error_code}
    if api_key == ApiKey.DELETE_TOPICS:
        return {t.name: True for t in response.responses if not t.error_code and t.name}
    if api_key == ApiKey.CREATE_PARTITIONS:
        return {t.name: False for t in response.results if not t.error_code}
    if api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        return {
            r.resource_name: False
            for r in response.responses
            if not r.error_code and r.resource_type == RESOURCE_TOPIC
        }
    return {}


class TopicRepair:
    """Applies `plan_repair` against every peer's image, now and then (module docstring)."""

    def __init__(
        self,
        registry: TopicRegistry,
        changes: TopicChanges,
        peer_dirs: Iterable[Path],
        topics_deleted: Callable[[Mapping[str, uuid.UUID]], None],
    ) -> None:
        self.registry = registry
        self.changes = changes
        self.peer_dirs = list(peer_dirs)
        self.topics_deleted = topics_deleted

    async def run(self, interval_ms: int, ready: Awaitable[Any]) -> None:
        """Repair once `ready` (the shards loaded: offsets of a deleted topic are removed
        only from active shards), then every `interval_ms`."""
        await ready
        while True:
            await self.repair_once()
            await asyncio.sleep(interval_ms / 1000)

    async def repair_once(self) -> int:
        """One round against every peer; the number of steps taken."""
        done = 0
        for peer_dir in self.peer_dirs:
            try:
                image = read_peer_image(peer_dir)
            except (OSError, DataDirError, KeyError, TypeError) as e:
                log.warning("peer topic image unreadable", peer=str(peer_dir), error=str(e))
                continue
            local = {
                t.name: (len(t.partitions), t.configs)
                for t in self.registry.topics()
                if not t.internal
            }
            for action in plan_repair(local, self.changes.changed_ms, image):
                if self.registry.changing(action.name):
                    continue  # a client's change in progress: the next round sees it done
                try:
                    await self._apply(action)
                except (TopicError, OSError) as e:
                    log.warning(
                        "topic repair failed", topic=action.name, step=action.kind, error=str(e)
                    )
                    continue
                done += action.kind != "record"
        return done

    async def _apply(self, action: Action) -> None:
        registry, name = self.registry, action.name
        topic = registry.get(name)
        if action.kind in ("delete", "recreate") and topic is not None:
            await registry.delete_in_steps(topic)
            self.topics_deleted({name: topic.topic_id})
            topic = None
        if action.kind in ("create", "recreate") and topic is None:
            await registry.create_in_steps(name, action.partitions, dict(action.configs))
        elif action.kind == "extend" and topic is not None:
            await registry.add_partitions_in_steps(topic, action.partitions)
        elif action.kind == "configs" and topic is not None:
            registry.alter_configs(topic, dict(action.configs))
        if action.kind != "record":
            log.info("topic repaired from a peer", topic=name, step=action.kind)
        deleted = action.kind == "delete" or (action.kind == "record" and topic is None)
        self.changes.record({name: deleted}, at_ms=action.changed_ms)

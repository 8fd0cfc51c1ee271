"""The topic registry: which topics exist, their ids, partitions and configs, and the open
partition logs. Topic metadata is one JSON file rewritten atomically (temp file, fsync,
rename, directory fsync) on every change; partition data lives in `topics/<name>-<n>/`.

Names that differ only in '.' against '_' collide (Kafka's rule: its per-topic metric names
replace '.' with '_'), so a new topic whose name collides with an existing one is refused.

Creating a topic or adding partitions is all or nothing: the new partition logs are opened
first, then topics.json is written with them, and only then does the registry show them
(and `version` move). A failure on the way closes and removes what was opened and leaves
the registry and topics.json as they were. Showing a topic before topics.json lists it would
let clients produce to it and get acks for data that `load()` deletes at the next start (it
removes partition directories topics.json does not list); a later save of any other topic
would also persist a topic whose creation had failed. This order is also what lets `load()`
tell a partition directory removed by hand (listed, missing: the start is refused, naming
it) from an interrupted creation (present, unlisted, empty: removed), and a lost
topics.json (unlisted directories holding records: refused) from either.

Creating, extending and deleting a topic take turns (one lock) and open or remove the
partition logs in steps of at most CHANGE_STEP_S, the event loop serving other requests
between them: done in one piece, a 3,000-partition topic took 0.8 s to create and 0.45 s to
delete, every group's heartbeats and commits waiting behind it. Meanwhile the topic's name
is marked as changing, so that Metadata's auto-create (which does not wait its turn) answers
LEADER_NOT_AVAILABLE for it instead of opening the directories being created or removed.
A change whose request is cancelled (its client went away) is undone (a creation) or
finished at once (a deletion: a topic re-created later must not find old data).

Altering a topic's configs follows the same order: the new overrides are validated as
CreateTopics validates them, saved to topics.json, and only then installed in the topic and
its open logs (retention, segment rolling, the log cleaner and the produce checks read
them live); a failed save leaves the old overrides in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import shutil
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from groupcoord.storage import DataDirError, LogConfig, PartitionLog
from groupcoord.storage.checkpoint import atomic_write, read_json_file, state_file_fields

from ..config import Config
from ..ownership import OwnershipView
from ..runtime.partitioning import OFFSETS_TOPIC
from .broker_config_store import BrokerConfigStore
from .cleanup_policy import CleanupPolicy, lag_conflict
from .configs import TOPIC_CONFIG_BROKER_NAMES, TOPIC_CONFIGS, validate_topic_configs
from .producers import ProducerStates

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
PARTITIONS_MAX = 100_000
# The longest a topic change holds the event loop before letting it serve others (the
# module docstring says why).
CHANGE_STEP_S = 0.002


def _random_topic_id(_name: str) -> uuid.UUID:
    return uuid.uuid4()


class TopicError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_topic_name(name: str) -> None:
    from groupcoord.protocol.errors import ErrorCode

    if name in (".", "..") or not TOPIC_NAME.match(name or ""):
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name {name!r} is illegal: it must be 1-249 of [a-zA-Z0-9._-], not '.' or '..'",
        )


def collision_key(name: str) -> str:
    """Kafka's Topic.unifyCollisionChars: names with the same key collide."""
    return name.replace(".", "_")


@dataclass(eq=False)
class Partition:
    topic: Topic
    index: int
    log: PartitionLog
    producers: ProducerStates
    # Long-poll fetches waiting for this partition's high watermark to move.
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    # This node leads it (always, but with serve --workers: ownership.py); a partition led
    # elsewhere answers NOT_LEADER_OR_FOLLOWER to Produce, Fetch and ListOffsets.
    led: bool = True

    @property
    def high_watermark(self) -> int:
        """Offsets below it are durable and visible to consumers (last offset + 1)."""
        return self.log.durable_offset

    @property
    def last_stable_offset(self) -> int:
        """Offsets below it are visible to read_committed consumers: the high watermark,
        or the first offset of the earliest undecided transaction (producers.py)."""
        log = self.log
        return self.producers.last_stable_offset(log.durable_offset, log.log_start_offset)


@dataclass(eq=False)
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    partitions: list[Partition] = field(default_factory=list)
    # A coordinator's shard logs served read-only (internal_topics.py): Metadata's
    # is_internal; Produce, DeleteTopics, CreatePartitions and config changes refuse it.
    internal: bool = False

    def exists(self) -> bool:
        """Whether clients see the topic (an internal topic: once Kafka would have made it)."""
        return True

    def config_value(self, name: str, config: Config) -> str:
        value = self.configs.get(name)
        return value if value is not None else TOPIC_CONFIGS[name].default(config)


class TopicRegistry:
    def __init__(self, config: Config) -> None:
        # `config` with the dynamic broker configs that set topic defaults applied
        # (set_broker_configs); `base_config`: as the server was started.
        self.config = self.base_config = config
        self.broker_configs = BrokerConfigStore(config.data_path / "broker_configs.json")
        self.root = config.data_path / "topics"
        self.meta_path = config.data_path / "topics.json"
        self.by_name: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        # collision_key -> the names having it: one each, unless topics.json predates the
        # collision check. The coordinator's own topic is there, as Kafka's internal topic.
        self._by_collision_key: dict[str, set[str]] = {
            collision_key(OFFSETS_TOPIC): {OFFSETS_TOPIC}
        }
        # Moves on every change: the group coordinator's TopicImage view (groups/topics.py).
        self.version = 1
        self._changes = asyncio.Lock()  # creations, extensions and deletions take turns
        self._changing: set[str] = set()  # topics being created or deleted in steps
        # The coordinators' shard logs as internal topics (add_internal): served by `get`,
        # `get_by_id` and `listed_topics`, never by `topics()` (retention, compaction and
        # the topic image iterate those), `partition()` (writers) or topics.json.
        self._internal: dict[str, Topic] = {}
        self._internal_by_id: dict[uuid.UUID, Topic] = {}
        # serve --workers: which partitions this node leads, and the topic ids every worker
        # gives a topic alike (server/app.py sets both); None / random for one process.
        self.ownership: OwnershipView | None = None
        self.new_topic_id: Callable[[str], uuid.UUID] = _random_topic_id
        # serve --workers (server/topic_sync.py): asked before Metadata auto-creates a topic
        # (name, partitions): True to create it here, False when another worker creates it.
        self.auto_create_hook: Callable[[str, int], bool] | None = None

    # lifecycle ---------------------------------------------------------------------------

    def load(self, salvage: bool = False) -> None:
        """Open every topic listed in topics.json; remove directories of deleted topics.
        `salvage`: the logs were closed cleanly (PartitionLog.open). Raises DataDirError
        when topics.json is unreadable, or a partition it lists has no directory, or
        topics.json is missing while partition directories hold data."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.broker_configs.load()
        self.config = self._effective_config()
        data = read_json_file(self.meta_path)
        if data is None:
            check_no_unlisted_data(self.root, self.meta_path)
        listed = _listed_topics(self.meta_path, data)
        for topic, count in listed:
            # Every directory first: a missing one refuses the start before any log is
            # opened (and recovered) on the word of a damaged topics.json.
            for index in range(count):
                self._check_partition_dir(topic.name, index)
        for topic, count in listed:
            self._add(topic)
            for index in range(count):
                topic.partitions.append(self._open_partition(topic, index, salvage))
        known = {
            self._partition_dir(t.name, p.index).name
            for t in self.by_name.values()
            for p in t.partitions
        }
        for child in self.root.iterdir():
            if child.is_dir() and child.name not in known:
                shutil.rmtree(child, ignore_errors=True)

    def close(self) -> None:
        for topic in self.by_name.values():
            for partition in topic.partitions:
                partition.log.close()

    # queries -----------------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        """The topic `name` (an internal topic once it exists), else None."""
        topic = self.by_name.get(name)
        if topic is None and self._internal:
            topic = self._internal.get(name)
            if topic is not None and not topic.exists():
                return None
        return topic

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        topic = self.by_id.get(topic_id)
        if topic is None and self._internal_by_id:
            topic = self._internal_by_id.get(topic_id)
            if topic is not None and not topic.exists():
                return None
        return topic

    def listed_topics(self) -> list[Topic]:
        """What Metadata lists: the data topics and the internal topics that exist."""
        return [*self.by_name.values(), *(t for t in self._internal.values() if t.exists())]

    def add_internal(self, topic: Topic) -> None:
        """Serve a read-only internal topic (internal_topics.py); its name is reserved."""
        self._internal[topic.name] = topic
        self._internal_by_id[topic.topic_id] = topic
        self._by_collision_key.setdefault(collision_key(topic.name), set()).add(topic.name)

    def mark_internal_created(self, name: str) -> None:
        """FindCoordinator asked for the internal topic's coordinator: as Kafka, which
        creates the topic then, list it from now on."""
        topic = self._internal.get(name)
        if topic is not None:
            topic.created = True  # type: ignore[attr-defined]

    def partition(self, name: str, index: int) -> Partition | None:
        topic = self.by_name.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def topics(self) -> list[Topic]:
        return list(self.by_name.values())

    def local_partitions(self) -> list[Partition]:
        """The partitions whose log is in the data directory (retention's): serve
        --cluster's in PostgreSQL have their own (cluster/partition_leases.py)."""
        return [
            p
            for t in self.by_name.values()
            for p in t.partitions
            if isinstance(p.log, PartitionLog)
        ]

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.by_name.values())

    # the group coordinator's TopicImage (coordinator/groups/topics.py) -------------------

    def topic_id(self, name: str) -> uuid.UUID | None:
        topic = self.by_name.get(name)
        return None if topic is None else topic.topic_id

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self.by_id.get(topic_id)
        return None if topic is None else topic.name

    def num_partitions(self, topic_id: uuid.UUID) -> int:
        topic = self.by_id.get(topic_id)
        return -1 if topic is None else len(topic.partitions)

    def topic_names(self) -> list[str]:
        return list(self.by_name)

    def colliding_topics(self, name: str) -> list[str]:
        """The existing topics (other than `name` itself) whose name collides with `name`
        once '.' and '_' are unified, sorted."""
        if "." not in name and "_" not in name:
            return []
        return sorted(self._by_collision_key.get(collision_key(name), set()) - {name})

    def check_collision(self, name: str) -> None:
        """INVALID_TOPIC_EXCEPTION when a new topic `name` would collide with existing ones."""
        from groupcoord.protocol.errors import ErrorCode

        colliding = self.colliding_topics(name)
        if colliding:
            raise TopicError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topics: {', '.join(colliding)}",
            )

    # changes -----------------------------------------------------------------------------

    def changing(self, name: str) -> bool:
        """Whether topic `name` is being created or deleted right now (in steps)."""
        return name in self._changing

    def create(self, name: str, partitions: int, configs: dict[str, str | None]) -> Topic:
        """Create a topic in one piece (Metadata's auto-create of a small topic). Errors
        (TopicError) as `_check_create`; OSError when the disk fails (nothing is left)."""
        topic, count, log_config = self._check_create(name, partitions, configs)
        opened: list[Partition] = []
        for _ in self._opening(topic, range(count), log_config, opened):
            pass
        self._install(topic, count, opened)
        return topic

    async def create_in_steps(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str | None],
        validate_only: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> Topic:
        """`create` for CreateTopics: after the changes before it, its partitions opened in
        steps (module docstring). `topic_id`: the id to give it (serve --cluster: the
        metadata store's), else a new one (`new_topic_id`)."""
        async with self._changes:
            topic, count, log_config = self._check_create(name, partitions, configs, topic_id)
            if not validate_only:
                opened: list[Partition] = []
                with self._marked_changing(name):
                    await _in_steps(self._opening(topic, range(count), log_config, opened))
                    self._install(topic, count, opened)
            return topic

    async def delete_in_steps(self, topic: Topic) -> None:
        """Delete `topic` after the changes before it: saved first (a failed save leaves it
        served and listed), then no longer shown, then its logs closed and directories
        removed in steps. Raises TopicError(UNKNOWN_TOPIC_OR_PARTITION) when a change
        before it removed the topic already."""
        async with self._changes:
            self._check_current(topic)
            self._save_or_undo(removed=topic.name)
            del self.by_name[topic.name]
            del self.by_id[topic.topic_id]
            self._forget_collision_key(topic.name)
            self.version += 1
            with self._marked_changing(topic.name):
                await _in_steps(self._removing(topic))

    def check_add_partitions(self, topic: Topic, count: int) -> None:
        """CreatePartitions' checks: INVALID_PARTITIONS unless `count` is an increase
        within PARTITIONS_MAX."""
        from groupcoord.protocol.errors import ErrorCode

        current = len(topic.partitions)
        if count <= current:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than or equal to the "
                f"requested {count}.",
            )
        if count > PARTITIONS_MAX:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"at most {PARTITIONS_MAX} partitions")

    async def add_partitions_in_steps(self, topic: Topic, count: int) -> None:
        """Raise `topic`'s partition count to `count` after the changes before it (checked
        again then: TopicError as `check_add_partitions`, or UNKNOWN_TOPIC_OR_PARTITION for
        a topic deleted meanwhile), the new partitions opened in steps and shown once saved."""
        async with self._changes:
            self._check_current(topic)
            self.check_add_partitions(topic, count)
            current = len(topic.partitions)
            opened: list[Partition] = []
            await _in_steps(
                self._opening(topic, range(current, count), self._log_config(topic), opened)
            )
            self._save_or_undo(changed=(topic, count), opened=opened)
            topic.partitions.extend(opened)
            self.version += 1

    def checked_configs(self, configs: dict[str, str | None]) -> tuple[dict[str, str], LogConfig]:
        """Topic overrides checked exactly as CreateTopics checks them (names, values, then
        the log settings they make), normalised; TopicError(INVALID_CONFIG) otherwise."""
        checked = self._checked_configs(configs)
        return checked, self._checked_log_config(Topic("", uuid.UUID(int=0), checked))

    def alter_configs(
        self, topic: Topic, configs: dict[str, str | None], validate_only: bool = False
    ) -> None:
        """Make `configs` the topic's whole override set (an absent name falls back to the
        broker setting). Checked as CreateTopics checks configs (INVALID_CONFIG), saved to
        topics.json, then installed in the topic and the live logs of its partitions. A
        failed save (OSError) leaves the old overrides saved and in force."""
        checked, log_config = self.checked_configs(configs)
        if validate_only or checked == topic.configs:
            return
        staged = dataclasses.replace(topic, configs=checked, partitions=[])
        self._save_or_undo(changed=(staged, len(topic.partitions)))
        topic.configs = checked
        for partition in topic.partitions:
            partition.log.reconfigure(log_config)

    def dynamic_broker_configs(self) -> dict[str, tuple[str, bool]]:
        """The dynamic broker configs in force: name -> (value, set on this broker's own
        resource rather than the cluster default "")."""
        merged = {name: (value, False) for name, value in self.broker_configs.overrides("").items()}
        own = self.broker_configs.overrides(str(self.base_config.node_id))
        merged.update((name, (value, True)) for name, value in own.items())
        return merged

    def set_broker_configs(self, resource: str, configs: dict[str, str]) -> None:
        """Make `configs` (checked by alter_broker_configs.py) BROKER resource `resource`'s
        dynamic configs: saved to broker_configs.json, then the topic defaults they set
        applied to every live log. A failed save (OSError) changes nothing."""
        self.broker_configs.replace(resource, configs)
        self.config = self._effective_config()
        for topic in self.by_name.values():
            log_config = self._log_config(topic)
            for partition in topic.partitions:
                partition.log.reconfigure(log_config)

    # internals ---------------------------------------------------------------------------

    def _effective_config(self) -> Config:
        """The server's settings with the dynamic broker configs that are a topic config's
        broker default and have a setting of ours behind it (log.retention.ms ->
        log_retention_ms, ...)."""
        by_broker_name = {broker: topic for topic, broker in TOPIC_CONFIG_BROKER_NAMES.items()}
        changes: dict[str, object] = {}
        for name, (value, _own) in self.dynamic_broker_configs().items():
            topic_config = by_broker_name.get(name)
            spec = TOPIC_CONFIGS.get(topic_config) if topic_config else None
            if spec is None or spec.broker_setting is None:
                continue
            current = getattr(self.base_config, spec.broker_setting)
            changes[spec.broker_setting] = int(value) if isinstance(current, int) else value
        return dataclasses.replace(self.base_config, **changes) if changes else self.base_config

    def _checked_configs(self, configs: dict[str, str | None]) -> dict[str, str]:
        from groupcoord.protocol.errors import ErrorCode

        from .configs import InvalidConfig

        try:
            return validate_topic_configs(configs)
        except InvalidConfig as e:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(e)) from None

    def _checked_log_config(self, topic: Topic) -> LogConfig:
        """The topic's log settings; a value the log refuses is INVALID_CONFIG (configs.py
        bounds every number by its Kafka type, so this is a second line of defence)."""
        from groupcoord.protocol.errors import ErrorCode

        conflict = lag_conflict(topic, self.config)
        if conflict is not None:
            raise TopicError(ErrorCode.INVALID_CONFIG, conflict)
        try:
            return self._log_config(topic)
        except ValueError as e:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"Invalid topic config: {e}") from None

    def _add(self, topic: Topic) -> None:
        self.by_name[topic.name] = topic
        self.by_id[topic.topic_id] = topic
        self._by_collision_key.setdefault(collision_key(topic.name), set()).add(topic.name)

    def _forget_collision_key(self, name: str) -> None:
        key = collision_key(name)
        names = self._by_collision_key.get(key)
        if names is not None:
            names.discard(name)
            if not names:
                del self._by_collision_key[key]

    def _partition_dir(self, name: str, index: int) -> Path:
        return self.root / f"{name}-{index}"

    def _check_partition_dir(self, name: str, index: int) -> None:
        """DataDirError when listed partition `name`-`index` has no directory. A creation
        makes the directories (durably) before topics.json lists them, and a deletion
        unlists them before removing them, so no crash leaves one listed and missing: it
        was removed by hand, and opening it empty would silently drop its records."""
        directory = self._partition_dir(name, index)
        if not directory.is_dir():
            raise DataDirError(
                f"partition directory {directory} is missing, but {self.meta_path.name} lists "
                f"partition {index} of topic {name!r}: restore it from a backup, or create it "
                f"empty to accept losing its records, then start again"
            )

    def _log_config(self, topic: Topic) -> LogConfig:
        """Kafka's LogConfig: without `delete` in cleanup.policy nothing is deleted by
        retention; a compacted topic's active segment rolls by max.compaction.lag.ms, so
        the cleaner can reach its records in time (maxSegmentMs)."""

        def value(name: str) -> int:
            return int(topic.config_value(name, self.config))

        policy = CleanupPolicy.of(topic, self.config)
        segment_ms = value("segment.ms")
        if policy.compact:
            segment_ms = min(segment_ms, policy.max_lag_ms)
        return LogConfig(
            segment_bytes_max=value("segment.bytes"),
            retention_ms=value("retention.ms") if policy.delete else -1,
            retention_bytes=value("retention.bytes") if policy.delete else -1,
            segment_ms=segment_ms,
            batch_times=True,  # consumer lag's timestamps (storage/batch_times.py)
        )

    def _open_partition(
        self,
        topic: Topic,
        index: int,
        salvage: bool = False,
        log_config: LogConfig | None = None,
    ) -> Partition:
        directory = self._partition_dir(topic.name, index)
        if log_config is None:
            log_config = self._log_config(topic)
        log = PartitionLog.open(directory, log_config, salvage=salvage)
        try:
            producers = ProducerStates.rebuild(log)
        except BaseException:
            log.close()
            raise
        partition = Partition(topic, index, log, producers)
        if self.ownership is not None:
            partition.led = self.ownership.owns_partition(topic.name, index)
        return partition

    def _check_create(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str | None],
        topic_id: uuid.UUID | None = None,
    ) -> tuple[Topic, int, LogConfig]:
        """CreateTopics' checks, in Kafka's order; the new topic (not shown yet), its
        partition count (the default for -1) and log settings. TopicError:
        INVALID_TOPIC_EXCEPTION (name, collision), TOPIC_ALREADY_EXISTS,
        LEADER_NOT_AVAILABLE (the name is being created or deleted), INVALID_PARTITIONS,
        INVALID_CONFIG."""
        from groupcoord.protocol.errors import ErrorCode

        check_topic_name(name)
        if name in self.by_name or name in self._internal:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if name in self._changing:
            raise TopicError(
                ErrorCode.LEADER_NOT_AVAILABLE, f"Topic '{name}' is being created or deleted."
            )
        self.check_collision(name)
        if partitions == -1:
            partitions = self.config.default_partitions
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        checked = self._checked_configs(configs)
        topic = Topic(name, topic_id or self.new_topic_id(name), checked)
        # Checked for validate_only too, so a dry run answers as the real creation would.
        return topic, partitions, self._checked_log_config(topic)

    def _install(self, topic: Topic, count: int, opened: list[Partition]) -> None:
        """Save a new topic whose partitions are open, then show it."""
        self._save_or_undo(changed=(topic, count), opened=opened)
        topic.partitions = opened
        self._add(topic)
        self.version += 1

    def _check_current(self, topic: Topic) -> None:
        from groupcoord.protocol.errors import ErrorCode

        if self.by_name.get(topic.name) is not topic:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )

    @contextlib.contextmanager
    def _marked_changing(self, name: str) -> Iterator[None]:
        self._changing.add(name)
        try:
            yield
        finally:
            self._changing.discard(name)

    def _opening(
        self, topic: Topic, indexes: range, log_config: LogConfig, opened: list[Partition]
    ) -> Generator[None, None, None]:
        """Open new partitions of `topic` into `opened` without showing them, one per step;
        all of them or none (a failure, or the steps stopped early, closes and removes the
        ones opened, and the directory of the one failing)."""
        try:
            for index in indexes:
                opened.append(self._open_partition(topic, index, log_config=log_config))
                yield
        except BaseException:
            self._discard(topic, opened, indexes)
            raise

    def _removing(self, topic: Topic) -> Generator[None, None, None]:
        """Close and remove the partitions of a deleted topic, one per step; stopped early,
        the rest is removed at once (a topic created later under the name must not open
        old data)."""
        left = list(topic.partitions)
        try:
            while left:
                self._remove(left.pop())
                yield
        finally:
            while left:
                self._remove(left.pop())

    def _remove(self, partition: Partition) -> None:
        partition.log.close()
        wake_waiters(partition)
        shutil.rmtree(
            self._partition_dir(partition.topic.name, partition.index), ignore_errors=True
        )

    def _discard(self, topic: Topic, opened: list[Partition], indexes: range | None = None) -> None:
        """Undo `_opening`: close the logs and remove their directories (of every
        index in `indexes`, when given: also one whose open failed half way). None of them
        is listed in topics.json, so `load()` would remove them anyway."""
        for partition in opened:
            # The rollback goes on whatever a close raises: the caller re-raises the failure
            # that started it.
            with contextlib.suppress(Exception):
                partition.log.close()
        for index in indexes if indexes is not None else (p.index for p in opened):
            shutil.rmtree(self._partition_dir(topic.name, index), ignore_errors=True)

    def _save_or_undo(
        self,
        changed: tuple[Topic, int] | None = None,
        removed: str | None = None,
        opened: list[Partition] | None = None,
    ) -> None:
        """`_save` a change not shown yet; if that fails, close and remove the partitions
        `opened` for it, put topics.json back (`_restore_saved`) and re-raise."""
        try:
            self._save(changed=changed, removed=removed)
        except BaseException:
            if opened:
                self._discard(opened[0].topic, opened)
            self._restore_saved()
            raise

    def _restore_saved(self) -> None:
        """After a failed `_save`: rewrite topics.json from the registry, in case the write
        failed after its rename (the directory fsync) and left the change on disk. Best
        effort: when the temp file could not be written, the old file is still in place."""
        try:
            self._save()
        except OSError:
            pass

    def _save(self, changed: tuple[Topic, int] | None = None, removed: str | None = None) -> None:
        """Write topics.json: the registered topics, with `changed` = (topic, partition
        count) added or replacing its entry, or the topic named `removed` left out -- a
        change is saved before it is shown."""
        counts = {t.name: (t, len(t.partitions)) for t in self.by_name.values()}
        if changed is not None:
            counts[changed[0].name] = changed
        if removed is not None:
            del counts[removed]
        data = {
            "version": 1,
            "topics": [
                {
                    "name": t.name,
                    "id": str(t.topic_id),
                    "partitions": count,
                    "configs": t.configs,
                }
                for t, count in counts.values()
            ],
        }
        atomic_write(self.meta_path, json.dumps(data, indent=1).encode())


def _listed_topics(path: Path, data: dict[str, object] | None) -> list[tuple[Topic, int]]:
    """The topics (not shown yet) and partition counts topics.json lists; DataDirError
    naming the file when an entry is malformed."""
    if data is None:
        return []
    listed: list[tuple[Topic, int]] = []
    with state_file_fields(path):
        entries = data["topics"]
        if not isinstance(entries, list):
            raise TypeError("topics must be a list")
        for entry in entries:
            name, count, configs = entry["name"], entry["partitions"], entry["configs"]
            if not isinstance(name, str) or not TOPIC_NAME.match(name):
                raise ValueError(f"invalid topic name {name!r}")
            if not isinstance(count, int) or not 1 <= count <= PARTITIONS_MAX:
                raise ValueError(f"topic {name!r}: invalid partition count {count!r}")
            if not all(isinstance(v, str) for v in dict(configs).values()):
                raise ValueError(f"topic {name!r}: config values must be strings")
            listed.append((Topic(name, uuid.UUID(entry["id"]), dict(configs)), count))
    return listed


def check_no_unlisted_data(root: Path, meta_path: Path) -> None:
    """Without topics.json, partition directories may only be an interrupted first
    creation's (topics.json is written once they exist), whose segments are empty; one
    holding records means topics.json was lost, and removing the directories (what load
    does with unlisted ones) would delete acknowledged data. DataDirError then."""
    for child in sorted(root.iterdir()):
        if child.is_dir() and any(f.stat().st_size for f in child.glob("*.log")):
            raise DataDirError(
                f"{meta_path} is missing but partition directory {child} holds records: "
                f"restore {meta_path.name} from a backup, then start again"
            )


async def _in_steps(work: Generator[None, None, None]) -> None:
    """Run `work` (a generator yielding between its steps), letting the event loop serve
    others whenever CHANGE_STEP_S have passed; cancelled, the generator is closed, so its
    own clean-up runs (see `_opening`, `_removing`)."""
    try:
        deadline = time.perf_counter() + CHANGE_STEP_S
        for _ in work:
            if time.perf_counter() >= deadline:
                await asyncio.sleep(0)
                deadline = time.perf_counter() + CHANGE_STEP_S
    finally:
        work.close()


def wake_waiters(partition: Partition) -> None:
    """Wake the long-poll fetches parked on a partition (new durable data, or it is gone)."""
    waiters = partition.waiters
    if waiters:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        waiters.clear()

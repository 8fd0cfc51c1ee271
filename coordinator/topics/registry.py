"""The topic registry: which topics exist, their ids, partitions and configs, and the open
partition logs. Topic metadata is one JSON file rewritten atomically (temp file, fsync,
rename, directory fsync) on every change; partition data lives in `topics/<name>-<n>/`."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from storage import LogConfig, PartitionLog

from ..config import Config
from .configs import TOPIC_CONFIGS, validate_topic_configs
from .producers import ProducerStates

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
PARTITIONS_MAX = 100_000


class TopicError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_topic_name(name: str) -> None:
    from protocol.errors import ErrorCode

    if name in (".", "..") or not TOPIC_NAME.match(name or ""):
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name {name!r} is illegal: it must be 1-249 of [a-zA-Z0-9._-], not '.' or '..'",
        )


@dataclass(eq=False)
class Partition:
    topic: Topic
    index: int
    log: PartitionLog
    producers: ProducerStates
    # Long-poll fetches waiting for this partition's high watermark to move.
    waiters: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def high_watermark(self) -> int:
        """Offsets below it are durable and visible to consumers (last offset + 1)."""
        return self.log.durable_offset


@dataclass(eq=False)
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    partitions: list[Partition] = field(default_factory=list)

    def config_value(self, name: str, config: Config) -> str:
        value = self.configs.get(name)
        return value if value is not None else TOPIC_CONFIGS[name].default(config)


class TopicRegistry:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.root = config.data_path / "topics"
        self.meta_path = config.data_path / "topics.json"
        self.by_name: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        # Moves on every change: the group coordinator's TopicImage view (groups/topics.py).
        self.version = 1

    # lifecycle ---------------------------------------------------------------------------

    def load(self, salvage: bool = False) -> None:
        """Open every topic listed in topics.json; remove directories of deleted topics.
        `salvage`: the logs were closed cleanly (PartitionLog.open)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.meta_path.exists():
            data = json.loads(self.meta_path.read_text())
            for entry in data["topics"]:
                topic = Topic(entry["name"], uuid.UUID(entry["id"]), dict(entry["configs"]))
                self._add(topic)
                for index in range(entry["partitions"]):
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
        return self.by_name.get(name)

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self.by_id.get(topic_id)

    def partition(self, name: str, index: int) -> Partition | None:
        topic = self.by_name.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def topics(self) -> list[Topic]:
        return list(self.by_name.values())

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

    # changes -----------------------------------------------------------------------------

    def create(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str | None],
        validate_only: bool = False,
    ) -> Topic:
        from protocol.errors import ErrorCode

        check_topic_name(name)
        if name in self.by_name:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if partitions == -1:
            partitions = self.config.default_partitions
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        checked = self._checked_configs(configs)
        topic = Topic(name, uuid.uuid4(), checked)
        if validate_only:
            topic.partitions = []
            return topic
        self._add(topic)
        for index in range(partitions):
            topic.partitions.append(self._open_partition(topic, index))
        self._save()
        return topic

    def delete(self, topic: Topic) -> None:
        del self.by_name[topic.name]
        del self.by_id[topic.topic_id]
        self._save()
        for partition in topic.partitions:
            partition.log.close()
            wake_waiters(partition)
            shutil.rmtree(self._partition_dir(topic.name, partition.index), ignore_errors=True)

    def add_partitions(self, topic: Topic, count: int, validate_only: bool = False) -> None:
        from protocol.errors import ErrorCode

        current = len(topic.partitions)
        if count <= current:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than or equal to the "
                f"requested {count}.",
            )
        if count > PARTITIONS_MAX:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"at most {PARTITIONS_MAX} partitions")
        if validate_only:
            return
        for index in range(current, count):
            topic.partitions.append(self._open_partition(topic, index))
        self._save()

    # internals ---------------------------------------------------------------------------

    def _checked_configs(self, configs: dict[str, str | None]) -> dict[str, str]:
        from protocol.errors import ErrorCode

        from .configs import InvalidConfig

        try:
            return validate_topic_configs(configs)
        except InvalidConfig as e:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(e)) from None

    def _add(self, topic: Topic) -> None:
        self.by_name[topic.name] = topic
        self.by_id[topic.topic_id] = topic

    def _partition_dir(self, name: str, index: int) -> Path:
        return self.root / f"{name}-{index}"

    def _log_config(self, topic: Topic) -> LogConfig:
        value = lambda name: int(topic.config_value(name, self.config))  # noqa: E731
        return LogConfig(
            segment_bytes_max=value("segment.bytes"),
            retention_ms=value("retention.ms"),
            retention_bytes=value("retention.bytes"),
            segment_ms=value("segment.ms"),
        )

    def _open_partition(self, topic: Topic, index: int, salvage: bool = False) -> Partition:
        directory = self._partition_dir(topic.name, index)
        log = PartitionLog.open(directory, self._log_config(topic), salvage=salvage)
        producers = ProducerStates.rebuild(log)
        return Partition(topic, index, log, producers)

    def _save(self) -> None:
        self.version += 1
        data = {
            "version": 1,
            "topics": [
                {
                    "name": t.name,
                    "id": str(t.topic_id),
                    "partitions": len(t.partitions),
                    "configs": t.configs,
                }
                for t in self.by_name.values()
            ],
        }
        atomic_write(self.meta_path, json.dumps(data, indent=1).encode())


def wake_waiters(partition: Partition) -> None:
    """Wake the long-poll fetches parked on a partition (new durable data, or it is gone)."""
    waiters = partition.waiters
    if waiters:
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        waiters.clear()


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""What the group coordinator knows of topics (Kafka's metadata image, as the coordinator
reads it): names, ids and partition counts.

Consumer groups (KIP-848) subscribe by name and assign by topic id, so the shard needs the
current topics; the server passes its topic registry, shard tests a `StaticTopicImage`.
`version` moves whenever a topic is created, deleted or grows: a group compares it with the
version it last checked its subscribed topics at, and only then recomputes its metadata hash
(a change bumps the group epoch, so creating, deleting or growing a subscribed topic
reassigns). Reading the image is the only thing the shard does with it: it never writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Protocol


class TopicImage(Protocol):
    @property
    def version(self) -> int:
        """Moves on every topic creation, deletion or partition increase."""
        ...

    def topic_id(self, name: str) -> uuid.UUID | None: ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...

    def num_partitions(self, topic_id: uuid.UUID) -> int:
        """The topic's partition count, -1 if unknown (also the assignors' TopicDescriber)."""
        ...

    def topic_names(self) -> Iterable[str]: ...


def named_partitions(
    image: TopicImage, partitions: Mapping[uuid.UUID, Iterable[int]]
) -> list[tuple[str, list[int]]]:
    """[(topic name, sorted partitions)] in topic-id order, as the classic ConsumerProtocol
    carries assignments; partitions of topics the image does not know are left out."""
    out = []
    for topic_id in sorted(partitions, key=lambda t: t.int):
        name = image.topic_name(topic_id)
        if name is not None:
            out.append((name, sorted(partitions[topic_id])))
    return out


class StaticTopicImage:
    """An in-memory TopicImage (shard tests, and shards built without a server)."""

    def __init__(self, topics: dict[str, tuple[uuid.UUID, int]] | None = None) -> None:
        self._by_name: dict[str, tuple[uuid.UUID, int]] = dict(topics or {})
        self._by_id = {tid: name for name, (tid, _) in self._by_name.items()}
        self.version = 1

    def add(self, name: str, partitions: int, topic_id: uuid.UUID | None = None) -> uuid.UUID:
        """Create (or grow, keeping its id) a topic."""
        old = self._by_name.get(name)
        tid = topic_id or (old[0] if old else uuid.uuid5(uuid.NAMESPACE_URL, name))
        if old is not None and old[0] != tid:
            del self._by_id[old[0]]
        self._by_name[name] = (tid, partitions)
        self._by_id[tid] = name
        self.version += 1
        return tid

    def delete(self, name: str) -> None:
        tid, _ = self._by_name.pop(name)
        del self._by_id[tid]
        self.version += 1

    def topic_id(self, name: str) -> uuid.UUID | None:
        entry = self._by_name.get(name)
        return entry[0] if entry else None

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._by_id.get(topic_id)

    def num_partitions(self, topic_id: uuid.UUID) -> int:
        name = self._by_id.get(topic_id)
        return -1 if name is None else self._by_name[name][1]

    def topic_names(self) -> Iterable[str]:
        return self._by_name.keys()

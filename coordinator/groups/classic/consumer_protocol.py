"""The classic consumer's embedded protocol (Kafka's ConsumerProtocol): the Subscription a
member sends in JoinGroup and the Assignment it gets in SyncGroup, as bytes.

Written at version 0 (topics and user data only): every client reads it, and a consumer
group described through DescribeGroups has nothing more to say. Read at any version (v1
adds owned partitions, v2 the generation, v3 the rack): classic members of a consumer group
(online migration, KIP-848) report their owned partitions there."""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

_H = struct.Struct(">h")
_I = struct.Struct(">i")


def _string(s: str) -> bytes:
    raw = s.encode()
    return _H.pack(len(raw)) + raw


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription v0: topics, then user data (null: length -1)."""
    topics = list(topics)
    out = [_H.pack(0), _I.pack(len(topics))]
    out.extend(_string(t) for t in topics)
    out.append(_I.pack(-1) if user_data is None else _I.pack(len(user_data)) + user_data)
    return b"".join(out)


def encode_assignment(
    partitions: Iterable[tuple[str, Iterable[int]]], user_data: bytes | None = None
) -> bytes:
    """ConsumerProtocolAssignment v0: [(topic, [partition])], then user data."""
    parts = [(topic, list(ps)) for topic, ps in partitions]
    out = [_H.pack(0), _I.pack(len(parts))]
    for topic, ps in parts:
        out.append(_string(topic))
        out.append(_I.pack(len(ps)))
        out.append(struct.pack(f">{len(ps)}i", *ps))
    out.append(_I.pack(-1) if user_data is None else _I.pack(len(user_data)) + user_data)
    return b"".join(out)


class ConsumerProtocolError(ValueError):
    """Bytes that are not a ConsumerProtocol subscription or assignment."""


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: list[str]
    user_data: bytes | None
    owned_partitions: list[tuple[str, list[int]]]  # v1+
    generation_id: int  # v2+, -1 when absent
    rack_id: str | None  # v3+


@dataclass(frozen=True)
class Assignment:
    version: int
    partitions: list[tuple[str, list[int]]]
    user_data: bytes | None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ConsumerProtocolError("truncated")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return int(_H.unpack(self.take(2))[0])

    def int32(self) -> int:
        return int(_I.unpack(self.take(4))[0])

    def string(self) -> str:
        return self.take(self.int16()).decode()

    def nullable_string(self) -> str | None:
        size = self.int16()
        return None if size < 0 else self.take(size).decode()

    def nullable_bytes(self) -> bytes | None:
        size = self.int32()
        return None if size < 0 else self.take(size)

    def count(self) -> int:
        n = self.int32()
        if n < 0 or n > len(self.data) - self.pos:
            raise ConsumerProtocolError("bad array length")
        return n

    def topic_partitions(self) -> list[tuple[str, list[int]]]:
        out = []
        for _ in range(self.count()):
            topic = self.string()
            out.append((topic, [self.int32() for _ in range(self.count())]))
        return out


def decode_subscription(data: bytes) -> Subscription:
    """Any ConsumerProtocolSubscription version (fields of later versions than the sender's
    default); raises ConsumerProtocolError on malformed bytes."""
    try:
        r = _Reader(bytes(data))
        version = r.int16()
        if version < 0:
            raise ConsumerProtocolError("negative version")
        topics = [r.string() for _ in range(r.count())]
        user_data = r.nullable_bytes()
        owned = r.topic_partitions() if version >= 1 else []
        generation = r.int32() if version >= 2 else -1
        rack = r.nullable_string() if version >= 3 else None
    except (struct.error, UnicodeDecodeError) as e:
        raise ConsumerProtocolError(str(e)) from None
    return Subscription(version, topics, user_data, owned, generation, rack)


def decode_assignment(data: bytes) -> Assignment:
    """Any ConsumerProtocolAssignment version; empty bytes are an empty assignment (what a
    member that was never assigned has)."""
    if not data:
        return Assignment(0, [], None)
    try:
        r = _Reader(bytes(data))
        version = r.int16()
        if version < 0:
            raise ConsumerProtocolError("negative version")
        partitions = r.topic_partitions()
        user_data = r.nullable_bytes()
    except (struct.error, UnicodeDecodeError) as e:
        raise ConsumerProtocolError(str(e)) from None
    return Assignment(version, partitions, user_data)

"""The classic consumer's embedded protocol (Kafka's ConsumerProtocol): the Subscription a
member sends in JoinGroup and the Assignment it gets in SyncGroup, as bytes.

Written at version 0 (topics and user data only): every client reads it, and a consumer
group described through DescribeGroups has nothing more to say (Kafka also writes v0 there
unless it knows the member's own version)."""

from __future__ import annotations

import struct
from collections.abc import Iterable

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

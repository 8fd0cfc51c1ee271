"""Readers of two request frames of the usual shape, without the codec: the steady
ConsumerGroupHeartbeat v1 and OffsetCommit v8-v9 (coordinator/server/fast_paths.py says why
and what it does with them).

They read only what they can read with a few struct calls: a request header v2 without
tagged fields, compact strings and arrays whose length fits one varint byte (shorter than
127 bytes or items), and no tagged fields in the body. Any other frame (another shape, a
long string, tagged fields, a short or overlong frame) gives None, and the caller decodes
it with the codec, which reads every shape and refuses malformed ones. They never raise.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from .header import RequestHeader, new_request_header

__all__ = ["read_offset_commit_v8_v9", "read_steady_consumer_heartbeat"]

_FIXED = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">iqi")  # index, committed offset, committed leader epoch
# RebalanceTimeoutMs -1, then null SubscribedTopicNames, SubscribedTopicRegex,
# ServerAssignor and TopicPartitions, and no tagged fields: a steady v1 request's tail.
_STEADY_TAIL = b"\xff\xff\xff\xff" + b"\x00" * 5
_NOT_FAST = (struct.error, IndexError, ValueError)  # a short frame, or a shape left out

_P = TypeVar("_P")


def _compact_string(frame: bytes, pos: int) -> tuple[str | None, int]:
    """A compact nullable string whose length fits one varint byte (< 127 bytes)."""
    size = frame[pos]
    if size & 0x80:
        raise ValueError("long string: not for the fast path")
    if size == 0:
        return None, pos + 1
    end = pos + size
    return frame[pos + 1 : end].decode(), end


def _header(frame: bytes) -> tuple[RequestHeader, int]:
    """A request header v2 without tagged fields, and the position of the body after it.
    Raises ValueError for tagged fields (struct.error, IndexError for a short frame)."""
    api_key, version, correlation_id, client_size = _FIXED.unpack_from(frame, 0)
    pos = 10
    client_id = None
    if client_size >= 0:
        client_id = frame[pos : pos + client_size].decode()
        pos += client_size
    if frame[pos] != 0:
        raise ValueError("header tagged fields: not for the fast path")
    return new_request_header(api_key, version, correlation_id, client_id), pos + 1


def _small_count(byte: int) -> int:
    """A compact array's length from its one-byte varint (null and >= 127 items: no)."""
    if byte == 0 or byte & 0x80:
        raise ValueError("null or long array: not for the fast path")
    return byte - 1


def read_steady_consumer_heartbeat(
    frame: bytes,
) -> tuple[RequestHeader, str | None, str | None, int, str | None] | None:
    """A ConsumerGroupHeartbeat v1 whose optional fields are all null (RackId, then the
    steady tail): (header, group id, member id, member epoch, instance id), else None."""
    try:
        header, pos = _header(frame)
        group_id, pos = _compact_string(frame, pos)
        member_id, pos = _compact_string(frame, pos)
        (member_epoch,) = _I32.unpack_from(frame, pos)
        instance_id, pos = _compact_string(frame, pos + 4)
        if frame[pos] != 0 or frame[pos + 1 :] != _STEADY_TAIL:  # RackId, then the rest
            return None
    except _NOT_FAST:
        return None
    return header, group_id, member_id, member_epoch, instance_id


def read_offset_commit_v8_v9(
    frame: bytes, new_partition: Callable[[int, int, int, str | None], _P]
) -> tuple[RequestHeader, str, int, str, str | None, list[tuple[str, list[_P]]]] | None:
    """An OffsetCommit v8-v9 whose strings are shorter than 127 bytes, arrays shorter than
    127 items, and with no tagged fields: (header, group id, generation id or member
    epoch, member id, group instance id, [(topic, partitions)]), each partition made by
    `new_partition(index, committed offset, committed leader epoch, metadata)`; else None
    (also for a null group or member id: the codec's answer to a null where a string
    must be)."""
    try:
        header, pos = _header(frame)
        group_id, pos = _compact_string(frame, pos)
        (generation,) = _I32.unpack_from(frame, pos)
        pos += 4
        # Member id, instance id and metadata are mostly empty or null: read inline then
        # (a compact string's length byte is its length + 1, 0 for null).
        if frame[pos] == 1:
            member_id: str | None = ""
            pos += 1
        else:
            member_id, pos = _compact_string(frame, pos)
        if frame[pos] == 0:
            instance_id = None
            pos += 1
        else:
            instance_id, pos = _compact_string(frame, pos)
        topics: list[tuple[str, list[_P]]] = []
        for _ in range(_small_count(frame[pos])):
            name, pos = _compact_string(frame, pos + 1)
            if name is None:
                return None
            partitions: list[_P] = []
            for _ in range(_small_count(frame[pos])):
                index, offset, epoch = _PARTITION.unpack_from(frame, pos + 1)
                pos += 17
                size = frame[pos]
                metadata: str | None
                if size <= 1:
                    metadata = "" if size else None
                    pos += 1
                else:
                    metadata, pos = _compact_string(frame, pos)
                if frame[pos] != 0:  # partition tagged fields
                    return None
                partitions.append(new_partition(index, offset, epoch, metadata))
            pos += 1
            if frame[pos] != 0:  # topic tagged fields
                return None
            topics.append((name, partitions))
        pos += 1
        if frame[pos] != 0 or pos + 1 != len(frame):  # body tagged fields, then the end
            return None
    except _NOT_FAST:
        return None
    if group_id is None or member_id is None:
        return None
    return header, group_id, generation, member_id, instance_id, topics

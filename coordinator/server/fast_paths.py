"""Requests read from the raw frame, before the codec decodes them: the steady
ConsumerGroupHeartbeat (v1), the one request a consumer-protocol member sends every few
seconds for its whole life, and OffsetCommit v8-v9 of the usual shape, the request of a
commit load.

Why: the codec's decode (header, structural guard, native reader, entity objects) is the
largest single cost of a heartbeat that changes nothing, and about a seventh of a durable
commit's. These requests have a simple shape (a steady heartbeat: every optional field
null; a commit: short strings, small arrays, no tagged fields), so they are recognised
and read here with a few struct calls. Anything else (another shape, a long or malformed
frame, tagged fields, a shard that is not active, a heartbeat the shard does not take as
steady) returns None and the connection decodes the frame as usual: this path only
answers what the full path would answer (ConsumerGroupManager.steady, group_api.
offset_commit), never an error of its own.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from groupcoord.protocol.api import ApiKey
from groupcoord.protocol.header import RequestHeader, new_request_header

from ..groups.consumer.messages import HeartbeatResponse
from ..groups.offsets import OffsetCommitPartition, new_commit_partition
from ..groups.result import Reply, Result
from ..groups.shard import GroupShard
from ..runtime.runner import ShardState
from .group_api import consumer_heartbeat_response, offset_commit, run_on_shard

if TYPE_CHECKING:
    from .connection import Connection

_FIXED = struct.Struct(">hhih")  # api key, version, correlation id, client id length
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">iqi")  # index, committed offset, committed leader epoch
# RebalanceTimeoutMs -1, then null SubscribedTopicNames, SubscribedTopicRegex,
# ServerAssignor and TopicPartitions, and no tagged fields: a steady v1 request's tail.
_STEADY_TAIL = b"\xff\xff\xff\xff" + b"\x00" * 5

# (connection, frame) -> (the request's header, the response or a future of it), or None to
# decode the frame as usual.
FastPath = Callable[["Connection", bytes], "tuple[RequestHeader, Any] | None"]


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


def steady_consumer_heartbeat(conn: Connection, frame: bytes) -> tuple[RequestHeader, Any] | None:
    """A steady ConsumerGroupHeartbeat v1, answered by the shard's steady path."""
    try:
        header, pos = _header(frame)
        group_id, pos = _compact_string(frame, pos)
        member_id, pos = _compact_string(frame, pos)
        (member_epoch,) = _I32.unpack_from(frame, pos)
        instance_id, pos = _compact_string(frame, pos + 4)
        if frame[pos] != 0 or frame[pos + 1 :] != _STEADY_TAIL:  # RackId, then the rest
            return None
    except (struct.error, IndexError, ValueError):
        return None
    if not group_id or not member_id:
        return None
    runner = conn.server.coordinator.runner_for(group_id)
    if runner.state is not ShardState.ACTIVE:
        return None
    consumer = runner.shard.consumer
    if not consumer.is_steady(
        group_id,
        member_id,
        member_epoch,
        instance_id,
        header.client_id or "",
        conn.client_host,
    ):
        return None

    def event(shard: GroupShard, reply: Reply, now_ms: int) -> Result:
        # Runs at once (run_on_shard): nothing ran since is_steady accepted it.
        result = Result()
        result.reply(reply, shard.consumer.steady_answer(group_id, member_id, member_epoch))
        return result

    version = header.api_version
    return header, run_on_shard(
        conn,
        group_id,
        event,
        lambda answer: consumer_heartbeat_response(version, answer),
        lambda error: consumer_heartbeat_response(version, HeartbeatResponse(error_code=error)),
    )


def offset_commit_v8_v9(conn: Connection, frame: bytes) -> tuple[RequestHeader, Any] | None:
    """OffsetCommit v8-v9 whose strings are shorter than 127 bytes, arrays shorter than
    127 items, and with no tagged fields: read here, then answered by offset_commit."""
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
        topics: list[tuple[str, list[OffsetCommitPartition]]] = []
        for _ in range(_small_count(frame[pos])):
            name, pos = _compact_string(frame, pos + 1)
            if name is None:
                return None
            partitions: list[OffsetCommitPartition] = []
            for _ in range(_small_count(frame[pos])):
                index, offset, epoch = _PARTITION.unpack_from(frame, pos + 1)
                pos += 17
                size = frame[pos]
                if size <= 1:
                    metadata = "" if size else None
                    pos += 1
                else:
                    metadata, pos = _compact_string(frame, pos)
                if frame[pos] != 0:  # partition tagged fields
                    return None
                partitions.append(new_commit_partition(index, offset, epoch, metadata))
            pos += 1
            if frame[pos] != 0:  # topic tagged fields
                return None
            topics.append((name, partitions))
        pos += 1
        if frame[pos] != 0 or pos + 1 != len(frame):  # body tagged fields, then the end
            return None
    except (struct.error, IndexError, ValueError):
        return None
    if group_id is None or member_id is None:
        return None  # the codec's answer to a null where a string must be
    return header, offset_commit(
        conn, header.api_version, group_id, generation, member_id, instance_id, -1, topics
    )


def _small_count(byte: int) -> int:
    """A compact array's length from its one-byte varint (null and >= 127 items: no)."""
    if byte == 0 or byte & 0x80:
        raise ValueError("null or long array: not for the fast path")
    return byte - 1


FAST_PATHS: dict[tuple[int, int], FastPath] = {
    (int(ApiKey.CONSUMER_GROUP_HEARTBEAT), 1): steady_consumer_heartbeat,
    (int(ApiKey.OFFSET_COMMIT), 8): offset_commit_v8_v9,
    (int(ApiKey.OFFSET_COMMIT), 9): offset_commit_v8_v9,
}

__all__ = ["FAST_PATHS"]

"""Requests read from the raw frame, before the codec decodes them: the steady
ConsumerGroupHeartbeat (v1), the one request a consumer-protocol member sends every few
seconds for its whole life, and OffsetCommit v8-v9 of the usual shape, the request of a
commit load.

Why: the codec's decode (header, structural guard, native reader, entity objects) is the
largest single cost of a heartbeat that changes nothing, and about a seventh of a durable
commit's. These requests have a simple shape (a steady heartbeat: every optional field
null; a commit: short strings, small arrays, no tagged fields), so they are recognised
and read with a few struct calls (protocol/fast_frames.py). Anything else (another shape,
a long or malformed frame, tagged fields, a shard that is not active, a heartbeat the shard
does not take as steady) returns None and the connection decodes the frame as usual: this
path only answers what the full path would answer (the gateway's steady heartbeat, which
checks and answers in one shard event; offset_api.offset_commit), never an error of its
own.

With an authorizer (`ctx.authorizer.enabled`) the connection takes AUTHORIZED_FAST_PATHS
instead (`fast_paths_for`): the same reading, with Kafka's checks (READ on the group for
the heartbeat, a denial going down the full path, which answers it; the commit's checks
in offset_api.authorized_offset_commit). Without one, FAST_PATHS are exactly as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from groupcoord.protocol.api import ApiKey
from groupcoord.protocol.fast_frames import read_offset_commit_v8_v9, read_steady_consumer_heartbeat
from groupcoord.protocol.header import RequestHeader

from ..runtime.group_messages import new_commit_partition
from ..topics.access import GROUP, READ
from .consumer_group_api import HEARTBEAT_ANSWERS
from .context import GroupContext
from .offset_api import authorized_offset_commit, offset_commit

# (context, frame) -> (the request's header, the response or a Pending of it), or None to
# decode the frame as usual.
FastPath = Callable[[GroupContext, bytes], "tuple[RequestHeader, Any] | None"]

_STEADY_ANSWERS = HEARTBEAT_ANSWERS[1]


def steady_consumer_heartbeat(ctx: GroupContext, frame: bytes) -> tuple[RequestHeader, Any] | None:
    """A steady ConsumerGroupHeartbeat v1, answered by the shard's steady path."""
    read = read_steady_consumer_heartbeat(frame)
    if read is None:
        return None
    header, group_id, member_id, member_epoch, instance_id = read
    if not group_id or not member_id:
        return None
    return _steady_answer(ctx, header, group_id, member_id, member_epoch, instance_id)


def _steady_answer(
    ctx: GroupContext,
    header: RequestHeader,
    group_id: str,
    member_id: str,
    member_epoch: int,
    instance_id: str | None,
) -> tuple[RequestHeader, Any] | None:
    answer = ctx.groups.steady_consumer_group_heartbeat(
        group_id,
        member_id,
        member_epoch,
        instance_id,
        header.client_id or "",
        ctx.client_host,
        ctx.read_at,
        _STEADY_ANSWERS.respond,
        _STEADY_ANSWERS.failed,
    )
    if answer is None:
        return None
    return header, answer


def offset_commit_v8_v9(ctx: GroupContext, frame: bytes) -> tuple[RequestHeader, Any] | None:
    """OffsetCommit v8-v9 whose strings are shorter than 127 bytes, arrays shorter than
    127 items, and with no tagged fields: read from the frame, then answered by
    offset_commit."""
    read = read_offset_commit_v8_v9(frame, new_commit_partition)
    if read is None:
        return None
    header, group_id, generation, member_id, instance_id, topics = read
    return header, offset_commit(
        ctx, header.api_version, group_id, generation, member_id, instance_id, -1, topics
    )


def authorized_steady_consumer_heartbeat(
    ctx: GroupContext, frame: bytes
) -> tuple[RequestHeader, Any] | None:
    """`steady_consumer_heartbeat` for a principal with READ on the group; a denial takes
    the full path (handle_consumer_group_heartbeat answers and logs it)."""
    read = read_steady_consumer_heartbeat(frame)
    if read is None:
        return None
    header, group_id, member_id, member_epoch, instance_id = read
    if not group_id or not member_id or not ctx.authorized(READ, GROUP, group_id):
        return None
    return _steady_answer(ctx, header, group_id, member_id, member_epoch, instance_id)


def authorized_offset_commit_v8_v9(
    ctx: GroupContext, frame: bytes
) -> tuple[RequestHeader, Any] | None:
    """`offset_commit_v8_v9` answered by offset_api.authorized_offset_commit."""
    read = read_offset_commit_v8_v9(frame, new_commit_partition)
    if read is None:
        return None
    header, group_id, generation, member_id, instance_id, topics = read
    return header, authorized_offset_commit(
        ctx, header.api_version, group_id, generation, member_id, instance_id, -1, topics
    )


FAST_PATHS: dict[tuple[int, int], FastPath] = {
    (int(ApiKey.CONSUMER_GROUP_HEARTBEAT), 1): steady_consumer_heartbeat,
    (int(ApiKey.OFFSET_COMMIT), 8): offset_commit_v8_v9,
    (int(ApiKey.OFFSET_COMMIT), 9): offset_commit_v8_v9,
}

AUTHORIZED_FAST_PATHS: dict[tuple[int, int], FastPath] = {
    (int(ApiKey.CONSUMER_GROUP_HEARTBEAT), 1): authorized_steady_consumer_heartbeat,
    (int(ApiKey.OFFSET_COMMIT), 8): authorized_offset_commit_v8_v9,
    (int(ApiKey.OFFSET_COMMIT), 9): authorized_offset_commit_v8_v9,
}


def fast_paths_for(ctx: GroupContext) -> dict[tuple[int, int], FastPath]:
    """The fast paths of a connection with this context."""
    return AUTHORIZED_FAST_PATHS if ctx.authorizer.enabled else FAST_PATHS


__all__ = ["AUTHORIZED_FAST_PATHS", "FAST_PATHS", "fast_paths_for"]

"""Requests read from the raw frame (coordinator/server/fast_paths.py, with
protocol/fast_frames.py's readers), the steady
ConsumerGroupHeartbeat and OffsetCommit v8-v9: each answers exactly what the full path
answers, and declines (None) every frame it does not take, so the codec takes those; for
OffsetCommit also on random and mutated frames (differential fuzzing against the codec)."""

from __future__ import annotations

import datetime
import random
import struct
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.runtime.pending import Pending
from groupcoord.coordinator.server.consumer_group_api import handle_consumer_group_heartbeat
from groupcoord.coordinator.server.context import GroupContext
from groupcoord.coordinator.server.dispatch import build_dispatch
from groupcoord.coordinator.server.fast_paths import (
    FAST_PATHS,
    offset_commit_v8_v9,
    steady_consumer_heartbeat,
)
from groupcoord.coordinator.server.offset_api import handle_offset_commit
from groupcoord.protocol.api import RequestError, build, decode_request, encode_response
from tests.rawclient import encode_request, request_class
from tests.unit.handler_contexts import GroupTestbed, group_testbed

M = sys.modules[request_class(68, 1).__module__]
HANDLERS = build_dispatch()[0]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[GroupTestbed]:
    """A client's handler context over a gateway of two shards (no server, no sockets: the
    tests call the paths directly)."""
    async for testbed in group_testbed(tmp_path, shards=2):
        yield testbed


def _frame(**fields: Any) -> bytes:
    fields.setdefault("rebalance_timeout", datetime.timedelta(milliseconds=-1))
    body = build(M.ConsumerGroupHeartbeatRequest, **fields)
    return encode_request(68, 1, 7, body, client_id="client")[4:]


async def _answer(result: Any) -> Any:
    return await result if isinstance(result, Pending) else result


async def _taken_and_same_as_codec(ctx: GroupContext, frame: bytes) -> bool:
    """Hand `frame` to the fast path Connection._handle_frame would pick (by API key and
    version). Returns False when it declines; when it takes the frame, the codec must
    decode it too, with the same header, and the full path answer it with the same bytes."""
    path = FAST_PATHS.get(struct.unpack_from(">hh", frame)) if len(frame) >= 4 else None
    fast = None if path is None else path(ctx, frame)
    if fast is None:
        return False
    header, result = fast
    try:
        decoded = decode_request(frame, ctx.supported_versions)
    except RequestError as e:
        raise AssertionError(f"fast path took a frame the codec refuses: {frame!r}") from e
    assert header == decoded.header, frame
    key, version, correlation_id = (
        header.api_key,
        header.api_version,
        decoded.header.correlation_id,
    )
    got = encode_response(key, version, correlation_id, await _answer(result))
    full = HANDLERS[key](ctx, decoded)
    assert got == encode_response(key, version, correlation_id, await _answer(full)), frame
    return True


async def _steady_member(ctx: GroupContext) -> tuple[int, bytes]:
    """Member m1 of group g (topic t, 3 partitions) joined and past its first steady
    heartbeat: its epoch and the steady heartbeat frame the fast path takes."""
    ctx.topics.create("t", 3, {})
    sup = ctx.supported_versions
    join = _frame(
        group_id="g",
        member_id="m1",
        member_epoch=0,
        rebalance_timeout=datetime.timedelta(milliseconds=5000),
        subscribed_topic_names=("t",),
        topic_partitions=(),
    )
    assert steady_consumer_heartbeat(ctx, join) is None  # a join is not steady
    joined = await _answer(handle_consumer_group_heartbeat(ctx, decode_request(join, sup)))
    epoch = joined.member_epoch
    assert joined.error_code == 0 and epoch > 0

    steady = _frame(group_id="g", member_id="m1", member_epoch=epoch)
    # The first heartbeat of a new group checks the topic image once: the full path.
    assert steady_consumer_heartbeat(ctx, steady) is None
    await _answer(handle_consumer_group_heartbeat(ctx, decode_request(steady, sup)))
    return epoch, steady


async def test_fast_path_answers_as_the_full_path_and_declines_the_rest(
    server: GroupTestbed,
) -> None:
    ctx = server.context
    sup = ctx.supported_versions
    epoch, steady = await _steady_member(ctx)
    fast = steady_consumer_heartbeat(ctx, steady)
    assert fast is not None
    header, result = fast
    # Checked and answered in one shard event, with nothing written or in flight: the
    # response itself, not a Pending of it.
    assert not isinstance(result, Pending), result
    assert (header.api_key, header.api_version, header.correlation_id) == (68, 1, 7)
    assert header.client_id == "client"
    full = await _answer(handle_consumer_group_heartbeat(ctx, decode_request(steady, sup)))
    assert encode_response(68, 1, 7, await _answer(result)) == encode_response(68, 1, 7, full)

    declined = [
        _frame(group_id="g", member_id="m1", member_epoch=epoch + 1),  # fenced: full path
        _frame(group_id="g", member_id="nobody", member_epoch=epoch),
        _frame(group_id="other", member_id="m1", member_epoch=epoch),
        _frame(group_id="g", member_id="m1", member_epoch=epoch, rack_id="r"),
        _frame(group_id="g", member_id="m1", member_epoch=epoch, subscribed_topic_names=()),
        _frame(group_id="g", member_id="m1", member_epoch=epoch, topic_partitions=()),
        _frame(group_id="g", member_id="m1", member_epoch=epoch, server_assignor="range"),
        _frame(group_id="g", member_id="x" * 200, member_epoch=epoch),  # long string
        _frame(
            group_id="g",
            member_id="m1",
            member_epoch=epoch,
            rebalance_timeout=datetime.timedelta(milliseconds=5000),
        ),
        steady[:-1],  # truncated
        steady + b"\x00",  # trailing byte
    ]
    for frame in declined:
        assert steady_consumer_heartbeat(ctx, frame) is None, frame


def _commit_frame(version: int, topics: dict[str, list[tuple[int, int]]], **fields: Any) -> bytes:
    """An OffsetCommit frame; `topics`: name -> [(partition, offset)]."""
    m = sys.modules[request_class(8, version).__module__]
    fields.setdefault("group_id", "cg")
    fields.setdefault("generation_id_or_member_epoch", -1)
    fields.setdefault("member_id", "")
    fields.setdefault("group_instance_id", None)
    metadata = fields.pop("metadata", None)
    body = build(
        m.OffsetCommitRequest,
        topics=tuple(
            build(
                m.OffsetCommitRequestTopic,
                name=name,
                partitions=tuple(
                    build(
                        m.OffsetCommitRequestPartition,
                        partition_index=p,
                        committed_offset=o,
                        committed_leader_epoch=3,
                        committed_metadata=metadata,
                    )
                    for p, o in parts
                ),
            )
            for name, parts in topics.items()
        ),
        **fields,
    )
    return encode_request(8, version, 9, body, client_id="committer")[4:]


async def test_offset_commit_fast_path_answers_as_the_full_path(server: GroupTestbed) -> None:
    """OffsetCommit v8-v9 read from the frame: the same response bytes as the codec's path
    for every shape it takes (one or many partitions and topics, unknown topics and
    partitions, metadata, instance ids, member commits to an unknown group), the same
    committed offsets, and None for the shapes it leaves to the codec."""
    ctx = server.context
    ctx.topics.create("t", 3, {})
    ctx.topics.create("u", 1, {})
    sup = ctx.supported_versions
    taken = [
        _commit_frame(9, {"t": [(0, 10)]}),
        _commit_frame(8, {"t": [(1, 11), (2, 12)], "u": [(0, 5)]}, metadata="meta"),
        _commit_frame(9, {"t": [(0, 13), (7, 1)], "nope": [(0, 1)]}),  # unknown ones
        _commit_frame(9, {"t": [(0, 14)]}, group_instance_id="i-1"),
        _commit_frame(9, {"t": [(0, 15)]}, generation_id_or_member_epoch=4, member_id="m"),
        _commit_frame(9, {"t": [(0, 16)]}, group_id=""),
        _commit_frame(9, {}),
    ]
    for frame in taken:
        fast = offset_commit_v8_v9(ctx, frame)
        assert fast is not None, frame
        header, result = fast
        version = header.api_version
        assert (header.api_key, header.correlation_id) == (8, 9)
        assert header.client_id == "committer"
        got = encode_response(8, version, 9, await _answer(result))
        full = handle_offset_commit(ctx, decode_request(frame, sup))
        assert got == encode_response(8, version, 9, await _answer(full)), frame
    offsets = server.coordinator.runner_for("cg").shard.offsets

    def committed(topic: str, partition: int) -> int | None:
        entry = offsets.get("cg", topic, partition)
        return None if entry is None else entry.offset

    assert committed("t", 0) == 14  # the last accepted commit (the member one: rejected)
    assert (committed("t", 1), committed("u", 0), committed("t", 7)) == (11, 5, None)

    frame = taken[0]
    declined = [
        _commit_frame(9, {"t": [(0, 1)]}, group_id="g" * 200),  # long string
        _commit_frame(9, {"t": [(p % 3, 1) for p in range(130)]}),  # long array
        frame[:-1],  # truncated
        frame + b"\x00",  # trailing byte
        frame[:-1] + b"\x01",  # body tagged fields
    ]
    for frame in declined:
        assert offset_commit_v8_v9(ctx, frame) is None, frame


async def test_offset_commit_answers_the_refused_partitions_first(server: GroupTestbed) -> None:
    """As Kafka (OffsetCommitResponse.Builder.merge): the partitions refused before the
    coordinator (UNKNOWN_TOPIC_OR_PARTITION) come first, in the request's order, then the
    coordinator's answer, whose partitions join a topic already listed."""
    ctx = server.context
    ctx.topics.create("t", 3, {})
    frame = _commit_frame(9, {"t": [(0, 13), (7, 1)], "nope": [(0, 1)], "u": [(9, 1)]})
    fast = offset_commit_v8_v9(ctx, frame)
    assert fast is not None
    full = handle_offset_commit(ctx, decode_request(frame, ctx.supported_versions))
    for answer in (fast[1], full):
        response = await _answer(answer)
        got = [
            (t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in response.topics
        ]
        assert got == [("t", [(7, 3), (0, 0)]), ("nope", [(0, 3)]), ("u", [(9, 3)])]


async def test_offset_commit_fast_path_never_takes_a_frame_the_codec_reads_otherwise(
    server: GroupTestbed,
) -> None:
    """Differential fuzzing: valid OffsetCommit v8-v9 frames of random shapes, and the same
    frames with a byte changed, cut short or grown. For each frame the fast path either
    declines it (None) or the codec decodes it too and answers with the same bytes: it
    never accepts a frame the codec refuses as malformed, nor reads a field differently."""
    ctx = server.context
    ctx.topics.create("t", 3, {})
    rng = random.Random(20261125)
    names = ["t", "u", "", "x" * 126, "y" * 127]
    frames: list[bytes] = []
    valid: set[bytes] = set()
    for _ in range(300):
        topics = {
            rng.choice(names): [(rng.randrange(-1, 4), rng.randrange(-2, 1 << 40))]
            * rng.randrange(0, 3)
            for _ in range(rng.randrange(0, 3))
        }
        frame = _commit_frame(
            rng.choice([8, 9]),
            topics,
            group_id=rng.choice(["cg", "", "g" * 126, "g" * 127]),
            group_instance_id=rng.choice([None, "", "i"]),
            metadata=rng.choice([None, "", "m" * 130]),
        )
        frames.append(frame)
        valid.add(frame)
        cut = rng.randrange(len(frame))
        flipped = bytearray(frame)
        flipped[cut] = rng.randrange(256)
        frames += [bytes(flipped), frame[:cut], frame + bytes([rng.randrange(256)])]
    taken = {True: 0, False: 0}  # valid frames, mutants
    for frame in frames:
        taken[frame in valid] += await _taken_and_same_as_codec(ctx, frame)
    # Both kinds were compared: the valid frames of short fields, and mutants the fast path
    # could read (a changed offset or partition index, say).
    assert taken[True] > 100 and taken[False] > 20, taken


async def test_steady_heartbeat_fast_path_on_mutated_frames_answers_as_the_codec(
    server: GroupTestbed,
) -> None:
    """Differential fuzzing: a steady member's heartbeat with each byte changed in turn (to
    random values), cut short or grown. The fast path declines a frame, or the codec decodes
    it too (same header) and the full path answers with the same bytes."""
    ctx = server.context
    _, steady = await _steady_member(ctx)
    rng = random.Random(20261125)
    frames = [steady[:cut] for cut in range(len(steady))] + [steady + b"\x00", steady + b"\x01"]
    for pos in range(len(steady)):
        for value in rng.sample(range(256), 8):
            mutant = bytearray(steady)
            mutant[pos] = value
            frames.append(bytes(mutant))
    taken = 0
    for frame in frames:
        taken += await _taken_and_same_as_codec(ctx, frame)
    # Mutants of the correlation id and client id are still steady heartbeats: compared.
    assert taken > 20, taken

"""Group API handlers called directly (no sockets, no server) with a handler context over a
gateway of two shards on a temp dir, each request encoded and decoded by the real codec:
answers that depend on a shard's state."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.runtime.runner import ShardState
from groupcoord.coordinator.server.dispatch import build_dispatch
from groupcoord.protocol.api import build, decode_request
from groupcoord.protocol.errors import ErrorCode
from tests.rawclient import encode_request, request_class
from tests.unit.handler_contexts import GroupTestbed, group_testbed

HANDLERS, VERSIONS = build_dispatch()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[GroupTestbed]:
    async for testbed in group_testbed(tmp_path, shards=2):
        yield testbed


async def test_a_handler_context_needs_only_the_shards_it_is_given(
    server: GroupTestbed, tmp_path: Path
) -> None:
    """The handlers below run on a context of two shards: two shard logs, not a server's
    fifty, and no listener."""
    logs = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("__consumer_offsets"))
    assert logs == ["__consumer_offsets-0", "__consumer_offsets-1"]
    assert [r.state for r in server.coordinator.runners] == [ShardState.ACTIVE] * 2


def _offset_fetch(server: GroupTestbed, version: int) -> Any:
    m = sys.modules[request_class(9, version).__module__]
    body = build(
        m.OffsetFetchRequest,
        group_id="g",
        topics=(
            build(m.OffsetFetchRequestTopic, name="t", partition_indexes=(0, 2)),
            build(m.OffsetFetchRequestTopic, name="u", partition_indexes=(1,)),
        ),
        require_stable=False,
    )
    frame = encode_request(9, version, 3, body)[4:]
    request = decode_request(frame, VERSIONS)
    return HANDLERS[9](server.context, request)


@pytest.mark.parametrize(
    ("state", "error"),
    [
        (ShardState.LOADING, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
        (ShardState.FAILED, ErrorCode.NOT_COORDINATOR),
    ],
)
async def test_offset_fetch_v1_puts_the_group_error_on_every_requested_partition(
    server: GroupTestbed, state: ShardState, error: ErrorCode
) -> None:
    """OffsetFetch v0-v1 have no top-level error: a group the shard cannot answer for yet
    must not read as "nothing committed" (the client would apply auto.offset.reset). As
    Kafka's getErrorResponse: each requested partition, offset -1, with the error. From v2
    the error is top-level."""
    runner = server.coordinator.runner_for("g")
    runner.state = state
    try:
        v1 = _offset_fetch(server, 1)
        v2 = _offset_fetch(server, 2)
    finally:
        runner.state = ShardState.ACTIVE
    got = {
        (t.name, p.partition_index): (p.committed_offset, p.error_code)
        for t in v1.topics
        for p in t.partitions
    }
    assert got == {("t", 0): (-1, error), ("t", 2): (-1, error), ("u", 1): (-1, error)}
    assert v2.error_code == error


def _list_groups(server: GroupTestbed) -> Any:
    m = sys.modules[request_class(16, 5).__module__]
    body = build(m.ListGroupsRequest, states_filter=(), types_filter=())
    frame = encode_request(16, 5, 4, body)[4:]
    request = decode_request(frame, VERSIONS)
    return HANDLERS[16](server.context, request)


async def test_list_groups_skips_a_failed_shard_and_fails_whole_while_one_loads(
    server: GroupTestbed,
) -> None:
    """Kafka's listGroups swallows NOT_COORDINATOR per partition (a failed shard's groups
    are just not listed) but fails the whole listing with any other error: while a shard
    loads, COORDINATOR_LOAD_IN_PROGRESS and no groups, never a partial list with it."""
    ids = ["g-a", "g-b"]
    runners = [server.coordinator.runner_for(g) for g in ids]
    assert runners[0] is not runners[1]
    for group_id, runner in zip(ids, runners, strict=True):
        runner.shard.get_or_create_classic_group(group_id, 0)
    listed = _list_groups(server)
    assert (listed.error_code, sorted(g.group_id for g in listed.groups)) == (ErrorCode.NONE, ids)
    runners[1].state = ShardState.FAILED
    try:
        listed = _list_groups(server)
        assert (listed.error_code, [g.group_id for g in listed.groups]) == (ErrorCode.NONE, ["g-a"])
        runners[1].state = ShardState.LOADING
        listed = _list_groups(server)
        assert (listed.error_code, listed.groups) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ())
    finally:
        runners[1].state = ShardState.ACTIVE

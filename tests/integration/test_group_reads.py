"""The three ways to read groups -- DescribeGroups, ListGroups and ConsumerGroupDescribe --
agree while a rebalance is in flight: each is a read of the groups' shards after the writes
before it, so none answers with state whose records are not yet durable, and once they are
(or once they failed) all three show the same groups in the same states.

The server runs in the test's process (its sockets are real, the clients raw ones on worker
threads) so that its fsyncs can be held, or made to fail: a classic group's only member
leaves and a consumer group gets a second member, both written but not yet acknowledged,
and the three reads are sent meanwhile on another connection."""

from __future__ import annotations

import asyncio
import datetime
import errno
import os
import select
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader

from groupcoord.coordinator.runtime.partitioning import shard_for
from groupcoord.coordinator.runtime.runner import ShardState
from groupcoord.coordinator.server.app import Server
from groupcoord.protocol.api import build, response_schema
from groupcoord.protocol.errors import ErrorCode
from tests.integration.raw_groups import join_until_member, sync
from tests.rawclient import RawClient, encode_request, request_class
from tests.unit.server_support import started_server

SHARDS = 3
CLASSIC = "kg"  # shard 0 of 3
CONSUMER = "cg"  # shard 1 of 3
JOIN_GROUP, LEAVE_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 11, 13, 15, 16
HEARTBEAT, DESCRIBE = 68, 69
HELD_S = 0.3  # how long a read must stay unanswered while the writes before it are held


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    assert shard_for(CLASSIC, SHARDS) != shard_for(CONSUMER, SHARDS)
    async for started in started_server(
        tmp_path / "data",
        offsets_partitions=SHARDS,
        group_initial_rebalance_delay_ms=0,
        group_consumer_assignment_interval_ms=0,
        syncfs_min_logs=1000,  # every log of a round fsynced by os.fsync: the gate holds it
    ):
        yield started


class FsyncGate:
    """While closed, every os.fsync waits for `open()`; a failing gate then raises EIO for
    the fsyncs it held (later ones go through)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: bool) -> None:
        self.entered = threading.Event()
        self._released = threading.Event()
        self._closed = True
        self._fail = fail
        real_fsync = os.fsync

        def gated_fsync(fd: int) -> None:
            if self._closed:
                self.entered.set()
                self._released.wait(30)
                if self._fail:
                    raise OSError(errno.EIO, "fsync failed (test)")
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", gated_fsync)

    def open(self) -> None:
        self._closed = False
        self._released.set()


# -- requests, as frames and as pipelined sends ------------------------------------------------


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def consumer_join(member_id: str, correlation_id: int) -> bytes:
    m = _m(HEARTBEAT, 1)
    body = build(
        m.ConsumerGroupHeartbeatRequest,
        group_id=CONSUMER,
        member_id=member_id,
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout=datetime.timedelta(milliseconds=30_000),
        subscribed_topic_names=("t",),
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=(),
    )
    return encode_request(HEARTBEAT, 1, correlation_id, body)


def classic_leave(member_id: str, correlation_id: int) -> bytes:
    m = _m(LEAVE_GROUP, 5)
    body = build(
        m.LeaveGroupRequest,
        group_id=CLASSIC,
        members=(
            build(m.MemberIdentity, member_id=member_id, group_instance_id=None, reason=None),
        ),
    )
    return encode_request(LEAVE_GROUP, 5, correlation_id, body)


def read_requests() -> list[tuple[str, int, int, bytes]]:
    """(name, api key, version, frame): DescribeGroups v5, ListGroups v5 and
    ConsumerGroupDescribe v0 of both groups."""
    describe_groups = build(
        _m(DESCRIBE_GROUPS, 5).DescribeGroupsRequest,
        groups=(CLASSIC, CONSUMER),
        include_authorized_operations=False,
    )
    list_groups = build(_m(LIST_GROUPS, 5).ListGroupsRequest, states_filter=(), types_filter=())
    consumer_describe = build(
        _m(DESCRIBE, 0).ConsumerGroupDescribeRequest,
        group_ids=(CLASSIC, CONSUMER),
        include_authorized_operations=False,
    )
    return [
        (
            "DescribeGroups",
            DESCRIBE_GROUPS,
            5,
            encode_request(DESCRIBE_GROUPS, 5, 1, describe_groups),
        ),
        ("ListGroups", LIST_GROUPS, 5, encode_request(LIST_GROUPS, 5, 1, list_groups)),
        ("ConsumerGroupDescribe", DESCRIBE, 0, encode_request(DESCRIBE, 0, 1, consumer_describe)),
    ]


def receive(client: RawClient, api_key: int, version: int) -> Any:
    frame = client.recv_frame()
    cls = response_schema(api_key, version)
    pos = 4 + (1 if cls.__flexible__ else 0)  # correlation id, response header tags
    value, _ = entity_reader(cls)(frame, pos)
    return value


class Readers:
    """The three reads, each sent on its own connection: which were answered early, and
    their answers."""

    def __init__(self, bootstrap: str) -> None:
        self.requests = read_requests()
        self.clients = [RawClient(bootstrap) for _ in self.requests]
        for client, (_, _, _, frame) in zip(self.clients, self.requests, strict=True):
            client.send(frame)

    def answered_within(self, seconds: float) -> list[str]:
        """The reads some response byte reached within `seconds` (nothing is read)."""
        time.sleep(seconds)
        readable, _, _ = select.select([c.sock for c in self.clients], [], [], 0)
        return [
            name
            for (name, _, _, _), client in zip(self.requests, self.clients, strict=True)
            if client.sock in readable
        ]

    def answers(self) -> Reads:
        return Reads(
            [
                receive(client, key, version)
                for client, (_, key, version, _) in zip(self.clients, self.requests, strict=True)
            ]
        )

    def close(self) -> None:
        for client in self.clients:
            client.close()


class Reads:
    """The three reads' answers: {group: (type, state)} listed, and each describe path's
    {group: (error, state, member ids)}."""

    def __init__(self, answers: list[Any]) -> None:
        described, listed, consumer_described = answers
        assert listed.error_code == ErrorCode.NONE
        self.listed = {g.group_id: (g.group_type, g.group_state) for g in listed.groups}
        self.classic = {
            g.group_id: (g.error_code, g.group_state, sorted(m.member_id for m in g.members))
            for g in described.groups
        }
        self.consumer = {
            g.group_id: (g.error_code, g.group_state, sorted(m.member_id for m in g.members))
            for g in consumer_described.groups
        }


def read_all(bootstrap: str) -> Reads:
    readers = Readers(bootstrap)
    try:
        return readers.answers()
    finally:
        readers.close()


# -- the groups before the rebalance -------------------------------------------------------------


def form_groups(bootstrap: str) -> str:
    """A Stable classic group of one member and a consumer group of one member, both
    durable; returns the classic member's id."""
    with RawClient(bootstrap) as client:
        joined = join_until_member(
            client, CLASSIC, session_timeout_ms=60_000, rebalance_timeout_ms=60_000
        )
        assert joined.error_code == ErrorCode.NONE
        synced = sync(
            client, CLASSIC, joined.generation_id, joined.member_id, {joined.member_id: b""}
        )
        assert synced.error_code == ErrorCode.NONE
        client.send(consumer_join("c1", 9))
        assert receive(client, HEARTBEAT, 1).error_code == ErrorCode.NONE
    return str(joined.member_id)


async def start_rebalance(server: Server, gate: FsyncGate, member_id: str) -> RawClient:
    """The classic member leaves and consumer member c2 joins, pipelined on one connection
    while fsyncs are held: both written, applied, not acknowledged. Returns that client."""
    writer = RawClient(f"127.0.0.1:{server.node.port}")
    writer.send(consumer_join("c2", 1) + classic_leave(member_id, 2))
    consumer = server.coordinator.runner_for(CONSUMER).shard
    classic = server.coordinator.runner_for(CLASSIC).shard
    for _ in range(1000):
        group = consumer.consumer_group(CONSUMER)
        applied = group is not None and "c2" in group.members and not classic.groups[CLASSIC].size
        if applied and gate.entered.is_set():
            return writer
        await asyncio.sleep(0.01)
    raise AssertionError("the rebalance's writes were not applied and held")


async def read_during_rebalance(
    server: Server, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> tuple[str, Reads, Any, Any]:
    """Both groups formed, then a rebalance whose fsync is held (`fail`: then fails) while
    the three reads are sent on connections of their own: none may be answered while it is
    held. Returns the bootstrap address, the reads' answers once the gate opened, and the
    answers to the rebalance's own heartbeat and leave."""
    server.topics.create("t", 2, {})
    bootstrap = f"127.0.0.1:{server.node.port}"
    member_id = await asyncio.to_thread(form_groups, bootstrap)
    gate = FsyncGate(monkeypatch, fail=fail)
    writer = await start_rebalance(server, gate, member_id)
    try:
        readers = Readers(bootstrap)
        try:
            early = await asyncio.to_thread(readers.answered_within, HELD_S)
            gate.open()
            got = await asyncio.to_thread(readers.answers)
        finally:
            readers.close()
        assert early == [], "answered before the writes before them were durable"
        joined = await asyncio.to_thread(receive, writer, HEARTBEAT, 1)
        left = await asyncio.to_thread(receive, writer, LEAVE_GROUP, 5)
    finally:
        gate.open()
        writer.close()
    return bootstrap, got, joined, left


async def test_the_three_reads_wait_for_the_rebalance_and_then_agree(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads sent while a rebalance's records are held in their fsync are not answered
    before the records are durable (DescribeGroups and ListGroups used to read the shards
    at once); then the three agree on both groups: the classic one Empty, the consumer one
    with both members, each described as its own kind only."""
    bootstrap, got, joined, left = await read_during_rebalance(server, monkeypatch, fail=False)
    assert joined.error_code == left.error_code == ErrorCode.NONE
    consumer_state = got.consumer[CONSUMER][1]
    assert got.listed == {CLASSIC: ("classic", "Empty"), CONSUMER: ("consumer", consumer_state)}
    assert got.classic[CLASSIC] == (ErrorCode.NONE, "Empty", [])
    assert got.consumer[CONSUMER] == (ErrorCode.NONE, consumer_state, ["c1", "c2"])
    # Each group is described by its own kind's API only, as Kafka.
    assert got.classic[CONSUMER][:2] == (ErrorCode.NONE, "Dead")
    assert got.consumer[CLASSIC][0] == ErrorCode.GROUP_ID_NOT_FOUND
    # Read again with nothing in flight: the same answers.
    again = await asyncio.to_thread(read_all, bootstrap)
    assert (again.listed, again.classic, again.consumer) == (got.listed, got.classic, got.consumer)


async def test_no_read_shows_a_rebalance_whose_write_failed(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same reads while the rebalance's fsync fails: none shows the state whose write
    failed (DescribeGroups and ListGroups used to show the classic group Empty and the
    consumer group with c2 before the failure was known). The groups' shards answer
    NOT_COORDINATOR and reload from their logs; ListGroups skips them (Kafka swallows
    NOT_COORDINATOR). Once reloaded, the three agree again on what the logs hold."""
    bootstrap, got, joined, left = await read_during_rebalance(server, monkeypatch, fail=True)
    assert joined.error_code == left.error_code == ErrorCode.NOT_COORDINATOR
    assert got.listed == {}
    assert {g: answer[0] for g, answer in got.classic.items()} == {
        CLASSIC: ErrorCode.NOT_COORDINATOR,
        CONSUMER: ErrorCode.NOT_COORDINATOR,
    }
    assert {g: answer[0] for g, answer in got.consumer.items()} == {
        CLASSIC: ErrorCode.NOT_COORDINATOR,
        CONSUMER: ErrorCode.NOT_COORDINATOR,
    }
    for _ in range(1000):
        if all(r.state is ShardState.ACTIVE for r in server.coordinator.runners):
            break
        await asyncio.sleep(0.01)
    after = await asyncio.to_thread(read_all, bootstrap)
    assert set(after.listed) == {CLASSIC, CONSUMER}
    classic_state, consumer_state = after.classic[CLASSIC][1], after.consumer[CONSUMER][1]
    assert after.listed == {
        CLASSIC: ("classic", classic_state),
        CONSUMER: ("consumer", consumer_state),
    }
    assert after.classic[CLASSIC][0] == after.consumer[CONSUMER][0] == ErrorCode.NONE

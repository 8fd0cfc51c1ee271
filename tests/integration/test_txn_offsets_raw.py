"""TxnOffsetCommit (API 28) over the wire with a raw client: offsets pending until their
transaction's marker (which only the transaction coordinator sends: the end-to-end tests
drive it), OffsetFetch with require_stable answering UNSTABLE_OFFSET_COMMIT for them and
without it the last committed offset, pending offsets surviving a SIGKILL, and the classic
group's KIP-447 fencing (generation, member id, group instance id), and the KIP-1251
cases on a consumer group."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.protocol.api import build
from groupcoord.protocol.errors import ErrorCode
from tests.integration.raw_groups import commit, join_until_member, sync
from tests.integration.test_clients import create_topic
from tests.integration.test_kip848_raw import RawMember, owned_of
from tests.integration.test_txn_coordinator import add_offsets, init_pid
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving

TXN_OFFSET_COMMIT = 28
OFFSET_FETCH = 9


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", group_initial_rebalance_delay_ms=0) as proc:
        yield proc


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


# The transactional producer "tx" of each server (by address): (producer id, epoch).
_PRODUCERS: dict[Any, tuple[int, int]] = {}


def _producer(client: RawClient) -> tuple[int, int]:
    """The server's transactional producer "tx", initialised once (InitProducerId), as the
    commits of a real producer come from one: the transaction coordinator is asked about the
    group's offsets partition before a commit is written (KIP-890)."""
    server = client.sock.getpeername()
    if server not in _PRODUCERS:
        deadline = time.monotonic() + 30
        answer = init_pid(client, "tx")
        # A transaction left open (by a server killed before) is aborted first: retried.
        while answer.error_code == ErrorCode.CONCURRENT_TRANSACTIONS:
            assert time.monotonic() < deadline, answer
            time.sleep(0.05)
            answer = init_pid(client, "tx")
        assert answer.error_code == 0, answer
        _PRODUCERS[server] = (answer.producer_id, answer.producer_epoch)
    return _PRODUCERS[server]


def txn_commit(
    client: RawClient,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
    version: int = 3,
    producer_id: int | None = None,
    producer_epoch: int = 0,
) -> dict[tuple[str, int], int]:
    """A TxnOffsetCommit of the server's producer "tx"; before v5 (transactions V1) it adds
    the group's offsets partition to its transaction first (AddOffsetsToTxn), as a client
    does; v5 has the server add it. With `producer_id` (and `producer_epoch`): that
    producer's commit, its transaction already holding the group (the caller added it)."""
    if producer_id is None:
        producer_id, producer_epoch = _producer(client)
        if version < 5:
            assert add_offsets(client, "tx", producer_id, producer_epoch, group) == 0
    m = _m(TXN_OFFSET_COMMIT, version)
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            build(
                m.TxnOffsetCommitRequestPartition,
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata="",
            )
        )
    response = client.request(
        TXN_OFFSET_COMMIT,
        version,
        build(
            m.TxnOffsetCommitRequest,
            transactional_id="tx",
            group_id=group,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            topics=tuple(
                build(m.TxnOffsetCommitRequestTopic, name=name, partitions=tuple(parts))
                for name, parts in topics.items()
            ),
        ),
    )
    return {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


def fetch(
    client: RawClient, group: str, partitions: list[int], require_stable: bool, version: int = 7
) -> tuple[int, dict[int, tuple[int, int]]]:
    """(group- or top-level error, {partition: (offset, error)}) of topic "t"."""
    m = _m(OFFSET_FETCH, version)
    if version >= 8:
        request = build(
            m.OffsetFetchRequest,
            groups=(
                build(
                    m.OffsetFetchRequestGroup,
                    group_id=group,
                    topics=(
                        build(
                            m.OffsetFetchRequestTopics,
                            name="t",
                            partition_indexes=tuple(partitions),
                        ),
                    ),
                ),
            ),
            require_stable=require_stable,
        )
        response = client.request(OFFSET_FETCH, version, request)
        (answer,) = response.groups
    else:
        request = build(
            m.OffsetFetchRequest,
            group_id=group,
            topics=(
                build(m.OffsetFetchRequestTopic, name="t", partition_indexes=tuple(partitions)),
            ),
            require_stable=require_stable,
        )
        answer = response = client.request(OFFSET_FETCH, version, request)
    return answer.error_code, {
        p.partition_index: (p.committed_offset, p.error_code)
        for t in answer.topics
        for p in t.partitions
    }


UNSTABLE = ErrorCode.UNSTABLE_OFFSET_COMMIT


def test_pending_offsets_are_unstable_and_survive_a_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serving(data) as first:
        create_topic(first.bootstrap, "t", 3)
        with RawClient(first.bootstrap) as client:
            assert (
                commit(client, "g", {("t", 0): 5, ("t", 1): 6}).topics[0].partitions[0].error_code
                == 0
            )
            assert txn_commit(client, "g", {("t", 0): 50, ("t", 2): 70}) == {
                ("t", 0): 0,
                ("t", 2): 0,
            }
            for version in (7, 8, 9):
                assert fetch(client, "g", [0, 1, 2], True, version) == (
                    0,
                    {0: (-1, UNSTABLE), 1: (6, 0), 2: (-1, UNSTABLE)},
                )
                assert fetch(client, "g", [0, 1, 2], False, version) == (
                    0,
                    {0: (5, 0), 1: (6, 0), 2: (-1, 0)},
                )
        first.kill()
    with serving(data) as second, RawClient(second.bootstrap) as client:
        assert fetch(client, "g", [0, 1, 2], True) == (
            0,
            {0: (-1, UNSTABLE), 1: (6, 0), 2: (-1, UNSTABLE)},
        )
        assert fetch(client, "g", [0, 1, 2], False) == (0, {0: (5, 0), 1: (6, 0), 2: (-1, 0)})
        # The group is kept (not empty of pending offsets); an unknown partition is refused.
        assert txn_commit(client, "g", {("t", 9): 1, ("u", 0): 1}) == {
            ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("u", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }


def test_classic_group_fencing(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "t", 1)
    with RawClient(server.bootstrap) as client:
        joined = join_until_member(client, "cg", instance_id="static-1")
        assert joined.error_code == 0
        member, generation = joined.member_id, joined.generation_id
        assert sync(client, "cg", generation, member, instance_id="static-1").error_code == 0
        ok = {("t", 0): 0}
        assert (
            txn_commit(client, "cg", {("t", 0): 1}, generation=generation, member_id=member) == ok
        )
        assert txn_commit(
            client, "cg", {("t", 0): 1}, generation=generation + 1, member_id=member
        ) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
        assert txn_commit(
            client, "cg", {("t", 0): 1}, generation=generation, member_id="nobody"
        ) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert txn_commit(
            client,
            "cg",
            {("t", 0): 1},
            generation=generation,
            member_id="other",
            instance_id="static-1",
        ) == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
        # Old clients (v0-v2, no member information) are accepted, as by Kafka.
        for version in (0, 2):
            assert txn_commit(client, "cg", {("t", 0): 2}, version=version) == ok
        # A missing group with a generation: ILLEGAL_GENERATION; with -1 a simple group.
        assert txn_commit(client, "missing", {("t", 0): 1}, generation=3, member_id="m") == {
            ("t", 0): ErrorCode.ILLEGAL_GENERATION
        }
        assert txn_commit(client, "simple", {("t", 0): 1}) == ok


def test_kip1251_fencing_of_transactional_commits(tmp_path: Path) -> None:
    """Issue 18's KIP-1251 cases on TxnOffsetCommit v5 in a consumer group, driven by raw
    ConsumerGroupHeartbeats: the previous epoch for a partition still owned is accepted, a
    zombie commit for a partition given to another member and an epoch above the member's
    are ILLEGAL_GENERATION (not STALE_MEMBER_EPOCH), and a mixed request writes nothing."""
    with serving(
        tmp_path / "data",
        group_consumer_assignment_interval_ms=0,
        group_consumer_session_timeout_ms=20000,
    ) as proc:
        topic, group = "t", "g-txn-1251"
        create_topic(proc.bootstrap, topic, 4)
        a = RawMember(proc.bootstrap, group, [topic])
        b = RawMember(proc.bootstrap, group, [topic])
        try:
            a.join()
            e1 = a.epoch
            (topic_id,) = a.assigned
            b.join()
            e2 = b.epoch
            assert a.beat(owned_of(topic_id, {0, 1, 2, 3})).member_epoch == e1
            kept = a.partitions()
            moved = {0, 1, 2, 3} - kept
            keep_p, move_p = min(kept), min(moved)
            assert a.ack().error_code == 0 and a.epoch == e2
            assert b.ack().error_code == 0 and b.partitions() == moved

            def commit_at(offsets: dict[int, int], epoch: int) -> dict[int, int]:
                answer = txn_commit(
                    a.client,
                    group,
                    {("t", p): o for p, o in offsets.items()},
                    generation=epoch,
                    member_id=a.member_id,
                    version=5,
                )
                return {p: e for (_, p), e in answer.items()}

            assert commit_at({keep_p: 10}, e1) == {keep_p: ErrorCode.NONE}
            assert commit_at({move_p: 11}, e1) == {move_p: ErrorCode.ILLEGAL_GENERATION}
            assert commit_at({keep_p: 12}, e2 + 1) == {keep_p: ErrorCode.ILLEGAL_GENERATION}
            assert commit_at({keep_p: 13, move_p: 13}, e1) == {
                keep_p: ErrorCode.ILLEGAL_GENERATION,
                move_p: ErrorCode.ILLEGAL_GENERATION,
            }
            # Only the accepted commit is pending: the mixed request wrote nothing.
            assert fetch(a.client, group, [keep_p, move_p], True) == (
                0,
                {keep_p: (-1, UNSTABLE), move_p: (-1, 0)},
            )
        finally:
            a.close()
            b.close()

"""TxnOffsetCommit (API 28) over the wire with a raw client: offsets pending until their
transaction's marker (which only the transaction coordinator sends: the end-to-end tests
drive it), OffsetFetch with require_stable answering UNSTABLE_OFFSET_COMMIT for them and
without it the last committed offset, pending offsets surviving a SIGKILL, and the classic
group's KIP-447 fencing (generation, member id, group instance id), and the KIP-1251
cases on a consumer group."""

from __future__ import annotations

import datetime
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
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving

TXN_OFFSET_COMMIT = 28
OFFSET_FETCH = 9
INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN, END_TXN, DESCRIBE_TRANSACTIONS = 22, 25, 26, 65
RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.CONCURRENT_TRANSACTIONS,
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", group_initial_rebalance_delay_ms=0) as proc:
        yield proc


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def open_transaction(client: RawClient, groups: list[str]) -> dict[str, int]:
    """InitProducerId for transactional id "tx" and AddOffsetsToTxn of `groups`, as a
    producer does before TxnOffsetCommit (the broker verifies that the group's offsets
    partition is in the transaction, as Kafka's does): txn_commit's producer arguments."""
    init = _m(INIT_PRODUCER_ID, 4)
    deadline = time.monotonic() + 30
    while True:
        answer = client.request(
            INIT_PRODUCER_ID,
            4,
            build(
                init.InitProducerIdRequest,
                transactional_id="tx",
                transaction_timeout=datetime.timedelta(minutes=5),
                producer_id=-1,
                producer_epoch=-1,
            ),
        )
        if answer.error_code not in RETRIABLE or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer.error_code == ErrorCode.NONE, answer
    producer = {"producer_id": answer.producer_id, "producer_epoch": answer.producer_epoch}
    add = _m(ADD_OFFSETS_TO_TXN, 3)
    for group in groups:
        added = client.request(
            ADD_OFFSETS_TO_TXN,
            3,
            build(add.AddOffsetsToTxnRequest, transactional_id="tx", group_id=group, **producer),
        )
        assert added.error_code == ErrorCode.NONE, added
    return producer


def txn_commit(
    client: RawClient,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    producer_id: int,
    producer_epoch: int,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
    version: int = 3,
) -> dict[tuple[str, int], int]:
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
            producer = open_transaction(client, ["g"])
            assert (
                commit(client, "g", {("t", 0): 5, ("t", 1): 6}).topics[0].partitions[0].error_code
                == 0
            )
            assert txn_commit(client, "g", {("t", 0): 50, ("t", 2): 70}, **producer) == {
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
        assert txn_commit(client, "g", {("t", 9): 1, ("u", 0): 1}, **producer) == {
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
        producer = open_transaction(client, ["cg", "missing", "simple"])
        assert (
            txn_commit(
                client, "cg", {("t", 0): 1}, generation=generation, member_id=member, **producer
            )
            == ok
        )
        assert txn_commit(
            client, "cg", {("t", 0): 1}, generation=generation + 1, member_id=member, **producer
        ) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
        assert txn_commit(
            client, "cg", {("t", 0): 1}, generation=generation, member_id="nobody", **producer
        ) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        assert txn_commit(
            client,
            "cg",
            {("t", 0): 1},
            generation=generation,
            member_id="other",
            instance_id="static-1",
            **producer,
        ) == {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
        # Old clients (v0-v2, no member information) are accepted, as by Kafka.
        for version in (0, 2):
            assert txn_commit(client, "cg", {("t", 0): 2}, version=version, **producer) == ok
        # A missing group with a generation: ILLEGAL_GENERATION; with -1 a simple group.
        assert txn_commit(
            client, "missing", {("t", 0): 1}, generation=3, member_id="m", **producer
        ) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
        assert txn_commit(client, "simple", {("t", 0): 1}, **producer) == ok


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

            producer = open_transaction(a.client, [group])

            def commit_at(offsets: dict[int, int], epoch: int) -> dict[int, int]:
                answer = txn_commit(
                    a.client,
                    group,
                    {("t", p): o for p, o in offsets.items()},
                    generation=epoch,
                    member_id=a.member_id,
                    version=5,
                    **producer,
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


def _describe_transaction(client: RawClient) -> tuple[str, list[tuple[str, list[int]]]]:
    """(state, topics) of transactional id "tx" (DescribeTransactions; only states with a
    start time: the codec cannot read Empty's -1)."""
    m = _m(DESCRIBE_TRANSACTIONS, 0)
    answer = client.request(
        DESCRIBE_TRANSACTIONS, 0, build(m.DescribeTransactionsRequest, transactional_ids=("tx",))
    )
    (state,) = answer.transaction_states
    return state.transaction_state, [(t.topic, sorted(t.partitions)) for t in state.topics]


def _end(client: RawClient, producer: dict[str, int], commit: bool) -> int:
    m = _m(END_TXN, 3)
    answer = client.request(
        END_TXN,
        3,
        build(m.EndTxnRequest, transactional_id="tx", committed=commit, **producer),
    )
    return int(answer.error_code)


def test_the_offsets_partition_is_verified_with_the_transaction(server: ServerProcess) -> None:
    """As Kafka's group coordinator (KIP-890 part 1): a TxnOffsetCommit whose group was not
    added to the transaction is INVALID_TXN_STATE below v4, TRANSACTION_ABORTABLE at v4,
    and adds the group's offsets partition at v5; another producer epoch is
    INVALID_PRODUCER_EPOCH (not written: the transaction still completes)."""
    create_topic(server.bootstrap, "t", 1)
    with RawClient(server.bootstrap) as client:
        producer = open_transaction(client, ["added"])
        offsets = {("t", 0): 3}
        for version, error in ((0, ErrorCode.INVALID_TXN_STATE), (3, ErrorCode.INVALID_TXN_STATE)):
            assert txn_commit(client, "not-added", offsets, version=version, **producer) == {
                ("t", 0): error
            }
        assert txn_commit(client, "not-added", offsets, version=4, **producer) == {
            ("t", 0): ErrorCode.TRANSACTION_ABORTABLE
        }
        fenced = {**producer, "producer_epoch": producer["producer_epoch"] + 1}
        for version in (3, 5):
            assert txn_commit(client, "added", offsets, version=version, **fenced) == {
                ("t", 0): ErrorCode.INVALID_PRODUCER_EPOCH
            }
        state, topics = _describe_transaction(client)
        assert (state, [t for t, _ in topics]) == ("Ongoing", ["__consumer_offsets"])
        (before,) = topics
        assert txn_commit(client, "not-added", offsets, version=5, **producer) == {("t", 0): 0}
        state, topics = _describe_transaction(client)
        assert len(topics) == 1 and len(topics[0][1]) == len(before[1]) + 1
        assert txn_commit(client, "added", offsets, version=3, **producer) == {("t", 0): 0}
        assert _end(client, producer, True) == ErrorCode.NONE
        deadline = time.monotonic() + 30
        while _describe_transaction(client)[0] != "CompleteCommit":
            assert time.monotonic() < deadline, "the commit's markers were never written"
            time.sleep(0.05)
        for group in ("added", "not-added"):
            assert fetch(client, group, [0], True) == (0, {0: (3, 0)})

"""Transactions V2 (KIP-890 part 2) and the KIP-890 part 1 verification over the wire, with a
raw client, as Kafka 4 serves them:

- ApiVersions v3+ advertises the finalized feature transaction.version 2 (what makes a Kafka 4
  Java client use transactions V2), EndTxn v5 and Produce v12;
- Produce v12 adds its partition to the transaction (no AddPartitionsToTxn), TxnOffsetCommit
  v5 the group's offsets partition (no AddOffsetsToTxn);
- EndTxn v5 bumps the epoch at every end and answers it: the markers carry the bumped epoch
  (DescribeProducers), a retry of the end with the epoch before the bump is answered NONE
  with the current id and epoch, the old epoch is fenced, an abort with nothing in the
  transaction bumps the epoch too;
- a transactions V1 Produce (v11 and older) for a partition not in its transaction is
  refused (TRANSACTION_ABORTABLE from v11, INVALID_TXN_STATE before) and nothing is
  appended: no hanging transaction; a TxnOffsetCommit v4 for a group whose offsets partition
  is not in the transaction likewise.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from groupcoord.protocol.api import build
from groupcoord.protocol.errors import ErrorCode
from tests.integration.test_clients import create_topic as _create_topic
from tests.integration.test_txn_coordinator import (
    add_offsets,
    add_partitions,
    describe,
    init_pid,
    wait_state,
)
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    _m,
    describe_producers,
    list_offset,
    produce,
    read_all,
    txn_batch,
)
from tests.rawclient import RawClient, encode_request, request_class
from tests.support import ServerProcess

E = ErrorCode
API_VERSIONS, END_TXN, TXN_OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 18, 26, 28, 9, 10
LATEST = -1
RETRIABLE = (E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS)


def end_txn_v5(c: RawClient, txn: str, pid: int, epoch: int, commit: bool) -> tuple[E, int, int]:
    request = request_class(END_TXN, 5)(
        transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    response = c.request(END_TXN, 5, request)
    return E(response.error_code), response.producer_id, response.producer_epoch


def txn_offset_commit(
    c: RawClient,
    txn: str,
    pid: int,
    epoch: int,
    group: str,
    topic: str,
    offsets: dict[int, int],
    version: int,
) -> dict[int, E]:
    m = _m(TXN_OFFSET_COMMIT, version)
    response = c.request(
        TXN_OFFSET_COMMIT,
        version,
        build(
            m.TxnOffsetCommitRequest,
            transactional_id=txn,
            group_id=group,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=(
                build(
                    m.TxnOffsetCommitRequestTopic,
                    name=topic,
                    partitions=tuple(
                        build(
                            m.TxnOffsetCommitRequestPartition,
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for p, o in offsets.items()
                    ),
                ),
            ),
        ),
    )
    return {p.partition_index: E(p.error_code) for t in response.topics for p in t.partitions}


def init(c: RawClient, txn: str) -> tuple[int, int]:
    """FindCoordinator (key type 1, as a client asks first: Kafka creates
    __transaction_state then), then InitProducerId, each retried while the coordinator is
    not ready."""
    deadline = time.monotonic() + 60
    find = request_class(FIND_COORDINATOR, 4)(key_type=1, coordinator_keys=(txn,))
    while c.request(FIND_COORDINATOR, 4, find).coordinators[0].error_code != 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    while True:
        answer = init_pid(c, txn)
        if answer.error_code == 0:
            return answer.producer_id, answer.producer_epoch
        assert answer.error_code in RETRIABLE and time.monotonic() < deadline, answer
        time.sleep(0.1)


def committed(c: RawClient, group: str, topic: str) -> tuple[int, int]:
    """(offset, error) of `topic`-0 for `group` (OffsetFetch v7, require_stable)."""
    m = _m(OFFSET_FETCH, 7)
    request = build(
        m.OffsetFetchRequest,
        group_id=group,
        topics=(build(m.OffsetFetchRequestTopic, name=topic, partition_indexes=(0,)),),
        require_stable=True,
    )
    partition = c.request(OFFSET_FETCH, 7, request).topics[0].partitions[0]
    return partition.committed_offset, partition.error_code


def partitions_of(c: RawClient, txn: str) -> set[tuple[str, int]]:
    state = describe(c, txn)[0]
    return {(t.topic, p) for t in state.topics for p in t.partitions}


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` and wait until every partition has a leader that answers for it:
    Apache Kafka answers CreateTopics before its broker leads the new partitions
    (NOT_LEADER_OR_FOLLOWER to a Produce meanwhile), and lists a leader in Metadata a
    moment before that broker acts as one; groupcoord leads them at once. A ListOffsets
    answered without error is the probe (it checks leadership as Produce does)."""
    _create_topic(bootstrap, topic, partitions)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while True:
        described = admin.list_topics(topic, timeout=10).topics.get(topic)
        led = (
            described is not None
            and described.error is None
            and all(p.leader >= 0 for p in described.partitions.values())
        )
        if led and len(described.partitions) == partitions:
            with RawClient(bootstrap) as c:
                if all(
                    list_offset(c, topic, p, LATEST, READ_COMMITTED)[0] == 0
                    for p in range(partitions)
                ):
                    return
        assert time.monotonic() < deadline, f"{topic}: partitions without a leader"
        time.sleep(0.1)


def producer_epochs(c: RawClient, topic: str, partition: int) -> dict[int, int]:
    return {
        s.producer_id: s.producer_epoch
        for s in describe_producers(c, topic, partition).active_producers
    }


def until(check: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def api_versions_advertise_transaction_version_2(bootstrap: str, n: str) -> None:
    with RawClient(bootstrap) as c:
        for version in (3, 4):
            request = request_class(API_VERSIONS, version)(
                client_software_name="raw", client_software_version="1"
            )
            response = c.request(API_VERSIONS, version, request)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert ranges[0][1] >= 12 and ranges[END_TXN][1] >= 5
            finalized = {f.name: f.max_version_level for f in response.finalized_features}
            assert finalized["transaction.version"] == 2
            assert response.finalized_features_epoch >= 0


def produce_v12_and_end_txn_v5_bump_the_epoch(bootstrap: str, n: str) -> None:
    topic, txn = f"t-{n}", f"v2-{n}"
    create_topic(bootstrap, topic, 2)
    with RawClient(bootstrap) as c:
        pid, epoch = init(c, txn)
        # Produce v12: the partition joins the transaction without AddPartitionsToTxn.
        r = produce(c, topic, 0, txn_batch([b"a1", b"a2"], pid, epoch, 0), txn, version=12)
        assert r.error_code == 0, r
        assert partitions_of(c, txn) == {(topic, 0)}
        assert describe(c, txn)[0].transaction_state == "Ongoing"
        assert end_txn_v5(c, txn, pid, epoch, True) == (E.NONE, pid, epoch + 1)
        wait_state(c, txn, "CompleteCommit")
        # The marker was written with the bumped epoch.
        assert producer_epochs(c, topic, 0) == {pid: epoch + 1}
        assert read_all(c, topic, 0, READ_COMMITTED).values == [b"a1", b"a2"]
        # A retry of the end with the epoch before the bump: NONE, the current id and epoch.
        assert end_txn_v5(c, txn, pid, epoch, True) == (E.NONE, pid, epoch + 1)
        # The old epoch is fenced: its batches, its ends.
        r = produce(c, topic, 1, txn_batch([b"zombie"], pid, epoch, 1), txn, version=12)
        assert r.error_code == E.INVALID_PRODUCER_EPOCH, r
        assert end_txn_v5(c, txn, pid, epoch, False) == (E.INVALID_TXN_STATE, -1, -1)
        # The next transaction at the bumped epoch (sequences from 0), aborted.
        epoch += 1
        for partition in (0, 1):
            batch = txn_batch([b"b%d" % partition], pid, epoch, 0)
            r = produce(c, topic, partition, batch, txn, version=12)
            assert r.error_code == 0, r
        assert partitions_of(c, txn) == {(topic, 0), (topic, 1)}
        assert end_txn_v5(c, txn, pid, epoch, False) == (E.NONE, pid, epoch + 1)
        wait_state(c, txn, "CompleteAbort")
        assert producer_epochs(c, topic, 1) == {pid: epoch + 1}
        assert end_txn_v5(c, txn, pid, epoch, False) == (E.NONE, pid, epoch + 1)
        assert read_all(c, topic, 0, READ_COMMITTED).values == [b"a1", b"a2"]
        assert read_all(c, topic, 1, READ_COMMITTED).values == []
        assert read_all(c, topic, 0, READ_UNCOMMITTED).values == [b"a1", b"a2", b"b0"]
        # An abort with nothing in the transaction still bumps the epoch.
        epoch += 1
        assert end_txn_v5(c, txn, pid, epoch, True) == (E.INVALID_TXN_STATE, -1, -1)
        assert end_txn_v5(c, txn, pid, epoch, False) == (E.NONE, pid, epoch + 1)
        wait_state(c, txn, "CompleteAbort")
        assert describe(c, txn)[0].producer_epoch == epoch + 1
        # EndTxn v4 (transactions V1) does not bump: the epoch stays.
        epoch += 1
        assert add_partitions(c, txn, pid, epoch, {topic: [0]}) == {(topic, 0): 0}
        request = request_class(END_TXN, 4)(
            transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=True
        )
        assert c.request(END_TXN, 4, request).error_code == 0
        wait_state(c, txn, "CompleteCommit")
        assert describe(c, txn)[0].producer_epoch == epoch


def txn_offset_commit_v5_adds_the_offsets_partition(bootstrap: str, n: str) -> None:
    topic, txn, group = f"t-{n}", f"v2-offsets-{n}", f"g2-{n}"
    create_topic(bootstrap, topic, 1)
    with RawClient(bootstrap) as c:
        pid, epoch = init(c, txn)
        assert txn_offset_commit(c, txn, pid, epoch, group, topic, {0: 42}, 5) == {0: E.NONE}
        (added,) = partitions_of(c, txn)
        assert added[0] == "__consumer_offsets"
        assert committed(c, group, topic) == (-1, E.UNSTABLE_OFFSET_COMMIT)
        assert end_txn_v5(c, txn, pid, epoch, True) == (E.NONE, pid, epoch + 1)
        until(lambda: committed(c, group, topic) == (42, 0))
        # The fenced epoch's commit is refused before anything is written.
        answer = txn_offset_commit(c, txn, pid, epoch, group, topic, {0: 7}, 5)
        assert answer == {0: E.INVALID_PRODUCER_EPOCH}
        assert committed(c, group, topic) == (42, 0)


def v1_produce_outside_its_transaction_is_refused(bootstrap: str, n: str) -> None:
    topic, txn, group = f"t-{n}", f"v1-{n}", f"g1-{n}"
    create_topic(bootstrap, topic, 2)
    with RawClient(bootstrap) as c:
        pid, epoch = init(c, txn)
        assert add_partitions(c, txn, pid, epoch, {topic: [0]}) == {(topic, 0): 0}
        r = produce(c, topic, 0, txn_batch([b"in"], pid, epoch, 0), txn, version=11)
        assert r.error_code == 0, r
        # Partition 1 was never added: refused, per version as Kafka maps it.
        r = produce(c, topic, 1, txn_batch([b"out"], pid, epoch, 0), txn, version=11)
        assert r.error_code == E.TRANSACTION_ABORTABLE, r
        r = produce(c, topic, 1, txn_batch([b"out"], pid, epoch, 0), txn, version=9)
        assert r.error_code == E.INVALID_TXN_STATE, r
        # Nothing was appended to it: no open transaction holds its last stable offset.
        assert list_offset(c, topic, 1, LATEST, READ_COMMITTED) == (0, 0)
        assert producer_epochs(c, topic, 1) == {}
        # A TxnOffsetCommit whose group's offsets partition is not in the transaction.
        assert txn_offset_commit(c, txn, pid, epoch, group, topic, {0: 1}, 4) == {
            0: E.TRANSACTION_ABORTABLE
        }
        assert txn_offset_commit(c, txn, pid, epoch, group, topic, {0: 1}, 3) == {
            0: E.INVALID_TXN_STATE
        }
        assert add_offsets(c, txn, pid, epoch, group) == 0
        assert txn_offset_commit(c, txn, pid, epoch, group, topic, {0: 1}, 3) == {0: E.NONE}
        request = request_class(END_TXN, 4)(
            transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=True
        )
        assert c.request(END_TXN, 4, request).error_code == 0
        wait_state(c, txn, "CompleteCommit")
        assert read_all(c, topic, 0, READ_COMMITTED).values == [b"in"]
        assert list_offset(c, topic, 1, LATEST, READ_COMMITTED) == (0, 0)


def produce_v12_with_acks_0(bootstrap: str, n: str) -> None:
    topic, txn = f"t-{n}", f"v2-acks0-{n}"
    create_topic(bootstrap, topic, 1)
    with RawClient(bootstrap) as c:
        pid, epoch = init(c, txn)
        m = _m(0, 12)
        request = m.ProduceRequest(
            transactional_id=txn,
            acks=0,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                m.TopicProduceData(
                    name=topic,
                    partition_data=(
                        m.PartitionProduceData(
                            index=0, records=txn_batch([b"quiet"], pid, epoch, 0)
                        ),
                    ),
                ),
            ),
        )
        c.send(encode_request(0, 12, 999, request))
        # No response comes; the next request on the connection is answered in turn.
        until(lambda: partitions_of(c, txn) == {(topic, 0)})
        until(lambda: read_all(c, topic, 0, READ_UNCOMMITTED).values == [b"quiet"])
        assert end_txn_v5(c, txn, pid, epoch, True) == (E.NONE, pid, epoch + 1)
        wait_state(c, txn, "CompleteCommit")
        assert read_all(c, topic, 0, READ_COMMITTED).values == [b"quiet"]


def produce_v12_first_batch_of_a_new_producer_starts_at_0(bootstrap: str, n: str) -> None:
    """KIP-890 part 2 (Kafka's checkSequence): a transactions V2 batch that opens the
    transaction on a partition holding no state of its producer must have sequence 0,
    else OUT_OF_ORDER_SEQUENCE_NUMBER and nothing is appended; so must the first batch of
    the next epoch (after EndTxn v5's bump) on a partition the producer never wrote to."""
    topic, txn = f"t-{n}", f"v2-seq-{n}"
    create_topic(bootstrap, topic, 2)
    with RawClient(bootstrap) as c:
        pid, epoch = init(c, txn)
        r = produce(c, topic, 0, txn_batch([b"late"], pid, epoch, 5), txn, version=12)
        assert r.error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER, r
        r = produce(c, topic, 0, txn_batch([b"a"], pid, epoch, 0), txn, version=12)
        assert r.error_code == 0, r
        assert end_txn_v5(c, txn, pid, epoch, True) == (E.NONE, pid, epoch + 1)
        wait_state(c, txn, "CompleteCommit")
        epoch += 1
        r = produce(c, topic, 1, txn_batch([b"late"], pid, epoch, 3), txn, version=12)
        assert r.error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER, r
        r = produce(c, topic, 0, txn_batch([b"late"], pid, epoch, 1), txn, version=12)
        assert r.error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER, r
        for partition in (0, 1):
            batch = txn_batch([b"b%d" % partition], pid, epoch, 0)
            r = produce(c, topic, partition, batch, txn, version=12)
            assert r.error_code == 0, r
        assert end_txn_v5(c, txn, pid, epoch, True) == (E.NONE, pid, epoch + 1)
        wait_state(c, txn, "CompleteCommit")
        assert read_all(c, topic, 0, READ_UNCOMMITTED).values == [b"a", b"b0"]
        assert read_all(c, topic, 1, READ_UNCOMMITTED).values == [b"b1"]


# Every scenario, by name: tests/jvm/test_txn_v2_vs_kafka.py plays them on Kafka too.
SCENARIOS = {
    f.__name__: f
    for f in (
        api_versions_advertise_transaction_version_2,
        produce_v12_and_end_txn_v5_bump_the_epoch,
        txn_offset_commit_v5_adds_the_offsets_partition,
        v1_produce_outside_its_transaction_is_refused,
        produce_v12_with_acks_0,
        produce_v12_first_batch_of_a_new_producer_starts_at_0,
    )
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_transactions_v2(server: ServerProcess, name: str) -> None:
    SCENARIOS[name](server.bootstrap, "a")


def test_supported_features_list_transaction_version(server: ServerProcess) -> None:
    with RawClient(server.bootstrap) as c:
        request = request_class(API_VERSIONS, 4)(
            client_software_name="raw", client_software_version="1"
        )
        response = c.request(API_VERSIONS, 4, request)
        supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
        assert supported == {"transaction.version": (0, 2)}
        # Before v3 there is no room for features.
        assert c.request(API_VERSIONS, 2, request_class(API_VERSIONS, 2)()).error_code == 0

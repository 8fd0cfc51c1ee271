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

from groupcoord.protocol.api import build
from groupcoord.protocol.errors import ErrorCode
from tests.integration.test_clients import create_topic
from tests.integration.test_txn_coordinator import (
    add_offsets,
    add_partitions,
    describe,
    init_pid,
    wait_state,
)
from tests.integration.test_txn_offsets_raw import fetch as fetch_offsets
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
API_VERSIONS, END_TXN, TXN_OFFSET_COMMIT = 18, 26, 28
LATEST = -1


def end_txn_v5(c: RawClient, txn: str, pid: int, epoch: int, commit: bool) -> tuple[E, int, int]:
    request = request_class(END_TXN, 5)(
        transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    response = c.request(END_TXN, 5, request)
    return E(response.error_code), response.producer_id, response.producer_epoch


def txn_offset_commit(
    c: RawClient, txn: str, pid: int, epoch: int, group: str, offsets: dict[int, int], version: int
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
                    name="t",
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


def partitions_of(c: RawClient, txn: str) -> set[tuple[str, int]]:
    state = describe(c, txn)[0]
    return {(t.topic, p) for t in state.topics for p in t.partitions}


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


def test_api_versions_advertise_transaction_version_2(server: ServerProcess) -> None:
    with RawClient(server.bootstrap) as c:
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
            supported = {f.name: f.max_version for f in response.supported_features}
            assert supported["transaction.version"] == 2


def test_produce_v12_and_end_txn_v5_bump_the_epoch_every_transaction(
    server: ServerProcess,
) -> None:
    create_topic(server.bootstrap, "t", 2)
    with RawClient(server.bootstrap) as c:
        init = init_pid(c, "v2")
        pid, epoch = init.producer_id, init.producer_epoch
        # Produce v12: the partition joins the transaction without AddPartitionsToTxn.
        r = produce(c, "t", 0, txn_batch([b"a1", b"a2"], pid, epoch, 0), "v2", version=12)
        assert r.error_code == 0, r
        assert partitions_of(c, "v2") == {("t", 0)}
        assert describe(c, "v2")[0].transaction_state == "Ongoing"
        assert end_txn_v5(c, "v2", pid, epoch, True) == (E.NONE, pid, epoch + 1)
        wait_state(c, "v2", "CompleteCommit")
        # The marker was written with the bumped epoch.
        assert producer_epochs(c, "t", 0) == {pid: epoch + 1}
        assert read_all(c, "t", 0, READ_COMMITTED).values == [b"a1", b"a2"]
        # A retry of the end with the epoch before the bump: NONE, the current id and epoch.
        assert end_txn_v5(c, "v2", pid, epoch, True) == (E.NONE, pid, epoch + 1)
        # The old epoch is fenced: its batches, its ends.
        r = produce(c, "t", 1, txn_batch([b"zombie"], pid, epoch, 1), "v2", version=12)
        assert r.error_code == E.INVALID_PRODUCER_EPOCH, r
        assert end_txn_v5(c, "v2", pid, epoch, False) == (E.INVALID_TXN_STATE, -1, -1)
        # The next transaction at the bumped epoch (sequences from 0), aborted.
        epoch += 1
        for partition in (0, 1):
            batch = txn_batch([b"b%d" % partition], pid, epoch, 0)
            r = produce(c, "t", partition, batch, "v2", version=12)
            assert r.error_code == 0, r
        assert partitions_of(c, "v2") == {("t", 0), ("t", 1)}
        assert end_txn_v5(c, "v2", pid, epoch, False) == (E.NONE, pid, epoch + 1)
        wait_state(c, "v2", "CompleteAbort")
        assert producer_epochs(c, "t", 1) == {pid: epoch + 1}
        assert end_txn_v5(c, "v2", pid, epoch, False) == (E.NONE, pid, epoch + 1)
        assert read_all(c, "t", 0, READ_COMMITTED).values == [b"a1", b"a2"]
        assert read_all(c, "t", 1, READ_COMMITTED).values == []
        assert read_all(c, "t", 0, READ_UNCOMMITTED).values == [b"a1", b"a2", b"b0"]
        # An abort with nothing in the transaction still bumps the epoch.
        epoch += 1
        assert end_txn_v5(c, "v2", pid, epoch, True) == (E.INVALID_TXN_STATE, -1, -1)
        assert end_txn_v5(c, "v2", pid, epoch, False) == (E.NONE, pid, epoch + 1)
        wait_state(c, "v2", "CompleteAbort")
        assert describe(c, "v2")[0].producer_epoch == epoch + 1
        # EndTxn v4 (transactions V1) does not bump: the epoch stays.
        epoch += 1
        assert add_partitions(c, "v2", pid, epoch, {"t": [0]}) == {("t", 0): 0}
        request = request_class(END_TXN, 4)(
            transactional_id="v2", producer_id=pid, producer_epoch=epoch, committed=True
        )
        assert c.request(END_TXN, 4, request).error_code == 0
        wait_state(c, "v2", "CompleteCommit")
        assert describe(c, "v2")[0].producer_epoch == epoch


def test_txn_offset_commit_v5_adds_the_offsets_partition(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "t", 1)
    with RawClient(server.bootstrap) as c:
        init = init_pid(c, "v2-offsets")
        pid, epoch = init.producer_id, init.producer_epoch
        assert txn_offset_commit(c, "v2-offsets", pid, epoch, "g2", {0: 42}, 5) == {0: E.NONE}
        (added,) = partitions_of(c, "v2-offsets")
        assert added[0] == "__consumer_offsets"
        assert fetch_offsets(c, "g2", [0], True) == (0, {0: (-1, E.UNSTABLE_OFFSET_COMMIT)})
        assert end_txn_v5(c, "v2-offsets", pid, epoch, True) == (E.NONE, pid, epoch + 1)
        until(lambda: fetch_offsets(c, "g2", [0], True) == (0, {0: (42, 0)}))
        # The fenced epoch's commit is refused before anything is written.
        answer = txn_offset_commit(c, "v2-offsets", pid, epoch, "g2", {0: 7}, 5)
        assert answer == {0: E.INVALID_PRODUCER_EPOCH}


def test_a_v1_produce_outside_its_transaction_is_refused_and_nothing_hangs(
    server: ServerProcess,
) -> None:
    create_topic(server.bootstrap, "t", 2)
    with RawClient(server.bootstrap) as c:
        init = init_pid(c, "v1")
        pid, epoch = init.producer_id, init.producer_epoch
        assert add_partitions(c, "v1", pid, epoch, {"t": [0]}) == {("t", 0): 0}
        r = produce(c, "t", 0, txn_batch([b"in"], pid, epoch, 0), "v1", version=11)
        assert r.error_code == 0, r
        # Partition 1 was never added: refused, per version as Kafka maps it.
        r = produce(c, "t", 1, txn_batch([b"out"], pid, epoch, 0), "v1", version=11)
        assert r.error_code == E.TRANSACTION_ABORTABLE, r
        r = produce(c, "t", 1, txn_batch([b"out"], pid, epoch, 0), "v1", version=9)
        assert r.error_code == E.INVALID_TXN_STATE, r
        # Nothing was appended to it: no open transaction holds its last stable offset.
        assert list_offset(c, "t", 1, LATEST, READ_COMMITTED) == (0, 0)
        assert producer_epochs(c, "t", 1) == {}
        # An unknown producer (no InitProducerId) is refused too.
        r = produce(c, "t", 1, txn_batch([b"x"], 4242, 0, 0), "v1", version=11)
        assert r.error_code == E.INVALID_PRODUCER_ID_MAPPING, r
        # A TxnOffsetCommit whose group's offsets partition is not in the transaction.
        assert txn_offset_commit(c, "v1", pid, epoch, "g1", {0: 1}, 4) == {
            0: E.TRANSACTION_ABORTABLE
        }
        assert txn_offset_commit(c, "v1", pid, epoch, "g1", {0: 1}, 3) == {0: E.INVALID_TXN_STATE}
        assert add_offsets(c, "v1", pid, epoch, "g1") == 0
        assert txn_offset_commit(c, "v1", pid, epoch, "g1", {0: 1}, 3) == {0: E.NONE}
        request = request_class(END_TXN, 4)(
            transactional_id="v1", producer_id=pid, producer_epoch=epoch, committed=True
        )
        assert c.request(END_TXN, 4, request).error_code == 0
        wait_state(c, "v1", "CompleteCommit")
        assert read_all(c, "t", 0, READ_COMMITTED).values == [b"in"]
        assert list_offset(c, "t", 1, LATEST, READ_COMMITTED) == (0, 0)


def test_produce_v12_with_acks_0_adds_and_appends_without_a_response(
    server: ServerProcess,
) -> None:
    create_topic(server.bootstrap, "t", 1)
    with RawClient(server.bootstrap) as c:
        init = init_pid(c, "v2-acks0")
        pid, epoch = init.producer_id, init.producer_epoch
        m = _m(0, 12)
        request = m.ProduceRequest(
            transactional_id="v2-acks0",
            acks=0,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                m.TopicProduceData(
                    name="t",
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
        until(lambda: partitions_of(c, "v2-acks0") == {("t", 0)})
        until(lambda: read_all(c, "t", 0, READ_UNCOMMITTED).values == [b"quiet"])
        assert end_txn_v5(c, "v2-acks0", pid, epoch, True) == (E.NONE, pid, epoch + 1)
        wait_state(c, "v2-acks0", "CompleteCommit")
        assert read_all(c, "t", 0, READ_COMMITTED).values == [b"quiet"]

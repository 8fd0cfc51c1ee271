"""Transactions (issue 18): InitProducerId with a transactional id, AddPartitionsToTxn (v0-v3
and the v4+ batched form), AddOffsetsToTxn, TxnOffsetCommit, EndTxn v0-v4 (transaction
version 1: EndTxn v5 is not played here), DescribeTransactions, ListTransactions,
DescribeProducers, and read_committed Fetch / ListOffsets around open, committed and
aborted transactions.

A transaction's markers are written after EndTxn answers: a sequence that needs them done
polls DescribeTransactions (unrecorded) until the transaction is complete, as a client
retrying CONCURRENT_TRANSACTIONS would find out."""

from __future__ import annotations

import time
from typing import Any

from tests.conformance.ops import (
    FIND_COORDINATOR,
    TOPIC,
    TOPIC2,
    UNKNOWN_TOPIC,
    assignment,
    join,
    sync,
)
from tests.conformance.runner import Session, sequence
from tests.conformance.sequences.consumer import _joined as joined
from tests.conformance.sequences.data import (
    create_topic,
    fetch,
    list_offsets,
)
from tests.support import client_batch

INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 22, 24, 25, 26
TXN_OFFSET_COMMIT, DESCRIBE_PRODUCERS = 28, 61
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS, PRODUCE, CREATE_TOPICS = 65, 66, 0, 19
TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms, Kafka's default and ours
NONE, CONCURRENT_TRANSACTIONS = 0, 51
# The records' timestamps: recent (Kafka rolls a segment when a marker, stamped with the
# broker's clock, comes more than segment.ms after a segment's first timestamp, and a fetch
# reads one segment), the same for both servers (one value per run).
BASE_TS_MS = int(time.time()) // 60 * 60_000
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
RETRIABLE = frozenset({14, 15, 16})


# -- requests ----------------------------------------------------------------------------


def init_pid(
    s: Session,
    txn_id: str | None,
    *,
    version: int = 5,
    timeout_ms: int = TIMEOUT_MS,
    producer_id: int = -1,
    epoch: int = -1,
    conn: str = "producer",
    label: str = "init producer id",
) -> Any:
    return s.call(
        conn,
        INIT_PRODUCER_ID,
        version,
        label,
        transactional_id=txn_id,
        transaction_timeout=timeout_ms,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def add_partitions(
    s: Session,
    txn_id: str,
    pid: int,
    epoch: int,
    topics: dict[str, list[int]],
    *,
    version: int = 3,
    conn: str = "producer",
    label: str = "add partitions",
) -> Any:
    """AddPartitionsToTxn as a client sends it (v0-v3)."""
    return s.call(
        conn,
        ADD_PARTITIONS,
        version,
        label,
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[{"name": t, "partitions": ps} for t, ps in topics.items()],
    )


def add_partitions_batched(
    s: Session,
    transactions: list[tuple[str, int, int, bool, dict[str, list[int]]]],
    *,
    version: int = 5,
    label: str = "add partitions (batched)",
) -> Any:
    """AddPartitionsToTxn v4+ of (transactional id, producer id, epoch, verify only,
    topics) as a partition leader sends it."""
    return s.call(
        "broker",
        ADD_PARTITIONS,
        version,
        label,
        transactions=[
            {
                "transactional_id": txn_id,
                "producer_id": pid,
                "producer_epoch": epoch,
                "verify_only": verify_only,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            for txn_id, pid, epoch, verify_only, topics in transactions
        ],
    )


def add_offsets(
    s: Session,
    txn_id: str,
    pid: int,
    epoch: int,
    group: str,
    *,
    version: int = 4,
    label: str = "add offsets",
) -> Any:
    return s.call(
        "producer",
        ADD_OFFSETS,
        version,
        label,
        transactional_id=txn_id,
        producer_id=pid,
        producer_epoch=epoch,
        group_id=group,
    )


def txn_commit(
    s: Session,
    txn_id: str,
    pid: int,
    epoch: int,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
    version: int = 5,
    label: str = "txn offset commit",
) -> Any:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    return s.call(
        "producer",
        TXN_OFFSET_COMMIT,
        version,
        label,
        transactional_id=txn_id,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=[{"name": t, "partitions": ps} for t, ps in topics.items()],
    )


def end_txn(
    s: Session,
    txn_id: str,
    pid: int,
    epoch: int,
    commit: bool,
    *,
    version: int = 4,
    conn: str = "producer",
    label: str = "",
) -> Any:
    return s.call(
        conn,
        END_TXN,
        version,
        label or ("commit" if commit else "abort"),
        transactional_id=txn_id,
        producer_id=pid,
        producer_epoch=epoch,
        committed=commit,
    )


def describe_txns(s: Session, ids: list[str], *, label: str = "describe transactions") -> Any:
    return s.call("admin", DESCRIBE_TRANSACTIONS, 0, label, transactional_ids=ids)


def list_txns(
    s: Session,
    *,
    version: int = 1,
    states: tuple[str, ...] = (),
    pids: tuple[int, ...] = (),
    duration_ms: int = -1,
    pattern: str | None = None,
    label: str = "list transactions",
) -> Any:
    return s.call(
        "admin",
        LIST_TRANSACTIONS,
        version,
        label,
        state_filters=list(states),
        producer_id_filters=list(pids),
        duration_filter=duration_ms,
        transactional_id_pattern=pattern,
    )


def describe_producers(
    s: Session, topics: dict[str, list[int]], *, label: str = "describe producers"
) -> Any:
    return s.call(
        "admin",
        DESCRIBE_PRODUCERS,
        0,
        label,
        topics=[{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
    )


def produce(
    s: Session,
    txn_id: str | None,
    topic: str,
    partition: int,
    records: bytes,
    *,
    version: int = 11,
    label: str = "produce",
) -> Any:
    return s.call(
        "producer",
        PRODUCE,
        version,
        label,
        transactional_id=txn_id,
        acks=-1,
        timeout=10_000,
        topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    )


def records(
    first: int, count: int, pid: int, epoch: int, seq: int, *, transactional: bool = True
) -> bytes:
    return client_batch(
        [(b"k%d" % i, b"v%d" % i, BASE_TS_MS + i * 10) for i in range(first, first + count)],
        producer_id=pid,
        epoch=epoch,
        seq=seq,
        transactional=transactional,
    )


# -- waits (unrecorded) ------------------------------------------------------------------


def ready(s: Session, txn_id: str) -> None:
    """Wait until the transaction coordinator of `txn_id` serves (Kafka creates and loads
    __transaction_state on the first FindCoordinator of a transactional id)."""
    s.poll(
        FIND_COORDINATOR,
        3,
        lambda r: r.error_code == NONE,
        key=txn_id,
        key_type=1,
    )
    # AddPartitionsToTxn of an unknown id changes nothing: it answers
    # INVALID_PRODUCER_ID_MAPPING once the id's partition of __transaction_state is loaded.
    s.poll(
        ADD_PARTITIONS,
        3,
        lambda r: (
            r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
            not in RETRIABLE
        ),
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=0,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[{"name": TOPIC, "partitions": [0]}],
    )


def completed(s: Session, txn_id: str) -> None:
    """Wait until `txn_id`'s markers are written (no Prepare state)."""
    s.poll(
        DESCRIBE_TRANSACTIONS,
        0,
        lambda r: (
            r.transaction_states[0].transaction_state
            not in ("PrepareCommit", "PrepareAbort", "PrepareEpochFence")
        ),
        transactional_ids=[txn_id],
    )


def init_until_done(s: Session, txn_id: str, *, label: str = "init producer id") -> Any:
    """InitProducerId retried (unrecorded) while CONCURRENT_TRANSACTIONS (a fenced
    transaction aborting), then played once more, recorded."""
    completed(s, txn_id)
    return init_pid(s, txn_id, label=label)


def new_producer(s: Session, name: str = "txn") -> tuple[str, int, int]:
    txn_id = s.transactional_id(name)
    ready(s, txn_id)
    pid = init_pid(s, txn_id)
    return txn_id, pid.producer_id, pid.producer_epoch


def _stable_classic(s: Session, group: str) -> tuple[str, int]:
    member = join(s, "member", group, label="join: id required").member_id
    joined = join(s, "member", group, member, label="join: leader")
    sync(s, "member", group, joined.generation_id, member, {member: assignment({TOPIC: [0, 1]})})
    return member, joined.generation_id


# -- sequences ---------------------------------------------------------------------------

for _v in range(6):

    @sequence(f"txn/init-producer-id-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        txn_id = s.transactional_id()
        ready(s, txn_id)
        first = init_pid(s, txn_id, version=version, label="new transactional id")
        init_pid(s, txn_id, version=version, label="again: epoch bumped")
        init_pid(s, "", version=version, label="empty transactional id")
        init_pid(s, txn_id, version=version, timeout_ms=MAX_TIMEOUT_MS + 1, label="timeout > max")
        init_pid(s, txn_id, version=version, timeout_ms=0, label="timeout 0")
        init_pid(s, txn_id, version=version, timeout_ms=MAX_TIMEOUT_MS, label="timeout = max")
        if version >= 3:
            pid = first.producer_id
            current = init_pid(s, txn_id, version=version, label="current epoch").producer_epoch
            init_pid(
                s, txn_id, version=version, producer_id=pid, epoch=current, label="KIP-360 bump"
            )
            init_pid(
                s, txn_id, version=version, producer_id=pid, epoch=current, label="KIP-360 retry"
            )
            init_pid(
                s, txn_id, version=version, producer_id=pid, epoch=0, label="KIP-360 old epoch"
            )
            init_pid(
                s,
                txn_id,
                version=version,
                producer_id=pid + 1000,
                epoch=0,
                label="KIP-360 other producer id",
            )
            init_pid(
                s, txn_id, version=version, producer_id=pid, epoch=-1, label="producer id alone"
            )


for _v in range(6):

    @sequence(f"txn/init-producer-id-v{_v}-fences-ongoing")
    def _(s: Session, version: int = _v) -> None:
        txn_id, pid, epoch = new_producer(s)
        add_partitions(s, txn_id, pid, epoch, {TOPIC: [0]})
        init_pid(s, txn_id, version=version, conn="second", label="second instance: fences")
        completed(s, txn_id)
        describe_txns(s, [txn_id], label="describe: aborted by the fence")
        second = init_pid(s, txn_id, version=version, conn="second", label="second instance")
        add_partitions(s, txn_id, pid, epoch, {TOPIC: [1]}, label="first instance: fenced")
        end_txn(s, txn_id, pid, epoch, True, label="first instance commits: fenced")
        add_partitions(
            s,
            txn_id,
            pid,
            second.producer_epoch,
            {TOPIC: [1]},
            conn="second",
            label="second instance adds",
        )


for _v in range(4):

    @sequence(f"txn/add-partitions-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        txn_id, pid, epoch = new_producer(s)
        add_partitions(s, txn_id, pid, epoch, {TOPIC: [0, 1]}, version=version)
        add_partitions(s, txn_id, pid, epoch, {TOPIC: [1]}, version=version, label="already in")
        add_partitions(
            s,
            txn_id,
            pid,
            epoch,
            {TOPIC: [2], UNKNOWN_TOPIC: [0]},
            version=version,
            label="with an unknown topic",
        )
        add_partitions(
            s, txn_id, pid, epoch, {TOPIC2: [0, 7]}, version=version, label="unknown partition"
        )
        add_partitions(s, txn_id, pid, epoch + 1, {TOPIC2: [0]}, version=version, label="epoch + 1")
        add_partitions(s, txn_id, pid, epoch - 1, {TOPIC2: [0]}, version=version, label="epoch - 1")
        add_partitions(
            s, txn_id, pid + 1000, epoch, {TOPIC2: [0]}, version=version, label="other pid"
        )
        add_partitions(
            s,
            s.transactional_id("unknown"),
            pid,
            epoch,
            {TOPIC2: [0]},
            version=version,
            label="unknown transactional id",
        )
        add_partitions(s, "", pid, epoch, {TOPIC2: [0]}, version=version, label="empty id")
        add_partitions(
            s,
            txn_id,
            pid,
            epoch,
            {"__consumer_offsets": [0]},
            version=version,
            label="__consumer_offsets",
        )
        describe_txns(s, [txn_id])
        end_txn(s, txn_id, pid, epoch, True)
        completed(s, txn_id)
        add_partitions(s, txn_id, pid, epoch, {TOPIC2: [0]}, version=version, label="next txn")
        describe_txns(s, [txn_id])


for _v in (4, 5):

    @sequence(f"txn/add-partitions-v{_v}-batched")
    def _(s: Session, version: int = _v) -> None:
        txn_id, pid, epoch = new_producer(s)
        other = s.transactional_id("other")
        add_partitions(s, txn_id, pid, epoch, {TOPIC: [0]})
        add_partitions_batched(
            s,
            [
                (txn_id, pid, epoch, True, {TOPIC: [0, 1], TOPIC2: [0]}),
                (other, pid, epoch, True, {TOPIC: [0]}),
            ],
            version=version,
            label="verify only",
        )
        add_partitions_batched(
            s,
            [(txn_id, pid, epoch + 1, True, {TOPIC: [0]})],
            version=version,
            label="verify only, other epoch",
        )
        add_partitions_batched(
            s,
            [(txn_id, pid, epoch, False, {TOPIC: [1]})],
            version=version,
            label="add",
        )
        describe_txns(s, [txn_id])
        end_txn(s, txn_id, pid, epoch, False)
        completed(s, txn_id)
        add_partitions_batched(
            s,
            [(txn_id, pid, epoch, True, {TOPIC: [0]})],
            version=version,
            label="verify only after the abort",
        )


for _v in range(5):

    @sequence(f"txn/add-offsets-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        txn_id, pid, epoch = new_producer(s)
        group = s.group()
        add_offsets(s, txn_id, pid, epoch, group, version=version)
        add_offsets(s, txn_id, pid, epoch, group, version=version, label="again")
        add_offsets(s, txn_id, pid, epoch + 1, group, version=version, label="other epoch")
        add_offsets(s, txn_id, pid + 1000, epoch, group, version=version, label="other pid")
        add_offsets(
            s, s.transactional_id("unknown"), pid, epoch, group, version=version, label="no id"
        )
        describe_txns(s, [txn_id])


for _v in range(6):

    @sequence(f"txn/txn-offset-commit-v{_v}-classic-group")
    def _(s: Session, version: int = _v) -> None:
        group = s.group()
        member, generation = _stable_classic(s, group)
        txn_id, pid, epoch = new_producer(s)
        add_offsets(s, txn_id, pid, epoch, group)
        offsets = {(TOPIC, 0): 5, (TOPIC, 1): 7}
        kw: dict[str, Any] = {"version": version}
        txn_commit(
            s, txn_id, pid, epoch, group, offsets, generation=generation, member_id=member, **kw
        )
        txn_commit(s, txn_id, pid, epoch, group, offsets, label="generation -1, no member", **kw)
        txn_commit(
            s,
            txn_id,
            pid,
            epoch,
            group,
            offsets,
            generation=generation + 1,
            member_id=member,
            label="wrong generation",
            **kw,
        )
        txn_commit(
            s,
            txn_id,
            pid,
            epoch,
            group,
            offsets,
            generation=generation,
            member_id="not-a-member",
            label="unknown member",
            **kw,
        )
        txn_commit(
            s,
            txn_id,
            pid,
            epoch,
            group,
            offsets,
            generation=generation,
            member_id=member,
            instance_id="not-an-instance",
            label="unknown instance id",
            **kw,
        )
        txn_commit(s, txn_id, pid, epoch + 1, group, offsets, label="other epoch", **kw)
        end_txn(s, txn_id, pid, epoch, True)
        completed(s, txn_id)
        s.call(
            "member",
            9,
            8,
            "offset fetch",
            groups=[{"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}],
            require_stable=True,
        )


for _v in (0, 3, 4, 5):

    @sequence(f"txn/txn-offset-commit-v{_v}-unknown-and-empty-group")
    def _(s: Session, version: int = _v) -> None:
        txn_id, pid, epoch = new_producer(s)
        unknown = s.group("unknown")
        add_offsets(s, txn_id, pid, epoch, unknown)
        offsets = {(TOPIC, 0): 3}
        txn_commit(s, txn_id, pid, epoch, unknown, offsets, version=version, label="no group")
        txn_commit(
            s,
            txn_id,
            pid,
            epoch,
            unknown,
            offsets,
            generation=1,
            member_id="m",
            version=version,
            label="no group, a generation",
        )
        txn_commit(
            s,
            txn_id,
            pid,
            epoch,
            s.group("not-added"),
            offsets,
            version=version,
            label="group not added",
        )
        txn_commit(
            s,
            txn_id,
            pid,
            epoch,
            unknown,
            {(UNKNOWN_TOPIC, 0): 1},
            version=version,
            label="unknown topic",
        )
        txn_commit(s, txn_id, pid, epoch - 1, unknown, offsets, version=version, label="epoch - 1")
        txn_commit(
            s, txn_id, pid + 1000, epoch, unknown, offsets, version=version, label="other pid"
        )
        end_txn(s, txn_id, pid, epoch, False)
        completed(s, txn_id)
        txn_commit(
            s, txn_id, pid, epoch, unknown, offsets, version=version, label="after the abort"
        )
        describe_txns(s, [txn_id])


@sequence("txn/txn-offset-commit-consumer-group")
def _(s: Session) -> None:
    group = s.group()
    member, member_epoch, _ = joined(s, group, "member")
    txn_id, pid, epoch = new_producer(s)
    add_offsets(s, txn_id, pid, epoch, group)
    offsets = {(TOPIC, 0): 4}
    txn_commit(s, txn_id, pid, epoch, group, offsets, generation=member_epoch, member_id=member)
    txn_commit(
        s,
        txn_id,
        pid,
        epoch,
        group,
        offsets,
        generation=member_epoch + 1,
        member_id=member,
        label="epoch above the broker's",
    )
    txn_commit(
        s,
        txn_id,
        pid,
        epoch,
        group,
        offsets,
        generation=member_epoch,
        member_id="not-a-member",
        label="unknown member",
    )
    txn_commit(s, txn_id, pid, epoch, group, offsets, label="no member")
    txn_commit(
        s,
        txn_id,
        pid,
        epoch,
        group,
        offsets,
        generation=member_epoch - 1,
        member_id=member,
        label="previous member epoch",
    )
    end_txn(s, txn_id, pid, epoch, True)
    completed(s, txn_id)
    s.call(
        "member",
        9,
        9,
        "offset fetch",
        groups=[
            {"group_id": group, "member_id": member, "member_epoch": member_epoch, "topics": None}
        ],
        require_stable=True,
    )


for _v in range(5):

    @sequence(f"txn/end-txn-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        txn_id, pid, epoch = new_producer(s)
        end_txn(s, txn_id, pid, epoch, True, version=version, label="commit with nothing added")
        end_txn(s, txn_id, pid, epoch, False, version=version, label="abort with nothing added")
        add_partitions(s, txn_id, pid, epoch, {TOPIC: [0]})
        end_txn(s, txn_id, pid, epoch + 1, True, version=version, label="epoch + 1")
        end_txn(s, txn_id, pid, epoch - 1, True, version=version, label="epoch - 1")
        end_txn(s, txn_id, pid + 1000, epoch, True, version=version, label="other pid")
        end_txn(s, "", pid, epoch, True, version=version, label="empty id")
        end_txn(
            s, s.transactional_id("unknown"), pid, epoch, True, version=version, label="unknown"
        )
        end_txn(s, txn_id, pid, epoch, True, version=version, label="commit")
        completed(s, txn_id)
        end_txn(s, txn_id, pid, epoch, True, version=version, label="commit retried")
        end_txn(s, txn_id, pid, epoch, False, version=version, label="abort after commit")
        add_partitions(s, txn_id, pid, epoch, {TOPIC: [1]})
        end_txn(s, txn_id, pid, epoch, False, version=version, label="abort")
        completed(s, txn_id)
        end_txn(s, txn_id, pid, epoch, False, version=version, label="abort retried")
        end_txn(s, txn_id, pid, epoch, True, version=version, label="commit after abort")
        describe_txns(s, [txn_id])


@sequence("txn/describe-transactions")
def _(s: Session) -> None:
    txn_id, pid, epoch = new_producer(s)
    group = s.group()
    describe_txns(s, [txn_id], label="Empty")
    add_partitions(s, txn_id, pid, epoch, {TOPIC: [2, 0], TOPIC2: [0]})
    add_offsets(s, txn_id, pid, epoch, group)
    describe_txns(s, [txn_id], label="Ongoing")
    end_txn(s, txn_id, pid, epoch, True)
    completed(s, txn_id)
    describe_txns(s, [txn_id], label="CompleteCommit")
    unknown = s.transactional_id("unknown")
    describe_txns(s, [unknown, txn_id, ""], label="unknown, known, empty")


for _v in range(3):

    @sequence(f"txn/list-transactions-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        txn_id, pid, epoch = new_producer(s)
        other, other_pid, other_epoch = new_producer(s, "other")
        add_partitions(s, other, other_pid, other_epoch, {TOPIC: [0]})
        list_txns(s, version=version, label="all")
        list_txns(s, version=version, states=("Ongoing",), label="Ongoing")
        list_txns(s, version=version, states=("Empty", "Bogus"), label="Empty and unknown state")
        list_txns(s, version=version, pids=(pid,), label="producer id")
        list_txns(s, version=version, states=("Ongoing",), pids=(pid,), label="both")
        if version >= 1:
            list_txns(s, version=version, duration_ms=3_600_000, label="longer than an hour")
            list_txns(s, version=version, duration_ms=0, label="longer than 0")
        if version >= 2:
            list_txns(s, version=version, pattern=".*other", label="pattern")
            list_txns(s, version=version, pattern="(", label="bad pattern")
        end_txn(s, other, other_pid, other_epoch, False)


@sequence("txn/describe-producers")
def _(s: Session) -> None:
    topic = s.name("t")
    create_topic(s, topic, 3)
    s.wait_producer_ids()
    idem = init_pid(s, None, label="idempotent producer")
    produce(
        s,
        None,
        topic,
        0,
        records(0, 3, idem.producer_id, idem.producer_epoch, 0, transactional=False),
    )
    txn_id, pid, epoch = new_producer(s)
    add_partitions(s, txn_id, pid, epoch, {topic: [1]})
    produce(s, txn_id, topic, 1, records(0, 2, pid, epoch, 0), label="transactional")
    produce(s, txn_id, topic, 1, records(2, 2, pid, epoch, 2), label="transactional")
    describe_producers(s, {topic: [0, 1, 2]}, label="open transaction")
    end_txn(s, txn_id, pid, epoch, True)
    completed(s, txn_id)
    describe_producers(s, {topic: [1]}, label="committed")
    describe_producers(s, {topic: [9], s.name("missing"): [0]}, label="unknown")


@sequence("txn/produce-v12-first-sequence")
def _(s: Session) -> None:
    """KIP-890 part 2: a transactions V2 batch that opens the transaction on a partition
    with no state of its producer must start at sequence 0."""
    topic = s.name("t")
    create_topic(s, topic, 2)
    s.wait_producer_ids()
    txn_id, pid, epoch = new_producer(s)
    produce(s, txn_id, topic, 0, records(0, 2, pid, epoch, 5), version=12, label="sequence 5")
    produce(s, txn_id, topic, 0, records(0, 2, pid, epoch, 0), version=12, label="sequence 0")
    produce(s, txn_id, topic, 0, records(2, 1, pid, epoch, 3), version=12, label="a gap")
    end_txn(s, txn_id, pid, epoch, False, version=5)
    completed(s, txn_id)
    describe_producers(s, {topic: [0, 1]}, label="aborted")


def _read_committed_topic(s: Session) -> tuple[str, str, int, int]:
    """A topic whose partition 0 holds: 2 plain records, an aborted transaction of 3, a
    committed one of 2 with 1 plain record inside it, and an open one of 2."""
    topic = s.name("t")
    create_topic(s, topic, 1)
    s.wait_producer_ids()
    plain = init_pid(s, None, label="idempotent producer")
    p_pid, p_epoch = plain.producer_id, plain.producer_epoch
    produce(s, None, topic, 0, records(0, 2, p_pid, p_epoch, 0, transactional=False))
    txn_id, pid, epoch = new_producer(s)
    add_partitions(s, txn_id, pid, epoch, {topic: [0]})
    produce(s, txn_id, topic, 0, records(2, 3, pid, epoch, 0), label="aborted")
    end_txn(s, txn_id, pid, epoch, False)
    completed(s, txn_id)
    add_partitions(s, txn_id, pid, epoch, {topic: [0]})
    produce(s, txn_id, topic, 0, records(5, 1, pid, epoch, 3), label="committed")
    produce(s, None, topic, 0, records(6, 1, p_pid, p_epoch, 2, transactional=False))
    produce(s, txn_id, topic, 0, records(7, 1, pid, epoch, 4), label="committed")
    end_txn(s, txn_id, pid, epoch, True)
    completed(s, txn_id)
    add_partitions(s, txn_id, pid, epoch, {topic: [0]})
    produce(s, txn_id, topic, 0, records(8, 2, pid, epoch, 5), label="open")
    return topic, txn_id, pid, epoch


for _v in (4, 7, 11, 12, 16):

    @sequence(f"txn/read-committed-fetch-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        topic, txn_id, pid, epoch = _read_committed_topic(s)
        for isolation in (0, 1):
            name = ("read_uncommitted", "read_committed")[isolation]
            fetch(s, topic, {0: 0}, version=version, isolation=isolation, label=name)
            fetch(s, topic, {0: 3}, version=version, isolation=isolation, label=f"{name} from 3")
            fetch(s, topic, {0: 11}, version=version, isolation=isolation, label=f"{name} at 11")
        end_txn(s, txn_id, pid, epoch, False)
        completed(s, txn_id)
        fetch(s, topic, {0: 0}, version=version, isolation=1, label="all complete")


for _v in (2, 5, 7, 9):

    @sequence(f"txn/read-committed-list-offsets-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        topic, txn_id, pid, epoch = _read_committed_topic(s)
        for isolation in (0, 1):
            name = ("read_uncommitted", "read_committed")[isolation]
            list_offsets(s, topic, {0: -1}, version=version, isolation=isolation, label=name)
            # A record's timestamp (markers bear the server's clock: no max timestamp here).
            list_offsets(
                s, topic, {0: BASE_TS_MS + 15}, version=version, isolation=isolation, label=name
            )
        end_txn(s, txn_id, pid, epoch, True)
        completed(s, txn_id)
        list_offsets(s, topic, {0: -1}, version=version, isolation=1, label="all complete")


@sequence("txn/create-topics-internal-names")
def _(s: Session) -> None:
    ready(s, s.transactional_id())
    for name in ("__consumer_offsets", "__transaction_state"):
        create_topic(s, name, 1, version=7, label=name, wait=False)

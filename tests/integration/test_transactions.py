"""Transactions end to end with confluent-kafka (issue 18): a transactional producer over 3
partitions, commit and abort, read_committed and read_uncommitted readers, consume-transform-
produce with send_offsets_to_transaction from a classic and a KIP-848 group, a loop of 100
transactions, fencing of an older producer, and a SIGKILL in the middle of a transaction."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.integration.group_support import wait_until
from tests.integration.test_clients import create_topic
from tests.support import ServerProcess, serving

PARTITIONS = 3
TIMEOUT_S = 30


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", group_initial_rebalance_delay_ms=100) as proc:
        yield proc


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60_000,
            "linger.ms": 5,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def produce_values(producer: Producer, topic: str, values: list[str]) -> None:
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), key=value.encode(), partition=i % PARTITIONS)
    producer.flush(TIMEOUT_S)


def read_all(bootstrap: str, topic: str, isolation: str) -> list[str]:
    """Every value of `topic` visible at `isolation` ("read_committed" or
    "read_uncommitted"), read from the start of each partition up to its high watermark
    (no transaction is open when this is called, so the last stable offset is the high
    watermark and both readers reach it: past the markers)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{isolation}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        values: list[str] = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value().decode())
                continue
            positions = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                return values
        raise AssertionError(f"{isolation} reader of {topic} did not reach {ends}")
    finally:
        consumer.close()


def test_committed_visible_aborted_not(server: ServerProcess) -> None:
    bootstrap = server.bootstrap
    create_topic(bootstrap, "txn-out", PARTITIONS)
    producer = txn_producer(bootstrap, "txn-commit-abort")
    committed = [f"c-{i}" for i in range(30)]
    aborted = [f"a-{i}" for i in range(30)]
    later = [f"d-{i}" for i in range(30)]

    producer.begin_transaction()
    produce_values(producer, "txn-out", committed)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    produce_values(producer, "txn-out", aborted)
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    produce_values(producer, "txn-out", later)
    producer.commit_transaction(TIMEOUT_S)

    assert Counter(read_all(bootstrap, "txn-out", "read_committed")) == Counter(committed + later)
    assert Counter(read_all(bootstrap, "txn-out", "read_uncommitted")) == Counter(
        committed + aborted + later
    )


def test_open_transaction_hidden_from_read_committed(server: ServerProcess) -> None:
    """A read_committed reader stops at the open transaction's first offset (the last stable
    offset) and reads it once committed; a read_uncommitted reader sees it at once."""
    bootstrap = server.bootstrap
    create_topic(bootstrap, "txn-open", PARTITIONS)
    plain = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        plain.produce("txn-open", b"before", partition=p)
    plain.flush(TIMEOUT_S)
    producer = txn_producer(bootstrap, "txn-open")
    producer.begin_transaction()
    produce_values(producer, "txn-open", [f"open-{i}" for i in range(9)])

    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "open-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        reader.assign([TopicPartition("txn-open", p, 0) for p in range(PARTITIONS)])
        seen: list[str] = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            message = reader.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value().decode())
        assert seen == ["before"] * PARTITIONS
        producer.commit_transaction(TIMEOUT_S)
        wait_until(
            lambda: _poll_into(reader, seen) and len(seen) == PARTITIONS + 9,
            TIMEOUT_S,
            "the committed transaction to reach the read_committed reader",
        )
        assert Counter(seen) == Counter(["before"] * PARTITIONS + [f"open-{i}" for i in range(9)])
    finally:
        reader.close()


def _poll_into(consumer: Consumer, seen: list[str]) -> bool:
    message = consumer.poll(0.1)
    if message is not None and message.error() is None:
        seen.append(message.value().decode())
    return True


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consume_transform_produce_exactly_once(server: ServerProcess, protocol: str) -> None:
    """Input read by a group member, transformed, produced and its offsets sent to the
    transaction; one transaction aborted and its input read again. Output (read_committed)
    holds each input exactly once; the group's committed offsets are the input's ends."""
    bootstrap = server.bootstrap
    create_topic(bootstrap, "ctp-in", PARTITIONS)
    create_topic(bootstrap, "ctp-out", PARTITIONS)
    inputs = [f"in-{i}" for i in range(60)]
    plain = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(inputs):
        plain.produce("ctp-in", value.encode(), partition=i % PARTITIONS)
    plain.flush(TIMEOUT_S)

    group = f"ctp-{protocol}"
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    }
    consumer = Consumer(settings)
    producer = txn_producer(bootstrap, f"ctp-{protocol}")
    consumer.subscribe(["ctp-in"])
    aborted_once = False
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            messages = [m for m in consumer.consume(10, 0.5) if m.error() is None]
            if not messages:
                committed = consumer.committed(
                    [TopicPartition("ctp-in", p) for p in range(PARTITIONS)], TIMEOUT_S
                )
                if sum(max(tp.offset, 0) for tp in committed) == len(inputs):
                    break
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce("ctp-out", m.value().upper(), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), TIMEOUT_S
            )
            if not aborted_once:
                aborted_once = True
                # Flushed first: librdkafka's abort purges messages still queued (linger.ms),
                # and the test wants the aborted output in the log.
                producer.flush(TIMEOUT_S)
                producer.abort_transaction(TIMEOUT_S)
                # Read the aborted input again: back to the group's committed offsets.
                for tp in consumer.committed(consumer.assignment(), TIMEOUT_S):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                continue
            producer.commit_transaction(TIMEOUT_S)
        else:
            raise AssertionError("the input was not consumed within 60 s")
        committed = consumer.committed(
            [TopicPartition("ctp-in", p) for p in range(PARTITIONS)], TIMEOUT_S
        )
    finally:
        consumer.close()
    assert aborted_once
    ends = {p: 20 for p in range(PARTITIONS)}  # 60 inputs round-robin over 3 partitions
    assert {tp.partition: tp.offset for tp in committed} == ends
    output = read_all(bootstrap, "ctp-out", "read_committed")
    assert Counter(output) == Counter(v.upper() for v in inputs)
    # The aborted transaction's output is in the log all the same.
    assert len(read_all(bootstrap, "ctp-out", "read_uncommitted")) > len(inputs)


def test_a_loop_of_100_transactions(server: ServerProcess) -> None:
    bootstrap = server.bootstrap
    create_topic(bootstrap, "txn-loop", PARTITIONS)
    producer = txn_producer(bootstrap, "txn-loop")
    expected: list[str] = []
    for t in range(100):
        values = [f"t{t}-{i}" for i in range(PARTITIONS)]
        producer.begin_transaction()
        produce_values(producer, "txn-loop", values)
        if t % 10 == 9:
            producer.abort_transaction(TIMEOUT_S)
        else:
            producer.commit_transaction(TIMEOUT_S)
            expected += values
    assert Counter(read_all(bootstrap, "txn-loop", "read_committed")) == Counter(expected)
    assert len(read_all(bootstrap, "txn-loop", "read_uncommitted")) == 300


def test_an_older_producer_with_the_same_id_is_fenced(server: ServerProcess) -> None:
    bootstrap = server.bootstrap
    create_topic(bootstrap, "txn-fence", PARTITIONS)
    old = txn_producer(bootstrap, "txn-fence")
    old.begin_transaction()
    produce_values(old, "txn-fence", ["old-0", "old-1", "old-2"])
    new = txn_producer(bootstrap, "txn-fence")  # bumps the epoch, aborts old's transaction
    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(TIMEOUT_S)
    assert raised.value.args[0].fatal(), raised.value.args[0]
    new.begin_transaction()
    produce_values(new, "txn-fence", ["new-0", "new-1", "new-2"])
    new.commit_transaction(TIMEOUT_S)
    assert Counter(read_all(bootstrap, "txn-fence", "read_committed")) == Counter(
        ["new-0", "new-1", "new-2"]
    )


def test_sigkill_in_an_open_transaction_then_commit(server: ServerProcess) -> None:
    """SIGKILL after AddPartitionsToTxn and the produce: the transaction is Ongoing after the
    restart and the same producer commits it; nothing is lost or visible before."""
    bootstrap = server.bootstrap
    create_topic(bootstrap, "txn-kill", PARTITIONS)
    producer = txn_producer(bootstrap, "txn-kill")
    producer.begin_transaction()
    values = [f"k-{i}" for i in range(12)]
    produce_values(producer, "txn-kill", values)
    server.restart()
    producer.commit_transaction(TIMEOUT_S)
    assert Counter(read_all(bootstrap, "txn-kill", "read_committed")) == Counter(values)

"""Durability by SIGKILL: every acknowledged record survives, in order, exactly once."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from groupcoord.coordinator.runtime.partitioning import shard_for
from tests.integration.group_support import wait_until
from tests.integration.test_clients import create_topic
from tests.support import ServerProcess

PARTITIONS = 3


def read_all(
    bootstrap: str, topic: str, partitions: int = PARTITIONS
) -> dict[int, list[tuple[int, bytes]]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "verify",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    while len(eof) < partitions and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == -191:  # _PARTITION_EOF
                eof.add(msg.partition())
                continue
            raise RuntimeError(msg.error())
        got[msg.partition()].append((msg.offset(), msg.value()))
    consumer.close()
    assert len(eof) == partitions, "did not reach the end of every partition"
    return got


def test_sigkill_during_acks_all_load_keeps_every_acknowledged_record(
    server: ServerProcess,
) -> None:
    topic = "durable"
    create_topic(server.bootstrap, topic, PARTITIONS)
    acked: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    lock = threading.Lock()
    stop = threading.Event()

    def produce() -> None:
        producer = Producer(
            {
                "bootstrap.servers": server.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 5000,
            }
        )

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is None:
                with lock:
                    acked[msg.partition()].append((msg.offset(), msg.value()))

        i = 0
        while not stop.is_set():
            try:
                producer.produce(
                    topic,
                    value=b"record-%08d" % i,
                    partition=i % PARTITIONS,
                    on_delivery=on_delivery,
                )
                i += 1
            except BufferError:
                pass
            producer.poll(0.0005 if i % 100 == 0 else 0)
        producer.flush(10)

    thread = threading.Thread(target=produce)
    thread.start()
    time.sleep(3)
    server.kill()  # SIGKILL mid-load: acknowledged writes must all be on disk
    with lock:
        acked_at_kill = {p: list(v) for p, v in acked.items()}
    stop.set()
    thread.join(30)
    assert sum(map(len, acked_at_kill.values())) > 1000, "the load did not get going"

    server.start()
    stored = read_all(server.bootstrap, topic)
    for partition in range(PARTITIONS):
        offsets = [o for o, _ in stored.get(partition, [])]
        assert offsets == list(range(len(offsets))), "offsets are contiguous from 0"
        values = [v for _, v in stored.get(partition, [])]
        assert len(values) == len(set(values)), "no record is stored twice"
        stored_by_offset = dict(stored.get(partition, []))
        for offset, value in acked_at_kill.get(partition, []):
            assert stored_by_offset.get(offset) == value, f"acknowledged {partition}@{offset} lost"
        # Order: values were produced with increasing counters per partition.
        assert values == sorted(values)


def test_torn_tail_is_truncated_on_restart(server: ServerProcess) -> None:
    topic = "torn"
    create_topic(server.bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce(topic, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(10) == 0
    server.kill()
    # Simulate a write cut short by a crash: half a batch of garbage at the end of a segment.
    segment = sorted((server.data_dir / "topics" / f"{topic}-0").glob("*.log"))[-1]
    with open(segment, "ab") as fh:
        fh.write(b"\x00\x00\x00\x00\x00\x00\x00\x64\x00\x00\x01\x00garbage-torn-write")
    server.start()
    stored = read_all(server.bootstrap, topic)
    assert [o for o, _ in stored[0]] == list(range(100))
    # Said, as a crash's unflushed tail (a warning), not as damage (the last stop was a kill).
    assert "log recovery dropped an unflushed tail after a crash" in server.log_tail(80)
    assert "log damaged" not in server.log_tail(80)
    # And the partition keeps working after the truncation.
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
    producer.produce(topic, value=b"after", partition=0)
    assert producer.flush(10) == 0
    stored = read_all(server.bootstrap, topic)
    assert stored[0][-1] == (100, b"after")


def test_a_damaged_batch_after_a_clean_shutdown_costs_only_its_own_records(
    server: ServerProcess,
) -> None:
    """A clean stop leaves no torn write, so a batch failing its CRC at the next start is
    damage on disk: it alone is removed (its records lost, an error naming the log), and
    every acknowledged batch after it is kept, in a topic partition and in a coordinator
    shard alike (a cut there used to drop all of them, silently)."""
    create_topic(server.bootstrap, "damaged", 1)
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
    for i in range(50):
        producer.produce("damaged", value=b"v%d" % i, partition=0)
        producer.flush(10)  # one batch each
    committer = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "g", "enable.auto.commit": False}
    )
    for offset in range(1, 20):
        committer.commit(offsets=[TopicPartition("damaged", 0, offset)], asynchronous=False)
    committer.close()
    assert server.terminate() == 0  # a clean stop
    shard = shard_for("g", 50)
    for directory in (
        server.data_dir / "topics" / "damaged-0",
        server.data_dir / f"__consumer_offsets-{shard}",
    ):
        _damage_batch_body(sorted(directory.glob("*.log"))[-1], 10)
    server.start()
    wait_until(lambda: f"__consumer_offsets-{shard}" in server.log_tail(80), 10, "the report")
    reports = [line for line in server.log_tail(80).splitlines() if "log damaged" in line]
    assert len(reports) == 2 and all('"level": "error"' in line for line in reports), reports
    assert any('"damaged-0"' in line for line in reports)

    values = [value for _, value in read_all(server.bootstrap, "damaged", partitions=1)[0]]
    assert len(values) == 49 and values[-1] == b"v49"  # one record lost, the rest kept
    reader = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g"})
    committed = reader.committed([TopicPartition("damaged", 0)], timeout=10)[0].offset
    reader.close()
    assert committed == 19  # the last commit, after the damaged one


def _damage_batch_body(segment: Path, index: int) -> None:
    """Flip a byte of the records of the `index`th batch: a CRC-covered part (damage to
    a header's base offset, outside the CRC, still cuts the log there, reported)."""
    data = bytearray(segment.read_bytes())
    pos = 0
    for _ in range(index):
        pos += int.from_bytes(data[pos + 8 : pos + 12], "big") + 12  # length + its prefix
    data[pos + 62] ^= 0xFF
    segment.write_bytes(bytes(data))

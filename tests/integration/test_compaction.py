"""Compacted topics with real clients. confluent-kafka producers (an idempotent one sending
lz4 batches, and a plain one) write keyed values to a topic with cleanup.policy=compact and
one batch per segment; the server's log cleaner (run every 100 ms here) keeps only the
latest record of each key, at its offset, and a confluent-kafka consumer reading from the
beginning gets exactly those, skipping the gaps. A record without a key is refused with
INVALID_RECORD. Across a SIGKILL (after compaction, and at random points while the cleaner
works) the compacted log stays intact and the idempotent producer goes on."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import ServerProcess

Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


def create_compacted(bootstrap: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(
        name,
        num_partitions=1,
        replication_factor=1,
        config={"cleanup.policy": "compact", "segment.bytes": "100", **configs},
    )
    admin.create_topics([topic])[name].result(10)


def read_all(bootstrap: str, topic: str, timestamps: dict[int, int] | None = None) -> list[Record]:
    """Every record of partition 0, from the beginning to the end (and into `timestamps`,
    offset -> the record's timestamp as the consumer reads it)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compaction-reader",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, -2)])  # -2: the beginning
    records: list[Record] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return records
                raise RuntimeError(msg.error())
            records.append((msg.offset(), msg.key(), msg.value()))
            if timestamps is not None:
                timestamps[msg.offset()] = msg.timestamp()[1]
    finally:
        consumer.close()
    raise AssertionError("did not reach the end of the partition")


def wait_for(bootstrap: str, topic: str, expected: list[Record], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    got: list[Record] = []
    while time.monotonic() < deadline:
        got = read_all(bootstrap, topic)
        if got == expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"the compacted log never became {expected}: {got}")


class Sender:
    """A producer whose sends wait for their delivery report."""

    def __init__(self, bootstrap: str, settings: dict[str, Any] | None = None) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, **(settings or {})}
        )

    def send(self, topic: str, key: bytes | None, value: bytes | None) -> tuple[Any, int]:
        """(error or None, offset) of one record sent alone, as its own batch."""
        reports: list[tuple[Any, int]] = []
        self.producer.produce(
            topic, key=key, value=value, on_delivery=lambda e, m: reports.append((e, m.offset()))
        )
        self.producer.flush(10)
        assert len(reports) == 1
        return reports[0]


def test_a_compacted_topic_keeps_the_latest_value_per_key(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", ["--set", "log_cleaner_interval_ms=100"]).start()
    try:
        topic = "latest-values"
        started_ms = time.time() * 1000 - 1000
        # Every dirty segment is worth a pass (the default ratio, 0.5, would wait for more).
        create_compacted(server.bootstrap, topic, **{"min.cleanable.dirty.ratio": "0.01"})
        idempotent = Sender(
            server.bootstrap, {"enable.idempotence": True, "compression.type": "lz4"}
        )
        plain = Sender(server.bootstrap)
        offsets = []
        for round_ in range(3):
            for key in (b"k1", b"k2", b"k3"):
                error, offset = idempotent.send(topic, key, b"%s-v%d" % (key, round_))
                assert error is None
                offsets.append(offset)
        assert offsets == list(range(9))
        assert plain.send(topic, b"k2", None) == (None, 9)  # a tombstone
        # Supersedes the idempotent producer's last batch (offset 8): emptied, not dropped.
        assert plain.send(topic, b"k3", b"k3-final") == (None, 10)
        assert plain.send(topic, b"end", b"active") == (None, 11)  # the active segment

        # A record without a key: refused as Kafka refuses it.
        error, _ = plain.send(topic, None, b"no key")
        assert error is not None and error.code() == KafkaError.INVALID_RECORD

        expected: list[Record] = [
            (6, b"k1", b"k1-v2"),
            (9, b"k2", None),  # kept for delete.retention.ms
            (10, b"k3", b"k3-final"),
            (11, b"end", b"active"),
        ]
        wait_for(server.bootstrap, topic, expected)

        # What the cleaner swapped in survives a SIGKILL; the idempotent producer's
        # state, rebuilt from the batch headers at start-up, lets it go on.
        server.restart()
        timestamps: dict[int, int] = {}
        assert read_all(server.bootstrap, topic, timestamps) == expected
        # The tombstone's batch holds its delete horizon (a day ahead) as base timestamp;
        # the consumer still reads the time the record was produced.
        now_ms = time.time() * 1000
        assert all(started_ms <= ts <= now_ms for ts in timestamps.values()), timestamps
        assert idempotent.send(topic, b"k1", b"k1-after") == (None, 12)
        # A record more closes offset 12's segment, so some pass is sure to see it (a pass
        # also reads the active segment, but only below the durable offset: one running
        # between the append and its flush would miss it and leave nothing due).
        assert plain.send(topic, b"tail", b"active") == (None, 13)
        wait_for(
            server.bootstrap,
            topic,
            [(9, b"k2", None), (10, b"k3", b"k3-final"), (11, b"end", b"active")]
            + [(12, b"k1", b"k1-after"), (13, b"tail", b"active")],
        )
    finally:
        server.kill()


def test_sigkill_while_the_cleaner_works_keeps_every_acknowledged_latest_value(
    tmp_path: Path,
) -> None:
    server = ServerProcess(tmp_path / "data", ["--set", "log_cleaner_interval_ms=20"]).start()
    try:
        topic = "churn"
        create_compacted(
            server.bootstrap, topic, **{"segment.bytes": "400", "min.cleanable.dirty.ratio": "0.01"}
        )
        rng = random.Random(7)
        acked: dict[bytes, tuple[int, bytes | None]] = {}  # key -> latest acknowledged
        for _ in range(3):
            sender = Sender(server.bootstrap, {"message.timeout.ms": 5000})
            stop = threading.Event()

            def produce(sender: Sender = sender, stop: threading.Event = stop) -> None:
                i = 0
                while not stop.is_set():
                    key = b"key-%d" % rng.randrange(12)
                    value = None if rng.random() < 0.1 else b"value-%d" % i
                    error, offset = sender.send(topic, key, value)
                    if error is None:
                        acked[key] = (offset, value)
                    i += 1

            thread = threading.Thread(target=produce)
            thread.start()
            time.sleep(rng.uniform(0.5, 1.5))
            server.kill()
            stop.set()
            thread.join(20)
            server.start()
            latest: dict[bytes, tuple[int, bytes | None]] = {}
            for offset, key, value in read_all(server.bootstrap, topic):
                assert key is not None
                latest[key] = (offset, value)
            # Every acknowledged record is either the key's latest or superseded by a
            # later one, which a record sent just before the kill may be.
            for key, (offset, value) in acked.items():
                assert key in latest, key
                assert latest[key][0] >= offset, key
                if latest[key][0] == offset:
                    assert latest[key][1] == value
            acked.update(latest)
    finally:
        server.kill()

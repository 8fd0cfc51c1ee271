"""Real clients against the real server: produce with every codec, consume with assign()."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import ServerProcess

# One server for the module: each test has its own topic and never stops the server.
pytestmark = pytest.mark.shared_server

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 6
MESSAGES = 10_000
PER_CODEC = MESSAGES // len(CODECS)

Expected = dict[int, list[tuple[bytes, bytes, list[tuple[str, bytes]]]]]


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(10)


def message(codec: str, i: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    return (
        f"key-{codec}-{i}".encode(),
        f"value-{codec}-{i}-".encode() * 5,
        [("codec", codec.encode()), ("seq", str(i).encode())],
    )


def consume_all_confluent(bootstrap: str, topic: str, expected_total: int) -> Expected:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "assign-only",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])  # -2: beginning
    got: Expected = defaultdict(list)
    offsets: dict[int, list[int]] = defaultdict(list)
    count = 0
    idle = 0
    while count < expected_total and idle < 100:
        msgs = consumer.consume(1000, timeout=0.2)
        if not msgs:
            idle += 1
            continue
        idle = 0
        for msg in msgs:
            if msg.error():
                raise KafkaException(msg.error())
            got[msg.partition()].append((msg.key(), msg.value(), list(msg.headers() or [])))
            offsets[msg.partition()].append(msg.offset())
            count += 1
    consumer.close()
    for partition, seen in offsets.items():
        assert seen == list(range(len(seen))), f"partition {partition} offsets not contiguous"
    return got


def assert_same(expected: Expected, got: Expected) -> None:
    assert sum(map(len, got.values())) == sum(map(len, expected.values()))
    for partition in range(PARTITIONS):
        assert got.get(partition, []) == expected.get(partition, []), f"partition {partition}"


def test_confluent_kafka_all_codecs_idempotent(server: ServerProcess) -> None:
    topic = "confluent-codecs"
    create_topic(server.bootstrap, topic)
    expected: Expected = defaultdict(list)
    for codec in CODECS:
        producer = Producer(
            {
                "bootstrap.servers": server.bootstrap,
                "compression.type": codec,
                "enable.idempotence": True,  # acks=all, sequence numbers, InitProducerId
                "linger.ms": 5,
            }
        )
        delivered: list[tuple[int, int]] = []
        errors: list[object] = []

        def on_delivery(err: object, msg: object, delivered=delivered, errors=errors) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

        for i in range(PER_CODEC):
            key, value, headers = message(codec, i)
            producer.produce(topic, value=value, key=key, headers=headers, on_delivery=on_delivery)
            producer.poll(0)
        assert producer.flush(30) == 0
        assert not errors
        assert len(delivered) == PER_CODEC
    # The partitioner decides placement; rebuild per-partition order from what was delivered.
    consumer_view = consume_all_confluent(server.bootstrap, topic, MESSAGES)
    for partition, msgs in consumer_view.items():
        for key, value, headers in msgs:
            codec = headers[0][1].decode()
            i = int(headers[1][1])
            assert (key, value, headers) == message(codec, i)
            expected[partition].append((key, value, headers))
        # Per partition, each codec's messages come in the order they were produced.
        per_codec: dict[str, list[int]] = defaultdict(list)
        for _, _, headers in msgs:
            per_codec[headers[0][1].decode()].append(int(headers[1][1]))
        for seqs in per_codec.values():
            assert seqs == sorted(seqs)
    assert sum(map(len, consumer_view.values())) == MESSAGES
    assert len({k for msgs in consumer_view.values() for k, _, _ in msgs}) == MESSAGES


def test_kafka_python_all_codecs(server: ServerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = "kafka-python-codecs"
    create_topic(server.bootstrap, topic)
    expected: Expected = defaultdict(list)
    for codec in CODECS:
        producer = KafkaProducer(
            bootstrap_servers=server.bootstrap,
            compression_type=None if codec == "none" else codec,
            linger_ms=5,
            acks="all",
        )
        futures = []
        for i in range(PER_CODEC):
            key, value, headers = message(codec, i)
            partition = i % PARTITIONS
            futures.append(
                producer.send(topic, key=key, value=value, headers=headers, partition=partition)
            )
            expected[partition].append((key, value, headers))
        producer.flush(30)
        for future in futures:
            future.get(10)
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        consumer_timeout_ms=3000,
    )
    consumer.assign([KTP(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    got: Expected = defaultdict(list)
    for msg in consumer:
        got[msg.partition].append((msg.key, msg.value, list(msg.headers)))
        if sum(map(len, got.values())) == MESSAGES:
            break
    consumer.close()
    assert_same(expected, got)


def test_aiokafka_all_codecs(server: ServerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    topic = "aiokafka-codecs"
    create_topic(server.bootstrap, topic)

    async def run() -> tuple[Expected, Expected]:
        expected: Expected = defaultdict(list)
        for codec in CODECS:
            producer = AIOKafkaProducer(
                bootstrap_servers=server.bootstrap,
                compression_type=None if codec == "none" else codec,
                linger_ms=5,
                enable_idempotence=True,
            )
            await producer.start()
            try:
                batch_futures = []
                for i in range(PER_CODEC):
                    key, value, headers = message(codec, i)
                    partition = (i * 7) % PARTITIONS
                    batch_futures.append(
                        await producer.send(
                            topic, key=key, value=value, headers=headers, partition=partition
                        )
                    )
                    expected[partition].append((key, value, headers))
                await asyncio.gather(*batch_futures)
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=server.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100
        )
        await consumer.start()
        got: Expected = defaultdict(list)
        try:
            consumer.assign([ATP(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            while sum(map(len, got.values())) < MESSAGES:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                for tp, msgs in batch.items():
                    for msg in msgs:
                        got[tp.partition].append((msg.key, msg.value, list(msg.headers)))
        finally:
            await consumer.stop()
        return expected, got

    expected, got = asyncio.run(run())
    assert_same(expected, got)


def test_kcat_all_codecs(server: ServerProcess) -> None:
    # Not a skip: a suite that did not run the kcat client did not pass.
    assert shutil.which("kcat"), "kcat is not installed (.ci/run installs it: apt-get install kcat)"
    topic = "kcat-codecs"
    create_topic(server.bootstrap, topic)
    per_codec = MESSAGES // len(CODECS)  # 10,000 in all, like the other clients
    expected: dict[int, list[str]] = defaultdict(list)
    for codec in CODECS:
        for partition in range(PARTITIONS):
            count = per_codec // PARTITIONS + (partition < per_codec % PARTITIONS)
            lines = [f"k-{codec}-{partition}-{i}:v-{codec}-{i}" for i in range(count)]
            subprocess.run(
                [
                    "kcat",
                    "-P",
                    "-b",
                    server.bootstrap,
                    "-t",
                    topic,
                    "-p",
                    str(partition),
                    "-K:",
                    "-z",
                    codec,
                    "-H",
                    f"codec={codec}",
                    "-X",
                    "enable.idempotence=true",
                ],
                input="\n".join(lines).encode(),
                check=True,
                timeout=30,
            )
            expected[partition].extend(
                line.split(":", 1)[0] + " " + line.split(":", 1)[1] + f" codec={codec}"
                for line in lines
            )
    out = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            server.bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%p %o %k %s %h\n",
        ],
        check=True,
        timeout=60,
        capture_output=True,
    ).stdout.decode()
    got: dict[int, list[str]] = defaultdict(list)
    offsets: dict[int, list[int]] = defaultdict(list)
    for line in out.splitlines():
        partition, offset, rest = line.split(" ", 2)
        got[int(partition)].append(rest)
        offsets[int(partition)].append(int(offset))
    assert got == expected
    for seen in offsets.values():
        assert seen == list(range(len(seen)))
    assert sum(map(len, got.values())) == MESSAGES

"""kafka-python and aiokafka groups (with static membership), commits across a restart."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.group_support import produce
from tests.integration.test_clients import create_topic
from tests.support import ServerProcess, serving


@pytest.fixture
def group_server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path / "data", group_initial_rebalance_delay_ms=300) as proc:
        yield proc


def test_kafka_python_static_group(group_server: ServerProcess) -> None:
    """Two static kafka-python consumers share the topic and read every record.

    Each consumer polls in its own thread, as applications use KafkaConsumer, with polls of
    a second (a poll returns as soon as it has records). Polling both in turn from one
    thread every 100 ms livelocked under load: kafka-python 3.0 throws away a
    JoinGroup+SyncGroup round that completes while no poll() of its consumer waits for it
    (its join task is replaced by a new JoinGroup), and the group leader's JoinGroup in a
    Stable group starts a rebalance, as Kafka's coordinator does. The follower's rejoin is
    what completes a join, so the leader's round completed while the follower was being
    polled: every generation's leader dropped its assignment and rejoined, and one
    consumer read its 50 records and the other none in 60 s. Now a round is lost only
    when it completes just as a poll times out, and that costs one more rebalance."""
    from kafka import KafkaConsumer

    bootstrap = group_server.bootstrap
    create_topic(bootstrap, "kp-group", 4)
    expected = set(produce(bootstrap, "kp-group", 4, 25, "kp"))
    consumers = [
        KafkaConsumer(
            "kp-group",
            bootstrap_servers=bootstrap,
            group_id="kp",
            group_instance_id=f"kp-{i}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10000,
            heartbeat_interval_ms=500,
            fetch_max_wait_ms=100,
        )
        for i in range(2)
    ]
    seen: list[bytes] = []
    lock = threading.Lock()
    done = threading.Event()
    deadline = time.monotonic() + 60

    def consume(consumer: KafkaConsumer) -> None:
        while not done.is_set() and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                with lock:
                    seen.extend(r.value for r in records)
                    if len(seen) >= len(expected):
                        done.set()

    with ThreadPoolExecutor(len(consumers)) as pool:
        for future in [pool.submit(consume, c) for c in consumers]:
            future.result()
    assert sorted(seen) == sorted(expected)
    owned = [c.assignment() for c in consumers]
    assert all(owned) and not (owned[0] & owned[1])
    assert len(owned[0] | owned[1]) == 4
    for c in consumers:
        c.commit()
        c.close()


def test_aiokafka_static_group_and_restart(group_server: ServerProcess) -> None:
    from aiokafka import AIOKafkaConsumer

    bootstrap = group_server.bootstrap
    create_topic(bootstrap, "aio-group", 4)
    expected = set(produce(bootstrap, "aio-group", 4, 25, "aio"))

    async def run() -> tuple[list[bytes], list[set[object]]]:
        consumers = [
            AIOKafkaConsumer(
                "aio-group",
                bootstrap_servers=bootstrap,
                group_id="aio",
                group_instance_id=f"aio-{i}",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=10000,
                heartbeat_interval_ms=500,
                fetch_max_wait_ms=100,
            )
            for i in range(2)
        ]
        for c in consumers:
            await c.start()
        seen: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(seen) < len(expected) and time.monotonic() < deadline:
                for c in consumers:
                    batch = await c.getmany(timeout_ms=100)
                    for records in batch.values():
                        seen.extend(r.value for r in records)
            for c in consumers:
                await c.commit()
            return seen, [set(c.assignment()) for c in consumers]
        finally:
            for c in consumers:
                await c.stop()

    seen, owned = asyncio.run(run())
    assert sorted(seen) == sorted(expected)
    assert all(owned) and not (owned[0] & owned[1])


def test_commit_then_server_crash_then_resume(group_server: ServerProcess) -> None:
    bootstrap = group_server.bootstrap
    create_topic(bootstrap, "resume", 1)
    produce(bootstrap, "resume", 1, 100, "r")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "resumers",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("resume", 0, 0)])
    got = 0
    while got < 50:
        msg = consumer.poll(5)
        assert msg is not None and not msg.error()
        got += 1
    consumer.commit(offsets=[TopicPartition("resume", 0, 50)], asynchronous=False)
    consumer.close()
    group_server.restart()  # SIGKILL, then start on the same data directory
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "resumers",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    committed = consumer.committed([TopicPartition("resume", 0)], timeout=10)
    assert committed[0].offset == 50
    consumer.subscribe(["resume"])
    msg = None
    deadline = time.monotonic() + 30
    while msg is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
    assert msg is not None and msg.offset() == 50 and msg.value() == b"r-0-50"
    consumer.close()

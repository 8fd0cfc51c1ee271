"""Consumer lag in /metrics with real clients (confluent-kafka): a group (classic, or
KIP-848) that committed at offset k then closed keeps an exact lag of N - k records,
growing by M when M more are produced; its lag in seconds is positive and grows; above
metrics_lag_partition_series_max the series are aggregated per group and topic, then per
group."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_clients import create_topic
from tests.support import ServerProcess, serving

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(server: ServerProcess) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(server.metrics_text())
        for s in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _wait_for(server: ServerProcess, ready: Callable[[Samples], bool]) -> Samples:
    """The metrics once `ready` holds for them (generous bound: a loaded machine)."""
    deadline = time.monotonic() + 30
    while True:
        samples = _samples(server)
        if ready(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


def _produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=partition)
        producer.flush(10)  # one batch per record: the committed offset starts a batch
    assert producer.flush(10) == 0


def _commit(bootstrap: str, group: str, offsets: list[tuple[str, int, int]]) -> None:
    """Commit `offsets` for `group` from a consumer that then closes (no member left)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False
        )
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_lag_of_a_group_whose_consumer_stopped_grows(tmp_path: Path, protocol: str) -> None:
    """As a classic group and as a KIP-848 consumer group (group.protocol)."""
    n, k, m = 20, 7, 5
    with serving(tmp_path / "data") as server:
        bootstrap = server.bootstrap
        create_topic(bootstrap, "lagged", 2)
        _produce(bootstrap, "lagged", 0, n)
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "stopped",
                "group.protocol": protocol,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            consumer.subscribe(["lagged"])
            got = 0
            deadline = time.monotonic() + 30
            while got < k and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got += 1
            assert got == k
            consumer.commit(offsets=[TopicPartition("lagged", 0, k)], asynchronous=False)
            live = _wait_for(
                server, lambda s: _value(s, "groupcoord_group_members", group="stopped") == 1
            )
            assert _value(live, "groupcoord_group_members", group="stopped") == 1
        finally:
            consumer.close()
        labels = {"group": "stopped", "topic": "lagged", "partition": "0"}

        def aged(samples: Samples) -> bool:
            seconds = _value(samples, "groupcoord_group_lag_seconds", **labels)
            return (
                _value(samples, "groupcoord_group_members", group="stopped") == 0
                and seconds is not None
                and seconds > 0
            )

        first = _wait_for(server, aged)
        assert _value(first, "groupcoord_group_members", group="stopped") == 0
        assert _value(first, "groupcoord_group_lag_records", **labels) == n - k
        assert _value(first, "groupcoord_group_committed_offset", **labels) == k
        assert _value(first, "groupcoord_group_log_end_offset", **labels) == n
        first_seconds = _value(first, "groupcoord_group_lag_seconds", **labels)
        assert first_seconds is not None and first_seconds > 0
        # Partition 1 has no committed offset: no series.
        assert (
            _value(first, "groupcoord_group_lag_records", **(labels | {"partition": "1"})) is None
        )

        _produce(bootstrap, "lagged", 0, m)

        def grown(samples: Samples) -> bool:
            seconds = _value(samples, "groupcoord_group_lag_seconds", **labels)
            return seconds is not None and seconds > first_seconds

        later = _wait_for(server, grown)
        assert _value(later, "groupcoord_group_lag_records", **labels) == n + m - k
        assert _value(later, "groupcoord_group_log_end_offset", **labels) == n + m
        later_seconds = _value(later, "groupcoord_group_lag_seconds", **labels)
        assert later_seconds is not None and later_seconds > first_seconds
        assert _value(later, "groupcoord_group_lag_partitions") == 1


def test_lag_series_are_aggregated_above_the_cap(tmp_path: Path) -> None:
    with serving(tmp_path / "data", metrics_lag_partition_series_max=2) as server:
        bootstrap = server.bootstrap
        create_topic(bootstrap, "wide", 3)
        create_topic(bootstrap, "narrow", 1)
        for partition in range(3):
            _produce(bootstrap, "wide", partition, 4)
        _produce(bootstrap, "narrow", 0, 6)
        # Four group-partitions, two (group, topic) pairs: per group and topic.
        _commit(bootstrap, "g", [("wide", 0, 1), ("wide", 1, 4), ("wide", 2, 0), ("narrow", 0, 2)])
        s = _wait_for(server, lambda s: _value(s, "groupcoord_group_lag_partitions") == 4)
        assert _value(s, "groupcoord_group_lag_partitions") == 4
        assert not [key for key in s if key[0] == "groupcoord_group_lag_records"]
        assert _value(s, "groupcoord_group_topic_lag_records", group="g", topic="wide") == 3 + 0 + 4
        assert _value(s, "groupcoord_group_topic_lag_records", group="g", topic="narrow") == 4
        seconds = _value(s, "groupcoord_group_topic_lag_seconds", group="g", topic="wide")
        assert seconds is not None and seconds >= 0
        # A second group: three (group, topic) pairs, above the cap too: per group.
        _commit(bootstrap, "h", [("narrow", 0, 5)])
        s = _wait_for(server, lambda s: _value(s, "groupcoord_group_lag_partitions") == 5)
        assert not [key for key in s if key[0] == "groupcoord_group_topic_lag_records"]
        assert _value(s, "groupcoord_group_total_lag_records", group="g") == 11
        assert _value(s, "groupcoord_group_total_lag_records", group="h") == 1
        assert _value(s, "groupcoord_group_members", group="h") == 0


def test_burrow_statuses_of_stalled_stopped_and_caught_up_groups(tmp_path: Path) -> None:
    """Burrow's rules over each group's commits, seen at each scrape: a group committing the
    same offset behind the end is STALLED, one whose commits advanced and then ceased is
    STOPPED once the pause outlasts its window, one that reached the end is OK."""
    with serving(tmp_path / "data", metrics_lag_status_min_distance_ms=0) as server:
        bootstrap = server.bootstrap
        create_topic(bootstrap, "burrow", 1)
        _produce(bootstrap, "burrow", 0, 20)
        # Five rounds: the window spans four, much longer than the moments between the last
        # round and the first check below, however loaded the machine.
        for i in range(5):
            _commit(bootstrap, "stalled", [("burrow", 0, 5)])
            _commit(bootstrap, "stopped", [("burrow", 0, 5 + i)])
            _commit(bootstrap, "caught-up", [("burrow", 0, 16 + i)])
            server.metrics_text()  # a scrape: each group's latest commit joins its window
        labels = {"topic": "burrow", "partition": "0"}

        def status(samples: Samples, group: str, name: str) -> float | None:
            return _value(samples, "groupcoord_group_partitions_status", group=group, status=name)

        s = _samples(server)
        assert status(s, "stalled", "STALLED") == 1
        assert _value(s, "groupcoord_group_status", group="stalled") == 3  # ERROR
        assert status(s, "caught-up", "OK") == 1
        assert _value(s, "groupcoord_group_status", group="caught-up") == 1
        assert _value(s, "groupcoord_group_lag_records", group="caught-up", **labels) == 0
        # No commit since: once the pause outlasts the window's span, STOPPED.
        s = _wait_for(server, lambda s: status(s, "stopped", "STOPPED") == 1)
        assert status(s, "stopped", "STOPPED") == 1
        assert _value(s, "groupcoord_group_status", group="stopped") == 3
        assert _value(s, "groupcoord_group_lag_records", group="stopped", **labels) == 11
        assert _value(s, "groupcoord_group_status", group="caught-up") == 1

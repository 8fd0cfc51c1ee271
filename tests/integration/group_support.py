"""Helpers for consumer-group tests: confluent-kafka members on threads that record what
they own and consume, committing synchronously when partitions are revoked."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


@dataclass
class Consumed:
    member: str
    partition: int
    offset: int
    value: bytes
    owned: bool  # the partition was in the member's assignment when the message arrived


@dataclass
class GroupLog:
    consumed: list[Consumed] = field(default_factory=list)
    # (member, kind, partitions) with kind "assign" or "revoke"/"lost"
    events: list[tuple[str, str, frozenset[int]]] = field(default_factory=list)
    errors: list[tuple[str, KafkaError]] = field(default_factory=list)
    # partition -> the highest offset whose synchronous commit the coordinator acknowledged
    committed: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def values(self) -> list[bytes]:
        with self.lock:
            return [c.value for c in self.consumed]


class Member(threading.Thread):
    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topic: str,
        log: GroupLog,
        strategy: str = "range",
        instance_id: str | None = None,
        extra: dict[str, object] | None = None,
        commit_every_s: float | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.commit_every_s = commit_every_s  # None: commit only on revocation and close
        self.member = name
        self.topic = topic
        self.log = log
        self.cooperative = strategy == "cooperative-sticky"
        conf: dict[str, object] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "partition.assignment.strategy": strategy,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            "max.poll.interval.ms": 30000,
            "fetch.wait.max.ms": 100,
            "error_cb": self._on_error,
        }
        self.static = instance_id is not None
        if instance_id is not None:
            conf["group.instance.id"] = instance_id
        conf.update(extra or {})
        self.consumer = Consumer(conf)
        self.owned: set[int] = set()
        self.positions: dict[int, int] = {}
        self.stop_event = threading.Event()
        self.closed = threading.Event()
        self.fatal: KafkaError | None = None

    def _on_error(self, err: KafkaError) -> None:
        with self.log.lock:
            self.log.errors.append((self.member, err))
        if err.fatal():
            self.fatal = err

    def _commit(self, partitions: list[int]) -> None:
        offsets = [
            TopicPartition(self.topic, p, self.positions[p])
            for p in partitions
            if p in self.positions
        ]
        if not offsets:
            return
        try:
            done = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:  # e.g. the coordinator is down: nothing acknowledged
            with self.log.lock:
                self.log.errors.append((self.member, exc.args[0]))
            return
        with self.log.lock:
            for tp in done or []:
                if tp.error is None:
                    best = self.log.committed.get(tp.partition, -1)
                    self.log.committed[tp.partition] = max(best, tp.offset)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        got = frozenset(tp.partition for tp in partitions)
        with self.log.lock:
            self.log.events.append((self.member, "assign", got))
        self.owned |= got

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = frozenset(tp.partition for tp in partitions)
        self._commit(sorted(gone))
        with self.log.lock:
            self.log.events.append((self.member, "revoke", gone))
        self.owned -= gone
        for p in gone:
            self.positions.pop(p, None)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = frozenset(tp.partition for tp in partitions)
        with self.log.lock:
            self.log.events.append((self.member, "lost", gone))
        self.owned -= gone

    def run(self) -> None:
        c = self.consumer
        c.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        next_commit_s = time.monotonic()
        try:
            while not self.stop_event.is_set() and self.fatal is None:
                if self.commit_every_s is not None and time.monotonic() >= next_commit_s:
                    next_commit_s = time.monotonic() + self.commit_every_s
                    self._commit(sorted(self.owned))
                msg = c.poll(0.05)
                if msg is None:
                    continue
                if msg.error():
                    # librdkafka reports a fatal error (e.g. fencing) as a _FATAL event.
                    if msg.error().fatal() or msg.error().code() == KafkaError._FATAL:
                        self.fatal = msg.error()
                    continue
                p = msg.partition()
                with self.log.lock:
                    self.log.consumed.append(
                        Consumed(self.member, p, msg.offset(), msg.value(), p in self.owned)
                    )
                self.positions[p] = msg.offset() + 1
        finally:
            if self.fatal is None:
                self._commit(sorted(self.owned))
                if not self.static:
                    self._leave()
            c.close()
            self.closed.set()

    def _leave(self, timeout_s: float = 10) -> None:
        """Leave the group before close(), serving the revocation from poll(). Why:
        close() with an assignment calls the rebalance callback from inside librdkafka's
        close, where confluent-kafka's rd_kafka_rebalance_protocol() call can deadlock
        with the GIL held (librdkafka #4041), and no test timeout can fire then. A static
        member keeps close() alone: its close is a temporary leave, not a leave."""
        c = self.consumer
        c.unsubscribe()
        deadline = time.monotonic() + timeout_s
        while self.owned and time.monotonic() < deadline:
            c.poll(0.05)  # messages polled now are not recorded: their offsets are not
            # committed either, so the partition's next owner consumes them

    def stop(self, timeout_s: float = 30) -> None:
        self.stop_event.set()
        self.join(timeout_s)
        assert not self.is_alive(), f"consumer {self.member} did not close in {timeout_s} s"


def produce(
    bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str
) -> list[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = []
    for p in range(partitions):
        for i in range(per_partition):
            value = f"{tag}-{p}-{i}".encode()
            producer.produce(topic, value=value, partition=p)
            values.append(value)
    assert producer.flush(30) == 0
    return values


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def assignment_settled(members: list[Member], partitions: int) -> bool:
    """Every partition owned by exactly one live member."""
    owners: dict[int, int] = defaultdict(int)
    for m in members:
        for p in m.owned:
            owners[p] += 1
    return sorted(owners) == list(range(partitions)) and all(n == 1 for n in owners.values())

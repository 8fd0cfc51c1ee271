"""The data-plane requests Spark's connector and the Java clients send (CreateTopics, Produce,
Fetch, ListOffsets, Metadata, InitProducerId), at the versions both servers serve."""

from __future__ import annotations

from typing import Any

from tests.conformance.ops import FETCH, LIST_OFFSETS, METADATA, PRODUCE, TOPIC, TOPIC2
from tests.conformance.ops import topic_ids as topic_ids_of
from tests.conformance.runner import Session, sequence
from tests.support import client_batch

CREATE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS = 19, 22, 32
BASE_TS_MS = 1_700_000_000_000


def create_topic(
    s: Session,
    name: str,
    partitions: int = 2,
    *,
    version: int = 4,
    label: str = "create",
    wait: bool = True,
    configs: dict[str, str] | None = None,
) -> Any:
    """CreateTopics; with `wait`, returns once the topic serves (see Session.wait_topic)."""
    created = s.call(
        "admin",
        CREATE_TOPICS,
        version,
        label,
        topics=[
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [
                    {"name": key, "value": value} for key, value in (configs or {}).items()
                ],
            }
        ],
        timeout=10_000,
        validate_only=False,
    )
    if wait:
        s.wait_topic(name, partitions)
    return created


def produce(
    s: Session,
    topic: str,
    partition: int,
    records: bytes,
    *,
    version: int = 11,
    acks: int = -1,
    label: str = "produce",
) -> Any:
    return s.call(
        "producer",
        PRODUCE,
        version,
        label,
        transactional_id=None,
        acks=acks,
        timeout=10_000,
        topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    )


def batch(first: int, count: int, *, step_ms: int = 10, **kwargs: Any) -> bytes:
    """`count` records with keys/values numbered from `first`, timestamps 10 ms apart."""
    return client_batch(
        [(b"k%d" % i, b"v%d" % i, BASE_TS_MS + i * step_ms) for i in range(first, first + count)],
        **kwargs,
    )


def fetch(
    s: Session,
    topic: str,
    offsets: dict[int, int],
    *,
    version: int,
    isolation: int = 0,
    max_wait_ms: int = 0,
    label: str = "fetch",
) -> Any:
    """A full fetch (no session) of `topic` from {partition: offset}; v13+ names the topic
    by its id on this server."""
    topic_field: dict[str, Any] = {"topic": topic}
    if version >= 13:
        topic_field = {"topic_id": topic_ids_of(s)[topic]}
    return s.call(
        "consumer",
        FETCH,
        version,
        label,
        cluster_id=None,
        replica_id=-1,
        replica_state={"replica_id": -1, "replica_epoch": -1},
        max_wait=max_wait_ms,
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                **topic_field,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                        "replica_directory_id": None,
                    }
                    for p, offset in sorted(offsets.items())
                ],
            }
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def list_offsets(
    s: Session,
    topic: str,
    timestamps: dict[int, int],
    *,
    version: int,
    isolation: int = 0,
    label: str = "list offsets",
) -> Any:
    return s.call(
        "consumer",
        LIST_OFFSETS,
        version,
        label,
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts}
                    for p, ts in sorted(timestamps.items())
                ],
            }
        ],
    )


def _filled_topic(s: Session, produce_version: int = 11) -> str:
    """A new 2-partition topic: partition 0 holds batches of 5, 1 and 3 records."""
    topic = s.name("t")
    create_topic(s, topic)
    first = 0
    for count in (5, 1, 3):
        produce(s, topic, 0, batch(first, count), version=produce_version, label=f"{count} recs")
        first += count
    return topic


for _v in (3, 5, 7, 8, 9, 10, 11):

    @sequence(f"data/produce-v{_v}-then-fetch")
    def _(s: Session, version: int = _v) -> None:
        topic = _filled_topic(s, version)
        produce(s, topic, 5, batch(0, 1), version=version, label="unknown partition")
        produce(s, s.name("missing"), 0, batch(0, 1), version=version, label="unknown topic")
        fetch(s, topic, {0: 0, 1: 0}, version=12)


for _v in (4, 7, 11, 12, 13, 15, 16, 17):

    @sequence(f"data/fetch-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        topic = _filled_topic(s)
        fetch(s, topic, {0: 0, 1: 0}, version=version, label="from the start")
        fetch(s, topic, {0: 5}, version=version, label="from the second batch")
        fetch(s, topic, {0: 6}, version=version, label="from the middle of nothing: offset 6")
        fetch(s, topic, {0: 9}, version=version, label="at the end")
        fetch(s, topic, {0: 10}, version=version, label="past the end")
        fetch(s, topic, {0: 3}, version=version, label="inside the first batch")
        committed = "read_committed"
        fetch(s, topic, {0: 5}, version=version, isolation=1, label=f"{committed}: a batch")
        fetch(s, topic, {0: 10}, version=version, isolation=1, label=f"{committed}: past the end")


@sequence("data/fetch-unknown-topic-and-partition")
def _(s: Session) -> None:
    topic = _filled_topic(s)
    fetch(s, topic, {7: 0}, version=12, label="unknown partition")
    fetch(s, s.name("missing"), {0: 0}, version=12, label="unknown topic by name")
    fetch(s, topic, {7: 0}, version=12, isolation=1, label="unknown partition, read_committed")


@sequence("data/fetch-long-poll-times-out-empty")
def _(s: Session) -> None:
    topic = _filled_topic(s)
    fetch(s, topic, {1: 0}, version=12, max_wait_ms=300, label="nothing to read: waits")


for _v in (1, 2, 4, 5, 6, 7, 8, 9):

    @sequence(f"data/list-offsets-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        topic = _filled_topic(s)
        list_offsets(s, topic, {0: -2, 1: -2}, version=version, label="earliest")
        list_offsets(s, topic, {0: -1, 1: -1}, version=version, label="latest")
        for ts in (BASE_TS_MS, BASE_TS_MS + 15, BASE_TS_MS + 50, BASE_TS_MS + 81, 0):
            list_offsets(s, topic, {0: ts}, version=version, label=f"timestamp {ts}")
        if version >= 7:
            list_offsets(s, topic, {0: -3, 1: -3}, version=version, label="max timestamp")
        if version >= 2:
            list_offsets(s, topic, {0: -1}, version=version, isolation=1, label="committed")
        list_offsets(s, topic, {9: -1}, version=version, label="unknown partition")
        list_offsets(s, s.name("missing"), {0: -1}, version=version, label="unknown topic")


for _v in (4, 9, 12):

    @sequence(f"data/metadata-v{_v}-known-and-unknown-topics")
    def _(s: Session, version: int = _v) -> None:
        s.call(
            "admin",
            METADATA,
            version,
            "metadata",
            topics=[{"name": TOPIC, "topic_id": None}, {"name": TOPIC2, "topic_id": None}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        s.call(
            "admin",
            METADATA,
            version,
            "unknown topic, no auto-creation",
            topics=[{"name": s.name("missing"), "topic_id": None}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )


for _v in (1, 4, 12):  # v0's empty list means every topic

    @sequence(f"data/metadata-v{_v}-no-topics")
    def _(s: Session, version: int = _v) -> None:
        s.call(
            "admin",
            METADATA,
            version,
            "brokers only",
            topics=[],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )


for _v in (2, 4, 5, 7):

    @sequence(f"data/create-topics-v{_v}")
    def _(s: Session, version: int = _v) -> None:
        topic = s.name("t")
        create_topic(s, topic, 3, version=version, label="create")
        create_topic(s, topic, 3, version=version, label="create again", wait=False)
        create_topic(s, s.name("zero"), 0, version=version, label="zero partitions", wait=False)
        create_topic(s, "bad/name", 1, version=version, label="invalid name", wait=False)


# Kafka's standard topic configs (issue 17 item 7a): accepted with their values, then
# described with their types and sources; bad values refused with Kafka's messages.
STANDARD_CONFIGS = {
    "compression.type": "lz4",
    "compression.lz4.level": "5",
    "flush.ms": "1000",
    "flush.messages": "1",
    "preallocate": "true",
    "segment.index.bytes": "1048576",
    "segment.jitter.ms": "10",
    "index.interval.bytes": "8192",
    "unclean.leader.election.enable": "true",
    "leader.replication.throttled.replicas": "*",
}


@sequence("data/create-topics-v7-standard-configs")
def _(s: Session) -> None:
    topic = s.name("std")
    create_topic(s, topic, 1, version=7, configs=STANDARD_CONFIGS)
    s.call(
        "admin",
        DESCRIBE_CONFIGS,
        4,
        "describe",
        resources=[{"resource_type": 2, "resource_name": topic, "configuration_keys": None}],
        include_synonyms=False,
        include_documentation=False,
    )
    for name, value in (
        ("compression.type", "none"),
        ("compression.gzip.level", "0"),
        ("flush.messages", "0"),
        ("preallocate", "yes"),
        ("remote.storage.enable", "true"),
        ("follower.replication.throttled.replicas", "0:x"),
    ):
        create_topic(s, s.name("bad"), 1, version=7, configs={name: value}, label=name, wait=False)


for _v in (0, 2, 3, 4, 5):

    @sequence(f"data/init-producer-id-v{_v}-then-idempotent-produce")
    def _(s: Session, version: int = _v) -> None:
        topic = s.name("t")
        create_topic(s, topic)
        s.wait_producer_ids()
        pid = s.call(
            "producer",
            INIT_PRODUCER_ID,
            version,
            "init producer id",
            transactional_id=None,
            transaction_timeout=-1 if version else 60_000,
            producer_id=-1,
            producer_epoch=-1,
        )
        kw = {"producer_id": pid.producer_id, "epoch": pid.producer_epoch}
        produce(s, topic, 0, batch(0, 3, seq=0, **kw), label="seq 0")
        produce(s, topic, 0, batch(3, 2, seq=3, **kw), label="seq 3")
        produce(s, topic, 0, batch(3, 2, seq=3, **kw), label="seq 3 again: duplicate")
        produce(s, topic, 0, batch(9, 1, seq=9, **kw), label="seq 9: out of order")
        fetch(s, topic, {0: 0}, version=12)


INCREMENTAL_ALTER_CONFIGS = 44
_BROKER_CHANGES = (
    ("log.retention.ms", "3600000"),
    ("compression.type", "gzip"),
    ("max.connections", "1000"),
    ("log.cleaner.threads", "2"),
    ("cf.no.such.config", "x"),
    ("broker.id", "5"),
    ("log.dirs", "/tmp/elsewhere"),
    ("log.retention.ms", "abc"),
    ("compression.type", "nope"),
    ("max.connections", "-5"),
    ("log.segment.bytes", "10"),
)


def _alter_broker(s: Session, resource: str, name: str, value: str, validate_only: bool) -> None:
    s.call(
        "admin",
        INCREMENTAL_ALTER_CONFIGS,
        1,
        f"{resource or 'default'}: {name}={value}",
        resources=[
            {
                "resource_type": 4,
                "resource_name": resource,
                "configs": [{"name": name, "config_operation": 0, "value": value}],
            }
        ],
        validate_only=validate_only,
    )


for _resource in ("0", ""):

    @sequence(f"data/incremental-alter-broker-{_resource or 'default'}-configs")
    def _(s: Session, resource: str = _resource) -> None:
        """Issue 17 item 7c: which broker configs Kafka updates dynamically, which it
        refuses, and how it checks values (validate_only: other sequences see no change)."""
        for name, value in _BROKER_CHANGES:
            _alter_broker(s, resource, name, value, validate_only=True)
        # Refused for real too (nothing changes either way).
        _alter_broker(s, resource, "log.dirs", "/tmp/elsewhere", validate_only=False)

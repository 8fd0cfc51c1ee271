"""Damage to the files of a stopped server (issue 16, items 1 and 2): a batch failing its
checks is never served as data, readers get an error at once (CORRUPT_MESSAGE), and every
intact acknowledged record and committed offset after the damage survives a restart; a
torn tail (a write cut short by a crash) is still cut without complaint."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition
from kafka.errors import CorruptRecordError

from groupcoord.coordinator.runtime.partitioning import shard_for
from tests.integration.group_support import wait_until
from tests.integration.test_clients import create_topic
from tests.support import ServerProcess, serving

TOPIC = "t"
RECORDS = 120
CLOSED_SEGMENT_RECORDS = 300


@pytest.fixture
def small_segments(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server whose topic segments roll every 16 KiB (~125 of these batches): most
    batches sit in closed segments, trusted at start-up by their index files (an entry
    every 4 KiB) without reading the batches before the last entry."""
    with serving(tmp_path / "data", log_segment_bytes=16384) as proc:
        yield proc


def value(i: int) -> bytes:
    return b"value-%05d-" % i + b"x" * 40


def produce_one_batch_each(server: ServerProcess, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(start, start + count):
        producer.produce(TOPIC, value=value(i), partition=0)
        assert producer.flush(10) == 0  # acknowledged, and one batch per record


def batches(segment: Path) -> list[tuple[int, int]]:
    """(file position, base offset) of each batch of a segment file."""
    data = segment.read_bytes()
    found = []
    pos = 0
    while pos + 12 <= len(data):
        found.append((pos, int.from_bytes(data[pos : pos + 8], "big")))
        pos += int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
    return found


def segment_holding(directory: Path, offset: int) -> tuple[Path, int]:
    """The segment file holding the batch with base offset `offset`, and its position."""
    for segment in sorted(directory.glob("*.log")):
        for pos, base in batches(segment):
            if base == offset:
                return segment, pos
    raise AssertionError(f"no batch at {offset} in {directory}")


def flip(path: Path, *positions: int) -> None:
    data = bytearray(path.read_bytes())
    for position in positions:
        data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def consume_until_error(bootstrap: str, timeout_s: float = 20) -> tuple[list[bytes], int | None]:
    """Values a confluent-kafka consumer reads from the beginning of partition 0, until
    the first error (its code) or the end of the partition (None)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, -2)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                code = msg.error().code()
                return values, None if code == KafkaError._PARTITION_EOF else code
            values.append(msg.value())
    finally:
        consumer.close()
    raise AssertionError(f"no error and no end within {timeout_s} s after {len(values)} records")


def damage_reports(server: ServerProcess) -> list[str]:
    return [line for line in server.log_tail(400).splitlines() if "log damaged" in line]


def corrupt_count(server: ServerProcess, log_name: str) -> float:
    for line in server.metrics_text().splitlines():
        if line.startswith(f'groupcoord_storage_corrupt_batches_total{{log="{log_name}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_flipped_record_bytes_in_a_closed_segment_are_never_served(
    small_segments: ServerProcess,
) -> None:
    """Three flipped bytes inside a record of a closed segment (trusted at start-up): the
    records before it are served, then the consumer gets CORRUPT_MESSAGE at once (it used
    to get the wrong value, with no log line); a kafka-python consumer raises
    CorruptRecordError. One error line and one count, however often it is fetched."""
    server = small_segments
    create_topic(server.bootstrap, TOPIC, 1)
    produce_one_batch_each(server, CLOSED_SEGMENT_RECORDS)
    assert server.terminate() == 0
    directory = server.data_dir / "topics" / f"{TOPIC}-0"
    segment, pos = segment_holding(directory, 20)
    assert segment != sorted(directory.glob("*.log"))[-1]  # a closed segment
    flip(segment, pos + 75, pos + 80, pos + 85)  # inside the record's value
    server.start()

    values, error = consume_until_error(server.bootstrap)
    assert values == [value(i) for i in range(20)]
    assert error == KafkaError.INVALID_MSG  # Kafka's CORRUPT_MESSAGE (2)
    values, error = consume_until_error(server.bootstrap)  # again: same answer
    assert values == [value(i) for i in range(20)] and error == KafkaError.INVALID_MSG

    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=50
    )
    partition = KafkaPythonPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek(partition, 20)
    with pytest.raises(CorruptRecordError):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert not consumer.poll(timeout_ms=200)  # nothing served at the damage
    consumer.close()

    reports = damage_reports(server)
    assert len(reports) == 1, reports
    assert '"level": "error"' in reports[0] and f'"{TOPIC}-0"' in reports[0]
    assert '"offset": 20' in reports[0]
    assert corrupt_count(server, f"{TOPIC}-0") == 1.0


def test_a_flipped_batch_length_answers_an_error_not_a_stall(
    small_segments: ServerProcess,
) -> None:
    """A flipped byte of a batch's length in a closed segment: Fetch at that offset used to
    answer error 0 with a batch claiming 16 MB, and the consumer waited forever."""
    server = small_segments
    create_topic(server.bootstrap, TOPIC, 1)
    produce_one_batch_each(server, CLOSED_SEGMENT_RECORDS)
    assert server.terminate() == 0
    directory = server.data_dir / "topics" / f"{TOPIC}-0"
    segment, pos = segment_holding(directory, 20)
    assert segment != sorted(directory.glob("*.log"))[-1]
    flip(segment, pos + 9)  # the second byte of batchLength: +16 MB
    server.start()

    values, error = consume_until_error(server.bootstrap)
    assert values == [value(i) for i in range(20)]
    assert error == KafkaError.INVALID_MSG
    assert len(damage_reports(server)) == 1
    assert corrupt_count(server, f"{TOPIC}-0") == 1.0


def test_mid_log_damage_after_sigkill_keeps_the_intact_records_after_it(
    server: ServerProcess,
) -> None:
    """One flipped byte in the middle of the active segment after a SIGKILL: only that
    batch is lost (one error line naming the offsets), the 60 intact acknowledged records
    after it survive (they used to be dropped as a torn tail)."""
    create_topic(server.bootstrap, TOPIC, 1)
    produce_one_batch_each(server, RECORDS)
    server.kill()
    directory = server.data_dir / "topics" / f"{TOPIC}-0"
    segment, pos = segment_holding(directory, 59)
    flip(segment, pos + 80)
    server.start()

    values, error = consume_until_error(server.bootstrap)
    assert error is None
    assert values == [value(i) for i in range(RECORDS) if i != 59]
    reports = damage_reports(server)
    assert len(reports) == 1 and '"offsets_dropped": [[59, 59]]' in reports[0], reports
    assert corrupt_count(server, f"{TOPIC}-0") == 1.0


def test_damage_in_a_shard_log_after_sigkill_keeps_every_later_commit(
    server: ServerProcess,
) -> None:
    """The coordinator shard log: a flipped byte in the batch of the commit of offset 1500
    after a SIGKILL. The group's committed offset stays 3000, the last commit (it used to
    roll back to 1500: every record after the damage was dropped)."""
    create_topic(server.bootstrap, TOPIC, 1)
    committer = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "g", "enable.auto.commit": False}
    )
    for offset in range(100, 3001, 100):  # one batch per commit
        committer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
    committer.close()
    server.kill()
    directory = server.data_dir / f"__consumer_offsets-{shard_for('g', 50)}"
    segment = sorted(directory.glob("*.log"))[-1]
    positions = [pos for pos, _ in batches(segment)]
    damaged = positions[len(positions) // 2]
    flip(segment, damaged + 70)
    server.start()

    reader = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g"})
    try:
        committed = reader.committed([TopicPartition(TOPIC, 0)], timeout=20)[0].offset
    finally:
        reader.close()
    assert committed == 3000
    wait_until(lambda: len(damage_reports(server)) == 1, 10, "one damage report")
    assert directory.name in damage_reports(server)[0]
    assert corrupt_count(server, directory.name) == 1.0


def test_after_a_machine_restart_the_durable_offset_tells_damage_from_a_torn_tail(
    server: ServerProcess,
) -> None:
    """After a restart of the machine (another boot id) pages not yet written back may be
    lost, so only damage below the durable offset (what completed fsyncs covered,
    `durable-offset`) is salvaged; the batches past it are a torn tail, cut silently."""
    create_topic(server.bootstrap, TOPIC, 1)
    produce_one_batch_each(server, RECORDS)
    time.sleep(1.2)  # the durable offset file is written at most once a second
    produce_one_batch_each(server, 1, start=RECORDS)
    directory = server.data_dir / "topics" / f"{TOPIC}-0"
    wait_until(
        lambda: int((directory / "durable-offset").read_text()) == RECORDS + 1,
        10,
        "the durable offset file",
    )
    server.kill()
    (server.data_dir / "boot-id").write_text(f"{uuid.uuid4()}\n")  # another boot
    segment, pos = segment_holding(directory, 59)
    flip(segment, pos + 80)  # below the durable offset: damage
    torn = batches(segment)[-1][0] + 30  # the last batch, cut short by the "crash"
    with open(segment, "ab") as fh:
        fh.write(segment.read_bytes()[batches(segment)[-1][0] : torn])
    server.start()

    values, error = consume_until_error(server.bootstrap)
    assert error is None
    assert values == [value(i) for i in range(RECORDS + 1) if i != 59]
    reports = damage_reports(server)
    assert len(reports) == 1 and '"offsets_dropped": [[59, 59]]' in reports[0], reports


def test_a_torn_tail_after_a_machine_restart_is_still_cut_silently(
    server: ServerProcess,
) -> None:
    """Bytes appended after the last fsync and cut mid-batch (the write a crash tore): cut
    at start-up with a warning, never reported as damage, every acknowledged record kept."""
    create_topic(server.bootstrap, TOPIC, 1)
    produce_one_batch_each(server, 30)
    server.kill()
    (server.data_dir / "boot-id").write_text(f"{uuid.uuid4()}\n")
    segment = sorted((server.data_dir / "topics" / f"{TOPIC}-0").glob("*.log"))[-1]
    last = batches(segment)[-1][0]
    whole = segment.read_bytes()[last:]
    with open(segment, "ab") as fh:  # half a batch
        fh.write(whole[: len(whole) // 2])
    server.start()

    values, error = consume_until_error(server.bootstrap)
    assert error is None
    assert values == [value(i) for i in range(30)]
    assert "log recovery dropped an unflushed tail after a crash" in server.log_tail(80)
    assert not damage_reports(server)

"""Server behaviour: pipelining, idempotent producer rules, metrics, health, graceful stop."""

from __future__ import annotations

import datetime
import platform
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.serial import entity_reader

from groupcoord.protocol.api import response_schema
from groupcoord.protocol.batches import split_batches
from tests.integration.test_clients import create_topic
from tests.rawclient import RawClient, encode_request, request_class
from tests.support import ServerProcess, make_batch, serving


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def _batch(count: int, producer_id: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    return make_batch(count, producer_id=producer_id, epoch=epoch, seq=seq)


def _produce(client: RawClient, topic: str, records: bytes, acks: int = -1) -> Any:
    m = _m(0, 11)
    resp = client.request(
        0,
        11,
        m.ProduceRequest(
            transactional_id=None,
            acks=acks,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                m.TopicProduceData(
                    name=topic, partition_data=(m.PartitionProduceData(index=0, records=records),)
                ),
            ),
        ),
    )
    return resp.responses[0].partition_responses[0]


def _fetch_request(topic: str, offset: int, max_wait_ms: int, correlation_id: int) -> bytes:
    m = _m(1, 12)
    return encode_request(
        1,
        12,
        correlation_id,
        m.FetchRequest(
            cluster_id=None,
            replica_id=-1,
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                m.FetchTopic(
                    topic=topic,
                    partitions=(
                        m.FetchPartition(
                            partition=0,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
            rack_id="",
        ),
    )


def _read_correlation_ids(sock: socket.socket, count: int) -> list[int]:
    ids = []
    buf = b""
    while len(ids) < count:
        chunk = sock.recv(1 << 20)
        assert chunk, "server closed the connection"
        buf += chunk
        while len(buf) >= 8:
            (size,) = struct.unpack_from(">i", buf, 0)
            if len(buf) < 4 + size:
                break
            ids.append(struct.unpack_from(">i", buf, 4)[0])
            buf = buf[4 + size :]
    return ids


@pytest.mark.shared_server
def test_pipelined_requests_are_answered_in_order(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "pipe", 1)
    m = _m(3, 12)

    def metadata(correlation_id: int) -> bytes:
        return encode_request(
            3,
            12,
            correlation_id,
            m.MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )

    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        # A long poll (nothing to read at offset 0 yet) first, then quick requests behind it:
        # the quick ones must wait for it, so responses come back in request order.
        frames = [_fetch_request("pipe", 0, 400, 1)] + [metadata(i) for i in range(2, 302)]
        started = time.monotonic()
        sock.sendall(b"".join(frames))
        ids = _read_correlation_ids(sock, 301)
        assert ids == list(range(1, 302))
        assert time.monotonic() - started >= 0.35  # the fetch really parked


@pytest.mark.shared_server
def test_long_poll_is_woken_by_produce(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "wake", 1)
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock,
        RawClient(server.bootstrap) as producer,
    ):
        started = time.monotonic()
        sock.sendall(_fetch_request("wake", 0, 10_000, 7))
        time.sleep(0.2)
        assert _produce(producer, "wake", _batch(1)).error_code == 0
        assert _read_correlation_ids(sock, 1) == [7]
        assert time.monotonic() - started < 5


@pytest.mark.shared_server
def test_fetch_out_of_range_is_answered_without_waiting(server: ServerProcess) -> None:
    """A partition in error answers the fetch at once, as in Kafka, not after max_wait: a
    consumer with auto.offset.reset=none (Spark's executors) acts on OFFSET_OUT_OF_RANGE."""
    create_topic(server.bootstrap, "oor", 1)
    with RawClient(server.bootstrap) as client:
        assert _produce(client, "oor", _batch(3)).error_code == 0
        started = time.monotonic()
        client.send(_fetch_request("oor", 3 + 10, 5000, 1))  # past the log end, min_bytes 1
        frame = client.recv_frame()
        elapsed = time.monotonic() - started
    # Response header v1: correlation id, then empty tagged fields.
    fetched, _ = entity_reader(response_schema(1, 12))(frame, 5)
    partition = fetched.responses[0].partitions[0]
    assert partition.error_code == 1  # OFFSET_OUT_OF_RANGE
    # As Kafka answers a read in error: none of the log's offsets, no records.
    assert (partition.high_watermark, partition.last_stable_offset) == (-1, -1)
    assert partition.log_start_offset == -1 and partition.records == b""
    assert elapsed < 1.5, elapsed  # not parked until max_wait (5 s)


def test_idempotent_producer_dedupes_and_rejects_gaps(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "idem", 1)
    with RawClient(server.bootstrap) as client:
        m = _m(22, 5)
        pid = client.request(
            22,
            5,
            m.InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout=datetime.timedelta(milliseconds=-1),
                producer_id=-1,
                producer_epoch=-1,
            ),
        )
        producer_id, epoch = pid.producer_id, pid.producer_epoch
        first = _produce(client, "idem", _batch(3, producer_id, epoch, 0))
        assert (first.error_code, first.base_offset) == (0, 0)
        assert first.log_append_time is None  # CreateTime topic: -1 on the wire
        # A retry of the same batch: no second copy, the original offset comes back, and
        # (as Kafka) its max timestamp as log_append_time.
        sent = _batch(3, producer_id, epoch, 0)
        retry = _produce(client, "idem", sent)
        assert (retry.error_code, retry.base_offset) == (0, 0)
        max_timestamp_ms = split_batches(sent)[0].max_timestamp
        assert retry.log_append_time == datetime.datetime.fromtimestamp(
            max_timestamp_ms / 1000, datetime.UTC
        )
        gap = _produce(client, "idem", _batch(1, producer_id, epoch, 7))
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        # As Kafka: the log start offset, no message.
        assert (gap.log_start_offset, gap.error_message) == (0, None)
        nxt = _produce(client, "idem", _batch(2, producer_id, epoch, 3))
        assert (nxt.error_code, nxt.base_offset) == (0, 3)
        # KIP-360 epoch bump: the old epoch is fenced, the new one starts at 0.
        bumped = client.request(
            22,
            5,
            m.InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout=datetime.timedelta(milliseconds=-1),
                producer_id=producer_id,
                producer_epoch=epoch,
            ),
        )
        assert bumped.producer_epoch == epoch + 1
        assert _produce(client, "idem", _batch(1, producer_id, epoch + 1, 0)).error_code == 0
        fenced = _produce(client, "idem", _batch(1, producer_id, epoch, 5))
        assert (fenced.error_code, fenced.log_start_offset, fenced.error_message) == (47, 0, None)
    # The dedupe state survives a crash: it is rebuilt from the log.
    server.restart()
    with RawClient(server.bootstrap) as client:
        again = _produce(client, "idem", _batch(1, producer_id, epoch + 1, 0))
        assert (again.error_code, again.base_offset) == (0, 5)


@pytest.mark.shared_server
def test_watermarks_and_offsets_for_times_with_confluent(server: ServerProcess) -> None:
    topic = "watermarks"
    create_topic(server.bootstrap, topic, 1)
    # In the past: message.timestamp.after.max.ms (1 hour by default) refuses future ones.
    base = 1_700_000_000_000
    ts = base
    for size in (5, 1, 1, 3):  # one batch per flush: batches of different sizes
        producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 1000})
        for _ in range(size):
            producer.produce(topic, value=b"v", partition=0, timestamp=ts)
            ts += 10
        assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "wm"})
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 10)
    found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 55)], timeout=10)
    assert found[0].offset == 6  # first record with timestamp >= base + 55 is base + 60
    past = consumer.offsets_for_times([TopicPartition(topic, 0, base + 10_000)], timeout=10)
    assert past[0].offset == -1  # librdkafka's "end": no such record
    consumer.close()


def test_time_retention_empties_an_idle_topic(tmp_path: Path) -> None:
    """An idle topic whose only (active) segment expires is emptied by the retention timer
    alone, with nothing more produced: earliest == latest, and the offsets hold after a
    restart and continue where they were."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "short-lived"
    tp = TopicPartition(topic, 0)
    with serving(tmp_path / "data", log_retention_check_interval_ms=100) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        new_topic = NewTopic(topic, num_partitions=1, config={"retention.ms": "500"})
        created = admin.create_topics([new_topic])
        created[topic].result(10)
        producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
        for i in range(5):
            producer.produce(topic, value=b"v%d" % i, partition=0)
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "retention"})
        try:
            deadline = time.monotonic() + 15
            watermarks = consumer.get_watermark_offsets(tp, timeout=10)
            while watermarks != (5, 5) and time.monotonic() < deadline:
                time.sleep(0.1)
                watermarks = consumer.get_watermark_offsets(tp, timeout=10)
            assert watermarks == (5, 5)
        finally:
            consumer.close()
        server.restart()
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "retention"})
        try:
            assert consumer.get_watermark_offsets(tp, timeout=10) == (5, 5)
            producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
            producer.produce(topic, value=b"after", partition=0)
            assert producer.flush(10) == 0
            assert consumer.get_watermark_offsets(tp, timeout=10)[1] == 6
        finally:
            consumer.close()


@pytest.mark.shared_server
def test_metrics_and_health_endpoints(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "observed", 2)
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(50):
        producer.produce("observed", value=b"x" * 100, partition=i % 2)
    assert producer.flush(10) == 0
    with RawClient(server.bootstrap) as client:
        m = _m(3, 13)  # unsupported version: counted with its error
        client.request(
            3,
            13,
            m.MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    text = server.metrics_text()
    assert 'groupcoord_requests_total{api="PRODUCE"' in text
    assert (
        'groupcoord_requests_total{api="METADATA",error="35",'
        'error_name="UNSUPPORTED_VERSION",version="13"} 1.0'
    ) in text
    # The standard process and platform collectors, the build, Kafka's runtime gauges;
    # no `_created` series.
    assert "process_cpu_seconds_total " in text and "process_resident_memory_bytes " in text
    assert "python_info{" in text
    assert f'groupcoord_build_info{{python="{platform.python_version()}",version="' in text
    assert "groupcoord_coordinator_event_queue_size " in text
    assert "groupcoord_coordinator_thread_idle_ratio " in text
    assert "groupcoord_coordinator_batch_linger_seconds_count " in text
    assert "_created" not in text
    assert 'groupcoord_request_latency_seconds_bucket{api="PRODUCE"' in text
    assert (
        "groupcoord_network_in_bytes_total" in text and "groupcoord_network_out_bytes_total" in text
    )
    assert "groupcoord_connections " in text
    sizes = [
        line
        for line in text.splitlines()
        if line.startswith('groupcoord_log_size_bytes{topic="observed"}')
    ]
    assert sizes and float(sizes[0].split()[-1]) > 5000
    assert server.healthy()


def test_sigterm_finishes_in_flight_requests_and_exits_zero(server: ServerProcess) -> None:
    create_topic(server.bootstrap, "graceful", 1)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_fetch_request("graceful", 0, 20_000, 11))
        time.sleep(0.2)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        # The parked fetch is answered (empty) rather than dropped.
        assert _read_correlation_ids(sock, 1) == [11]
    assert server.proc.wait(20) == 0
    # No longer accepting.
    try:
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        refused = False
    except OSError:
        refused = True
    assert refused


def test_a_second_server_on_the_same_data_directory_refuses_to_start(
    server: ServerProcess,
) -> None:
    """As Kafka with its log directories' .lock: a second process on a data directory in
    use exits with an error and writes nothing there; the first keeps serving, and after
    it is SIGKILLed (no clean-up) a new process starts on the directory at once."""
    create_topic(server.bootstrap, "locked", 1)
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
    producer.produce("locked", b"before")
    assert producer.flush(10) == 0
    second = ServerProcess(server.data_dir)
    with pytest.raises(RuntimeError, match="in use by another groupcoord process"):
        second.start()
    assert second.proc is not None and second.proc.returncode == 1
    producer.produce("locked", b"while the second tried")
    assert producer.flush(10) == 0

    server.kill()
    third = ServerProcess(server.data_dir).start()
    try:
        consumer = Consumer(
            {
                "bootstrap.servers": third.bootstrap,
                "group.id": "lock-check",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition("locked", 0, 0)])
        values = []
        deadline = time.monotonic() + 10
        while len(values) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.close()
        assert values == [b"before", b"while the second tried"]
    finally:
        third.kill()


@pytest.mark.shared_server
def test_transactional_producers_are_served(server: ServerProcess) -> None:
    """Transactions are served (issue 18; until then this test checked that they were
    refused at once with TRANSACTIONAL_ID_AUTHORIZATION_FAILED). A transactional producer's
    first requests, FindCoordinator for its transactional id and InitProducerId with it, are
    answered by this node: init_transactions succeeds, and again for a second instance
    with the same id (which fences the first)."""
    producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "tx"})
    producer.init_transactions(20)
    again = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "tx"})
    again.init_transactions(20)

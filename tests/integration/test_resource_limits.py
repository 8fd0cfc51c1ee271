"""Running out of disk and of file descriptors: the server says so, logs it a few times
rather than thousands, keeps serving what it can, and recovers (issue 16, items 7, 12)."""

from __future__ import annotations

import datetime
import json
import re
import resource
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.group_support import wait_until
from tests.integration.test_clients import create_topic
from tests.integration.test_durability import read_all
from tests.rawclient import RawClient, encode_request, request_class
from tests.support import ServerProcess, client_batch, serving

KAFKA_STORAGE_ERROR = 56
MiB = 1024 * 1024


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def _produce(client: RawClient, topic: str, value_bytes: int) -> int:
    """Produce one record of `value_bytes` to partition 0 (acks=all); its error code."""
    m = _m(0, 9)
    records = client_batch([(b"k", b"v" * value_bytes, int(time.time() * 1000))])
    response = client.request(
        0,
        9,
        m.ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                m.TopicProduceData(
                    name=topic, partition_data=(m.PartitionProduceData(index=0, records=records),)
                ),
            ),
        ),
    )
    return int(response.responses[0].partition_responses[0].error_code)


def _health(server: ServerProcess) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{server.metrics_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _metric(server: ServerProcess, name: str, labels: str = "") -> float:
    pattern = re.compile(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", re.M)
    found = pattern.search(server.metrics_text())
    assert found is not None, f"{name}{labels} not exported"
    return float(found.group(1))


def _log_lines(server: ServerProcess) -> list[dict[str, Any]]:
    lines = []
    for line in server.log_path.read_text(errors="replace").splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            lines.append({"raw": line})
    return lines


def _api_versions_frame(correlation_id: int) -> bytes:
    return encode_request(18, 0, correlation_id, request_class(18, 0)())


def test_disk_full_is_reported_in_health_logged_a_few_times_and_recovers(
    tmp_path: Path,
) -> None:
    """A file-size limit on the server process (RLIMIT_FSIZE: writes past it fail with
    EFBIG, SIGXFSZ being ignored) stands for a full disk, which needs root to make: every
    append then fails. Produce answers KAFKA_STORAGE_ERROR; /health answers 503 naming the
    log and the error; the metrics move; thousands of identical failures log a few lines
    whose suppressed counts add up exactly; lifting the limit brings writes and /health
    back, with every acknowledged record readable."""
    limit = 4 * MiB
    with serving(
        tmp_path / "data",
        rlimits={resource.RLIMIT_FSIZE: (limit, resource.RLIM_INFINITY)},
        log_repeat_window_ms=2000,
    ) as server:
        create_topic(server.bootstrap, "full", 1)
        acked = 0
        failed = 0
        with RawClient(server.bootstrap) as client:
            # Fill the segment to the last bytes below the limit.
            for value_bytes in (400_000, 40_000, 4_000, 400, 40, 1):
                while True:
                    code = _produce(client, "full", value_bytes)
                    if code:
                        assert code == KAFKA_STORAGE_ERROR
                        failed += 1
                        break
                    acked += 1
            assert acked > 10
            status, body = _health(server)
            assert status == 503, body
            assert body["status"] == "storage_failed"
            assert "full-0" in body["reason"] and "EFBIG" in body["reason"], body
            assert body["storage_failures"][0]["kind"] == "append"
            assert _metric(server, "groupcoord_storage_healthy") == 0
            # A burst of identical failures.
            for _ in range(2000):
                assert _produce(client, "full", 100) == KAFKA_STORAGE_ERROR
                failed += 1
            assert _metric(
                server, "groupcoord_storage_write_failures_total", '{kind="append"}'
            ) == (failed)

            def burst_closed() -> bool:
                return any(
                    line.get("event") == "repeated log lines suppressed"
                    and line.get("repeated_event") == "append failed"
                    for line in _log_lines(server)
                )

            wait_until(burst_closed, 30, "the summary of the suppressed lines")
            lines = _log_lines(server)
            appends = [line for line in lines if line.get("event") == "append failed"]
            summaries = [
                line
                for line in lines
                if line.get("event") == "repeated log lines suppressed"
                and line.get("repeated_event") == "append failed"
            ]
            assert len(appends) + len(summaries) < 40, len(appends)
            suppressed = sum(line.get("suppressed_repeats", 0) for line in appends + summaries)
            assert len(appends) + suppressed == failed
            # One per episode at most (each filling step above ended one), and limited.
            assert 1 <= sum(line.get("event") == "log cannot be written" for line in lines) <= 6

            # Space comes back.
            assert server.proc is not None
            resource.prlimit(
                server.proc.pid,
                resource.RLIMIT_FSIZE,
                (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
            )
            assert _produce(client, "full", 100) == 0
            acked += 1
            status, body = _health(server)
            assert (status, body["status"]) == (200, "ok"), body
            assert _metric(server, "groupcoord_storage_healthy") == 1
            assert any(line.get("event") == "log written again" for line in _log_lines(server))
        got = read_all(server.bootstrap, "full", 1)
        assert [offset for offset, _ in got[0]] == list(range(acked))


def test_more_partitions_than_file_descriptors(tmp_path: Path) -> None:
    """300 partitions and 50 coordinator shards under a descriptor limit of 256 that the
    server cannot raise: every partition is written and read by real clients, offsets are
    committed, new connections are still accepted, and all of it survives a SIGKILL."""
    topic = "wide"
    partitions = 300
    limits = {resource.RLIMIT_NOFILE: (256, 256)}
    with serving(tmp_path / "data", rlimits=limits) as server:
        create_topic(server.bootstrap, topic, partitions)
        producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        sent = {p: [f"{p}-{i}".encode() for i in range(3)] for p in range(partitions)}
        for p, values in sent.items():
            for value in values:
                producer.produce(topic, value=value, partition=p)
        assert producer.flush(60) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": server.bootstrap,
                "group.id": "wide-readers",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
            }
        )
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 120
        while sum(map(len, got.values())) < 3 * partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got[msg.partition()].append(msg.value())
        assert got == sent
        consumer.commit(
            offsets=[TopicPartition(topic, p, 3) for p in range(partitions)], asynchronous=False
        )
        consumer.close()
        # New connections are served.
        clients = [
            socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(30)
        ]
        for i, sock in enumerate(clients):
            sock.sendall(_api_versions_frame(i))
        for sock in clients:
            assert len(sock.recv(65536)) > 8
            sock.close()
        assert _metric(server, "groupcoord_segment_files_open") <= 128
        assert _metric(server, "groupcoord_segment_file_reopens_total") > 0
        started = [
            line for line in _log_lines(server) if line.get("event") == "file descriptor limit"
        ]
        assert started and started[0]["soft"] == 256 and started[0]["segment_files_open_max"] == 128

        server.restart()
        assert read_all(server.bootstrap, topic, partitions) == {
            p: [(i, value) for i, value in enumerate(values)] for p, values in sent.items()
        }
        reader = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "wide-readers"})
        committed = reader.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
        reader.close()
        assert [tp.offset for tp in committed] == [3] * partitions


def test_out_of_descriptors_on_accept_is_logged_once_and_the_server_recovers(
    tmp_path: Path,
) -> None:
    """Connections until the server has no descriptor left: one JSON error line naming the
    limit (no traceback per accept); the connections beyond wait in the backlog and are
    served, like a new one, once descriptors are free again."""
    limits = {resource.RLIMIT_NOFILE: (160, 160)}
    with serving(tmp_path / "data", rlimits=limits, segment_files_open_max=16) as server:
        clients = []
        for i in range(220):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.sendall(_api_versions_frame(i))
            clients.append(sock)

        def starved() -> bool:
            return any(
                line.get("event") == "cannot accept connections: out of file descriptors"
                for line in _log_lines(server)
            )

        wait_until(starved, 30, "the server to run out of descriptors")
        time.sleep(3)  # a few accept retries, each failing again
        lines = _log_lines(server)
        errors = [line for line in lines if "cannot accept" in str(line.get("event"))]
        assert len(errors) == 1, errors
        assert errors[0]["error"].startswith("EMFILE") and errors[0]["fd_limit_soft"] == 160
        assert not any("Traceback" in str(line) for line in lines)
        last = clients[-1]  # beyond the limit: waiting in the backlog, unanswered
        last.settimeout(0.5)
        with pytest.raises(TimeoutError):
            last.recv(65536)
        # Free descriptors: the first connections go away.
        for sock in clients[:150]:
            sock.close()
        for sock in clients[150:]:
            sock.settimeout(30)
            assert len(sock.recv(65536)) > 8  # its ApiVersions waited in the backlog
            sock.close()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as probe:
            probe.sendall(_api_versions_frame(1))
            assert len(probe.recv(65536)) > 8
        wait_until(
            lambda: any(
                line.get("event") == "accepting connections again" for line in _log_lines(server)
            ),
            10,
            "the end of the episode to be logged",
        )
        assert _metric(server, "groupcoord_accept_failures_total", '{error="EMFILE"}') >= 2

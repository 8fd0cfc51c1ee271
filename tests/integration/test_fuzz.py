"""Bad input never takes the server down: random, truncated and oversized frames, unknown
API keys and versions, and bad record batches. Each gets Kafka's error or a closed
connection, and other connections keep being served."""

from __future__ import annotations

import datetime
import os
import socket
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.rawclient import RawClient, encode_request, request_class
from tests.support import ServerProcess, serving

FUZZ_SETTINGS = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(Path(tmp_path_factory.mktemp("fuzz")) / "data", frame_bytes_max=1048576) as proc:
        yield proc


@pytest.fixture(scope="module")
def witness(fuzz_server: ServerProcess) -> Iterator[RawClient]:
    """A long-lived connection that must keep being served throughout."""
    with RawClient(fuzz_server.bootstrap) as client:
        yield client


def _api_versions_ok(client: RawClient) -> None:
    m = sys.modules[request_class(18, 3).__module__]
    resp = client.request(
        18, 3, m.ApiVersionsRequest(client_software_name="w", client_software_version="1")
    )
    assert resp.error_code == 0


def _exchange(server: ServerProcess, data: bytes, wait_s: float = 0.5) -> bytes:
    """Send raw bytes, half-close, and read whatever comes back until the server closes or
    goes quiet."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait_s) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return b""
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, OSError):
            pass
        return b"".join(chunks)


def _after(server: ServerProcess, witness: RawClient) -> None:
    assert server.alive(), server.log_tail()
    _api_versions_ok(witness)


@FUZZ_SETTINGS
@given(st.binary(max_size=512))
def test_random_bytes(fuzz_server: ServerProcess, witness: RawClient, data: bytes) -> None:
    _exchange(fuzz_server, data, wait_s=0.2)
    _after(fuzz_server, witness)


@FUZZ_SETTINGS
@given(st.integers(min_value=1, max_value=200), st.binary(min_size=0, max_size=64))
def test_truncated_frames(
    fuzz_server: ServerProcess, witness: RawClient, cut: int, tail: bytes
) -> None:
    m = sys.modules[request_class(3, 12).__module__]
    frame = encode_request(
        3,
        12,
        1,
        m.MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    )
    # The size prefix promises the whole frame, but only part of it arrives.
    _exchange(fuzz_server, frame[: max(4, len(frame) - cut)] + tail[:0], wait_s=0.2)
    # A frame whose declared size is consistent but whose body is cut and padded.
    body = frame[4:][: max(0, len(frame) - 4 - cut)] + tail
    reply = _exchange(fuzz_server, struct.pack(">i", len(body)) + body, wait_s=0.2)
    if reply:
        (size,) = struct.unpack_from(">i", reply, 0)
        assert size == len(reply) - 4
    _after(fuzz_server, witness)


def test_oversized_frame_closes_only_that_connection(
    fuzz_server: ServerProcess, witness: RawClient
) -> None:
    reply = _exchange(fuzz_server, struct.pack(">i", 50 * 2**20) + b"\x00" * 1024)
    assert reply == b""
    reply = _exchange(fuzz_server, struct.pack(">i", -1))
    assert reply == b""
    _after(fuzz_server, witness)


@FUZZ_SETTINGS
@given(
    st.integers(min_value=-32768, max_value=32767), st.integers(min_value=-32768, max_value=32767)
)
def test_unknown_api_keys_and_versions(
    fuzz_server: ServerProcess, witness: RawClient, api_key: int, version: int
) -> None:
    header = struct.pack(">hhi", api_key, version, 42) + struct.pack(">h", 1) + b"x" + b"\x00"
    reply = _exchange(fuzz_server, struct.pack(">i", len(header)) + header, wait_s=0.2)
    if reply:
        # A response is only ever a well-framed answer to our correlation id.
        (size, correlation_id) = struct.unpack_from(">ii", reply, 0)
        assert size == len(reply) - 4 and correlation_id == 42
    _after(fuzz_server, witness)


def test_unsupported_version_of_known_api_is_answered(fuzz_server: ServerProcess) -> None:
    # Metadata v13 exists in the codec but is not served: error 35, connection stays usable.
    with RawClient(fuzz_server.bootstrap) as client:
        m = sys.modules[request_class(3, 13).__module__]
        resp = client.request(
            3,
            13,
            m.MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
        assert resp.error_code == 35
        _api_versions_ok(client)


def test_api_versions_from_the_future_gets_v0_answer(fuzz_server: ServerProcess) -> None:
    header = struct.pack(">hhi", 18, 77, 3) + struct.pack(">h", 1) + b"x" + b"\x00\x00"
    reply = _exchange(fuzz_server, struct.pack(">i", len(header)) + header)
    size, correlation_id, error = struct.unpack_from(">iih", reply, 0)
    assert correlation_id == 3 and error == 35
    (count,) = struct.unpack_from(">i", reply, 10)
    assert count > 5  # our version list, at v0 layout


@pytest.fixture(scope="module")
def topic(fuzz_server: ServerProcess) -> str:
    from tests.integration.test_clients import create_topic

    create_topic(fuzz_server.bootstrap, "fuzz-topic", 1)
    return "fuzz-topic"


@FUZZ_SETTINGS
@given(st.binary(min_size=1, max_size=300), st.integers(min_value=0, max_value=80))
def test_bad_record_batches_get_corrupt_message(
    fuzz_server: ServerProcess, witness: RawClient, topic: str, garbage: bytes, keep: int
) -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=10**6,
    )
    builder.append(0, timestamp=1, key=b"k", value=b"v", headers=[])
    good = bytes(builder.build())
    records = good[:keep] + garbage  # a real header cut anywhere, then junk
    assume(records != good)  # a cut-and-patched batch can come out whole by chance
    m = sys.modules[request_class(0, 9).__module__]
    with RawClient(fuzz_server.bootstrap, timeout_s=5) as client:
        resp = client.request(
            0,
            9,
            m.ProduceRequest(
                transactional_id=None,
                acks=1,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(
                    m.TopicProduceData(
                        name=topic,
                        partition_data=(m.PartitionProduceData(index=0, records=records),),
                    ),
                ),
            ),
        )
        error = resp.responses[0].partition_responses[0].error_code
        assert error in (2, 87), error  # CORRUPT_MESSAGE (or INVALID_RECORD)
    _after(fuzz_server, witness)


def _known_requests() -> list[tuple[int, int]]:
    from kio.schema.index import api_key_map, schema_name_map

    from groupcoord.protocol.api import request_schema

    return sorted(
        (key, version)
        for key, name in api_key_map.items()
        for version in schema_name_map[name]
        if request_schema(key, version) is not None
    )


@FUZZ_SETTINGS
@given(st.sampled_from(_known_requests()), st.binary(max_size=200))
def test_random_bodies_behind_valid_headers(
    fuzz_server: ServerProcess, witness: RawClient, api: tuple[int, int], body: bytes
) -> None:
    from groupcoord.protocol.api import request_schema

    api_key, version = api
    cls = request_schema(api_key, version)
    header = struct.pack(">hhi", api_key, version, 42) + struct.pack(">h", 1) + b"x"
    if cls.__header_schema__.__version__ >= 2:
        header += b"\x00"
    reply = _exchange(
        fuzz_server, struct.pack(">i", len(header + body)) + header + body, wait_s=0.2
    )
    if reply:
        (size, correlation_id) = struct.unpack_from(">ii", reply, 0)
        assert size == len(reply) - 4 and correlation_id == 42
    _after(fuzz_server, witness)


def test_huge_declared_array_is_refused_not_allocated(
    fuzz_server: ServerProcess, witness: RawClient
) -> None:
    # Metadata v12 whose topic array claims 2**32 - 2 entries in a frame of a few bytes:
    # the codec would try to reserve memory for all of them and abort the process.
    header = struct.pack(">hhi", 3, 12, 1) + struct.pack(">h", 1) + b"x" + b"\x00"
    body = b"\xff\xff\xff\xff\x0f" + b"\x00" * 4
    assert _exchange(fuzz_server, struct.pack(">i", len(header + body)) + header + body) == b""
    _after(fuzz_server, witness)

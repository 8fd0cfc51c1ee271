"""Requests of every advertised API and version (the server's own ApiVersions answer),
generated from the codec's schemas, against a running server: valid-shaped requests with
random field values (steered towards names the server knows, so they reach the handlers and
not only the decoder), and mutations of them: a null where the schema forbids one, bytes set
to length and marker values (huge, negative, null), inserted or deleted, a truncated body.

For each request: no handler fails (the server logs no "handler failed", no traceback, no
line at level error, and no answer carries UNKNOWN_SERVER_ERROR, which is what a handler's
exception is answered with), every answer decodes with the codec at the request's version, a
valid-shaped request is answered (never refused with a closed connection), and the server
answers a probe on another connection afterwards.

The default run gives every advertised version FUZZ_SCHEMA_EXAMPLES examples, derandomized
(the same requests every run: a new failure means a change, not a lucky draw);
`pytest -m fuzz_deep` draws FUZZ_DEEP_EXAMPLES random ones per version (minutes).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader
from kio.serial._introspect import classify_field, get_schema_field_type

from groupcoord.protocol.api import request_schema, response_schema
from tests.rawclient import RawClient
from tests.schema_values import (
    FUZZ_TOPIC,
    encode_raw,
    entity_values,
    mutated_bytes,
    null_allowed,
)
from tests.support import ServerProcess, serving

DEFAULT_EXAMPLES = int(os.environ.get("FUZZ_SCHEMA_EXAMPLES", "6"))
DEEP_EXAMPLES = int(os.environ.get("FUZZ_DEEP_EXAMPLES", "150"))
_COMMON = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}
CORRELATION_ID = 4242
PROBE_ID = 4243
# A request still unanswered after this long is parked (a JoinGroup waiting for the other
# members, a Fetch waiting for data): that is an answer to come, not a failure.
ANSWER_WAIT_S = 1.0
_BLOBS = ("string", "bytes", "records")


def _advertised() -> list[tuple[int, int]]:
    """Every (api key, version) the server advertises, from its dispatch table, the source
    of its ApiVersions answer (test_advertised_versions_are_the_api_versions_answer)."""
    from groupcoord.coordinator.server.dispatch import build_dispatch

    _handlers, versions = build_dispatch()
    return sorted((int(k), v) for k, (low, high) in versions.items() for v in range(low, high + 1))


ADVERTISED = _advertised()
IDS = [f"{key}-v{version}" for key, version in ADVERTISED]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(
        Path(tmp_path_factory.mktemp("fuzz-schemas")) / "data",
        frame_bytes_max=1048576,
        fetch_wait_max_ms=100,  # a long poll is cut short, not parked for the run
        group_initial_rebalance_delay_ms=0,
        group_min_session_timeout_ms=1,  # drawn session timeouts are small: joins succeed
        group_max_session_timeout_ms=2000,
    ) as proc:
        from tests.integration.test_clients import create_topic

        create_topic(proc.bootstrap, FUZZ_TOPIC, 2)
        yield proc


class LogWatch:
    """The lines the server logged since the last look that show a failure: a handler's
    exception, a traceback, anything at level error or worse, any line that is not JSON."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size

    def problems(self) -> list[str]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        self.offset += end
        found = []
        for raw in data[:end].decode(errors="replace").splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                found.append(raw)
                continue
            if not isinstance(line, dict):
                found.append(raw)
            elif line.get("level") in ("error", "critical") or "exception" in line:
                found.append(raw)
        return found


@pytest.fixture(scope="module")
def log_watch(fuzz_server: ServerProcess) -> LogWatch:
    return LogWatch(fuzz_server.log_path)


@pytest.fixture(scope="module")
def witness(fuzz_server: ServerProcess) -> Iterator[RawClient]:
    """A long-lived connection that must keep being served throughout."""
    with RawClient(fuzz_server.bootstrap) as client:
        yield client


def _probe(client: RawClient) -> None:
    cls = request_schema(18, 0)
    assert cls is not None
    assert client.request(18, 0, cls()).error_code == 0


def _header(api_key: int, version: int, correlation_id: int) -> bytes:
    cls = request_schema(api_key, version)
    assert cls is not None
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"fuzz"
    return header + b"\x00" if cls.__header_schema__.__version__ >= 2 else header


def _sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


_PROBE_FRAME = _sized(_header(18, 0, PROBE_ID))


def exchange(port: int, frame: bytes) -> tuple[str, bytes | None]:
    """Send `frame` then an ApiVersions probe on one new connection: ("answered", the
    answer's frame), ("unanswered", None) when the probe's answer comes first (the server
    answers in order: a request it answers with nothing, Produce with acks=0), ("closed",
    None) or ("parked", None) when nothing came within ANSWER_WAIT_S."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WAIT_S) as sock:
        try:
            sock.sendall(_sized(frame) + _PROBE_FRAME)
        except OSError:
            return "closed", None
        buffer = b""
        while True:
            if len(buffer) >= 8:
                (size,) = struct.unpack_from(">i", buffer, 0)
                if len(buffer) >= 4 + size:
                    answer = buffer[4 : 4 + size]
                    (correlation_id,) = struct.unpack_from(">i", answer, 0)
                    return (
                        ("unanswered", None)
                        if correlation_id == PROBE_ID
                        else (
                            "answered",
                            answer,
                        )
                    )
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return "parked", None
            except OSError:
                return "closed", None
            if not chunk:
                return "closed", None
            buffer += chunk


def decode_answer(api_key: int, version: int, answer: bytes) -> Any:
    """The answer's body decoded with the codec at `version`; it must fill the frame."""
    (correlation_id,) = struct.unpack_from(">i", answer, 0)
    assert correlation_id == CORRELATION_ID
    cls = response_schema(api_key, version)
    pos = 4 + (1 if cls.__flexible__ and api_key != 18 else 0)  # response header v1: tags
    value, size = entity_reader(cls)(answer, pos)
    assert pos + size == len(answer), f"{len(answer) - pos - size} bytes left after the body"
    return value


def unknown_server_errors(value: Any, path: str = "") -> list[str]:
    """Where in a decoded answer an error code is UNKNOWN_SERVER_ERROR (-1)."""
    found = []
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        where = f"{path}.{field.name}"
        if isinstance(item, tuple):
            for i, element in enumerate(item):
                if dataclasses.is_dataclass(element):
                    found += unknown_server_errors(element, f"{where}[{i}]")
        elif dataclasses.is_dataclass(item):
            found += unknown_server_errors(item, where)
        elif field.metadata.get("kafka_type") == "error_code" and item == -1:
            found.append(where)
    return found


# --- mutations -------------------------------------------------------------------------


def _null_slots(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths (field names and array indexes) to the arrays, strings and bytes of `value`
    that the schema says are never null."""
    for field in dataclasses.fields(value):
        kind = classify_field(field)
        item = getattr(value, field.name)
        here = (*path, field.name)
        blob = (
            not kind.is_array
            and "kafka_type" in field.metadata
            and (get_schema_field_type(field) in _BLOBS)
        )
        if (blob or kind.is_array) and not null_allowed(field.type) and item is not None:
            yield here
        if isinstance(item, tuple):
            for i, element in enumerate(item):
                if dataclasses.is_dataclass(element):
                    yield from _null_slots(element, (*here, i))
                elif isinstance(element, str | bytes):  # an element of an array of strings
                    yield (*here, i)
        elif dataclasses.is_dataclass(item):
            yield from _null_slots(item, here)


def _with_null(value: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return None
    name, rest = path[0], path[1:]
    item = getattr(value, name)
    if rest and isinstance(rest[0], int):
        index, rest = rest[0], rest[1:]
        item = (*item[:index], _with_null(item[index], rest), *item[index + 1 :])
    else:
        item = _with_null(item, rest)
    return dataclasses.replace(value, **{name: item})


@st.composite
def fuzz_requests(draw: st.DrawFn, api_key: int, version: int) -> tuple[str, Any, bytes]:
    """(mutation, the drawn request value, the body sent)."""
    cls = request_schema(api_key, version)
    assert cls is not None
    value = draw(entity_values(cls, long=False, fuzz=True), label="request")
    mutation = draw(st.sampled_from(["none", "none", "null", "bytes", "truncate"]))
    if mutation == "null":
        slots = list(_null_slots(value))
        if not slots:
            mutation = "none"
        else:
            slot = draw(st.sampled_from(slots), label="null at")
            value = _with_null(value, slot)
    body = encode_raw(cls, value)
    if mutation == "bytes":
        body = draw(mutated_bytes(body), label="mutated body")
    elif mutation == "truncate":
        if not body:
            mutation = "none"
        else:
            body = body[: draw(st.integers(0, len(body) - 1), label="cut at")]
    return mutation, value, body


def check_request(
    server: ServerProcess,
    witness: RawClient,
    log_watch: LogWatch,
    api_key: int,
    version: int,
    drawn: tuple[str, Any, bytes],
) -> None:
    mutation, value, body = drawn
    log_watch.problems()  # what came before is not this request's
    outcome, answer = exchange(server.port, _header(api_key, version, CORRELATION_ID) + body)
    what = f"api {api_key} v{version} ({mutation}): {value!r}"[:2000]
    if answer is not None:
        decoded = decode_answer(api_key, version, answer)
        assert not unknown_server_errors(decoded), (what, decoded)
    if mutation == "none":
        # A valid-shaped request is answered (or, Produce with acks=0, answered by nothing).
        allowed = {"answered", "parked"} | ({"unanswered"} if api_key == 0 else set())
        assert outcome in allowed, (outcome, what)
    else:
        assert outcome != "unanswered" or api_key == 0, what
    assert server.alive(), server.log_tail()
    _probe(witness)
    problems = log_watch.problems()
    assert not problems, (what, problems)


@pytest.mark.parametrize(("api_key", "version"), ADVERTISED, ids=IDS)
@settings(max_examples=DEFAULT_EXAMPLES, derandomize=True, **_COMMON)
@given(data=st.data())
def test_every_advertised_version(
    fuzz_server: ServerProcess,
    witness: RawClient,
    log_watch: LogWatch,
    api_key: int,
    version: int,
    data: st.DataObject,
) -> None:
    drawn = data.draw(fuzz_requests(api_key, version))
    check_request(fuzz_server, witness, log_watch, api_key, version, drawn)


@pytest.mark.fuzz_deep
@pytest.mark.parametrize(("api_key", "version"), ADVERTISED, ids=IDS)
@settings(max_examples=DEEP_EXAMPLES, **_COMMON)
@given(data=st.data())
def test_every_advertised_version_deep(
    fuzz_server: ServerProcess,
    witness: RawClient,
    log_watch: LogWatch,
    api_key: int,
    version: int,
    data: st.DataObject,
) -> None:
    drawn = data.draw(fuzz_requests(api_key, version))
    check_request(fuzz_server, witness, log_watch, api_key, version, drawn)


def test_advertised_versions_are_the_api_versions_answer(witness: RawClient) -> None:
    """The suite covers what the server says it serves: its ApiVersions answer."""
    cls = request_schema(18, 0)
    assert cls is not None
    answer = witness.request(18, 0, cls())
    advertised = sorted(
        (int(k.api_key), v)
        for k in answer.api_keys
        for v in range(k.min_version, k.max_version + 1)
    )
    assert advertised == ADVERTISED


def test_null_array_is_refused_not_answered_with_a_handler_failure(
    fuzz_server: ServerProcess, witness: RawClient, log_watch: LogWatch
) -> None:
    """Issue 16 item 13's example: ListOffsets v1 with topics = null. The codec read it as
    None, the handler failed with a TypeError and the answer was UNKNOWN_SERVER_ERROR;
    as Kafka, the request is refused at decoding and the connection closed."""
    log_watch.problems()
    body = struct.pack(">ii", -1, -1)  # replica id -1, topics null
    outcome, _answer = exchange(fuzz_server.port, _header(2, 1, CORRELATION_ID) + body)
    assert outcome == "closed"
    assert log_watch.problems() == []
    _probe(witness)

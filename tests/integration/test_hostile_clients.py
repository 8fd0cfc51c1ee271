"""Clients that hold connections, dribble frames, hoard memory or send what breaks a codec
(issue 16, items 8, 9 and 14): each is closed or held back, and everyone else keeps being
served. The real server over real sockets; other client addresses come from binding
127.0.0.x (all of 127/8 is loopback on Linux)."""

from __future__ import annotations

import json
import socket
import struct
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile import connect, send_partial_frames
from tests.rawclient import RawClient, encode_request, request_class
from tests.support import ServerProcess, serving

BOUND_S = 30  # generous: the machine is shared


def _api_versions_ok(client: RawClient) -> None:
    m = sys.modules[request_class(18, 3).__module__]
    resp = client.request(
        18, 3, m.ApiVersionsRequest(client_software_name="probe", client_software_version="1")
    )
    assert resp.error_code == 0


def _probe(server: ServerProcess, source: str = "127.0.0.1") -> None:
    """A new connection from `source` is answered."""
    with connect(server, source) as sock:
        client = RawClient.__new__(RawClient)
        client.sock, client.correlation_id = sock, 0
        _api_versions_ok(client)


def _closed_by_server(sock: socket.socket, within_s: float = BOUND_S) -> bool:
    """Whether the server closes `sock` (EOF or reset) within `within_s`; bytes it may send
    first are read and dropped."""
    sock.settimeout(within_s)
    deadline = time.monotonic() + within_s
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def _refused(server: ServerProcess, source: str) -> bool:
    """Whether a new connection from `source` is refused: reset by the server as soon as it
    is accepted (on a loaded machine the reset can reach the socket before connect()
    returns: ECONNRESET there) or closed by it right after."""
    try:
        sock = connect(server, source)
    except ConnectionResetError:
        return True
    with sock:
        return _closed_by_server(sock)


def _log_from(server: ServerProcess, offset: int) -> list[str]:
    with open(server.log_path, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace").splitlines()


def _log_size(server: ServerProcess) -> int:
    return server.log_path.stat().st_size


# item 8: idle connections, per-address cap, slow frames ------------------------------------


def test_idle_connections_are_closed_while_an_active_client_is_served(tmp_path: Path) -> None:
    with serving(tmp_path / "data", connections_max_idle_ms=1000) as server:
        idle = [connect(server) for _ in range(20)]
        with RawClient(server.bootstrap, timeout_s=BOUND_S) as active:
            # Requests more often than the idle time, for longer than it: never closed.
            for _ in range(12):
                _api_versions_ok(active)
                time.sleep(0.25)
            for sock in idle:
                assert _closed_by_server(sock), "an idle connection was left open"
                sock.close()
            _api_versions_ok(active)
        assert 'connection_errors_total{reason="idle_timeout"} 20.0' in server.metrics_text()


def test_connections_beyond_the_per_address_cap_are_refused_others_are_served(
    tmp_path: Path,
) -> None:
    with serving(
        tmp_path / "data",
        connections_max_per_ip=5,
        connections_max_per_ip_overrides="127.0.0.3:0",
    ) as server:
        held = [RawClient.__new__(RawClient) for _ in range(5)]
        for client in held:
            client.sock, client.correlation_id = connect(server, "127.0.0.1"), 0
            _api_versions_ok(client)
        offset = _log_size(server)
        for _ in range(50):
            assert _refused(server, "127.0.0.1"), "a connection beyond the per-address cap was kept"
        # Another address is served, and so are the connections already admitted.
        _probe(server, "127.0.0.2")
        for client in held:
            _api_versions_ok(client)
        # An override of 0 refuses an address outright.
        assert _refused(server, "127.0.0.3")
        # The refusals are summarised, not logged one line each.
        deadline = time.monotonic() + BOUND_S
        while True:
            refused = [
                json.loads(line)
                for line in _log_from(server, offset)
                if "connections refused" in line
            ]
            if sum(r["count"] for r in refused if r["address"] == "127.0.0.1") == 50:
                break
            assert time.monotonic() < deadline, refused
            time.sleep(0.2)
        assert len(refused) < 50
        # A freed slot is free again.
        held.pop().close()
        deadline = time.monotonic() + BOUND_S
        while True:
            try:
                _probe(server, "127.0.0.1")
                break
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline
                time.sleep(0.2)
        for client in held:
            client.close()


def test_slow_senders_are_closed_after_the_frame_read_deadline(tmp_path: Path) -> None:
    with serving(tmp_path / "data", frame_read_timeout_ms=1000) as server:
        slow = [connect(server) for _ in range(30)]
        frame = encode_request(
            18,
            3,
            1,
            sys.modules[request_class(18, 3).__module__].ApiVersionsRequest(
                client_software_name="slowloris", client_software_version="1"
            ),
        )
        closed: set[int] = set()
        deadline = time.monotonic() + BOUND_S
        position = 0
        # A byte every 0.2 s on each: never idle, never a whole frame.
        while len(closed) < len(slow) and time.monotonic() < deadline:
            for i, sock in enumerate(slow):
                if i in closed:
                    continue
                try:
                    sock.send(frame[position : position + 1])
                except OSError:
                    closed.add(i)
            position = min(position + 1, len(frame) - 2)
            time.sleep(0.2)
        assert len(closed) == len(slow), f"{len(slow) - len(closed)} slow senders left open"
        _probe(server)
        assert 'connection_errors_total{reason="frame_read_timeout"} 30.0' in (
            server.metrics_text()
        )
        for sock in slow:
            sock.close()


# item 9: memory held by partial frames -----------------------------------------------------


def test_partial_large_frames_keep_memory_bounded(tmp_path: Path) -> None:
    frame_bytes = 100 * 1024 * 1024
    with serving(tmp_path / "data", frame_bytes_max=frame_bytes) as server:
        socks, peak = send_partial_frames(server, 10, frame_bytes, 99 * 1024 * 1024)
        try:
            assert peak < 300 * 1024 * 1024, f"server RSS reached {peak / 2**20:.0f} MiB"
            _probe(server)
            _probe(server, "127.0.0.2")
        finally:
            for sock in socks:
                sock.close()
        _probe(server)


# item 14: failures while reading or answering ----------------------------------------------


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(Path(tmp_path_factory.mktemp("hostile")) / "data") as proc:
        yield proc


def _closes_with_one_json_line(server: ServerProcess, data: bytes, event: str) -> None:
    offset = _log_size(server)
    with connect(server) as sock:
        sock.sendall(data)
        assert _closed_by_server(sock), "the connection was left open"
    _probe(server)
    deadline = time.monotonic() + BOUND_S
    while not any(event in line for line in _log_from(server, offset)):
        assert time.monotonic() < deadline, _log_from(server, offset)
        time.sleep(0.1)
    lines = _log_from(server, offset)
    assert not any("Fatal error on transport" in line for line in lines), lines
    for line in lines:
        json.loads(line)  # every line is one JSON object
    assert sum(event in line for line in lines) == 1, lines


def test_api_versions_with_a_truncated_header_closes_with_one_log_line(
    plain_server: ServerProcess,
) -> None:
    body = struct.pack(">hhi", 18, 99, 1)  # a future ApiVersions, then no client id
    _closes_with_one_json_line(
        plain_server, struct.pack(">i", len(body)) + body, '"closing connection"'
    )


def test_metadata_by_topic_id_with_a_null_name_is_answered(plain_server: ServerProcess) -> None:
    """Metadata v10 asking by topic id with a null name (whose answer once could not be
    encoded, closing the connection) is answered INVALID_REQUEST, as Kafka answers it; the
    safety net for a response that cannot be encoded is in tests/unit/test_connection_guards.py."""
    m = sys.modules[request_class(3, 10).__module__]
    request = m.MetadataRequest(
        topics=(m.MetadataRequestTopic(topic_id=uuid.uuid4(), name=None),),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    with RawClient(plain_server.bootstrap) as client:
        response = client.request(3, 10, request)
    assert [t.error_code for t in response.topics] == [42]  # INVALID_REQUEST
    _probe(plain_server)

"""A recorded wire session: a fixed sequence of group-API requests played against a server,
and the encoded responses, normalized, kept in `tests/data/wire_session.json`.

Why: a refactor of the server must leave the bytes on the wire as they are. The session
(`script` in `tests/wire_script.py`, requests built by `tests/wire_requests.py`) sends
every served version of every group API, their fast-path shapes and their main error
paths, on three connections, in an order that makes each answer deterministic (no waits
on timers: the server runs with the settings in `SERVER_SETTINGS`; where a request parks,
the session waits for the state it needs with unrecorded DescribeGroups polls, so what is
recorded never depends on timing).

What varies between runs legitimately is replaced in the encoded response by a placeholder
of the same encoding, so what is compared is still the encoded bytes:
- server-generated member ids (uuid4 text, in classic `<client or instance id>-<uuid>` and
  ConsumerGroupHeartbeat v0 ids): each uuid becomes `00000000-0000-4000-8000-<n>` in order
  of first appearance; the session echoes the real ids in later requests;
- topic ids (16 raw bytes): `UUID(int=n)` in order of first appearance;
- the listener's port after its host (FindCoordinator): 9092; the cluster id: `A` * 22.
Nothing else in these responses varies (no timestamps; throttle times are 0): recording
twice gives the same file.

Use:
    python -m tests.wire_session --record       # start a server, play, write the fixture
    python -m tests.wire_session --check        # start a server, play, compare
    python -m tests.wire_session --server HOST:PORT --record|--check [--fixture FILE]
(`--server`: a server already started with the flags `--flags` prints, e.g. from an older
checkout: `python -m coordinator serve --listen ... $(python -m tests.wire_session --flags)`.)
`tests/integration/test_wire_session.py` plays it on every test run.

Re-recording the fixture means the wire changed: it must be justified in the commit that
does it (which response changed, and why that is right), never done to make the test pass.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import struct
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kio.serial import entity_reader

from groupcoord.protocol.api import build, request_schema, response_schema
from tests.rawclient import RawClient, encode_request

FIXTURE = Path(__file__).resolve().parent / "data" / "wire_session.json"

# Passed to the server as `--set name=value`: no initial rebalance delay and target
# assignments computed in the heartbeat that causes them, so that no step waits on a timer;
# consumer-group sessions of 10 minutes, so that no member expires however slow the run.
SERVER_SETTINGS: dict[str, object] = {
    "group_initial_rebalance_delay_ms": 0,
    "group_consumer_assignment_interval_ms": 0,
    "group_consumer_session_timeout_ms": 600_000,
    "group_consumer_max_session_timeout_ms": 600_000,
}

_UUID_TEXT = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PLACEHOLDER_PORT = 9092
_API_VERSIONS = 18


@dataclasses.dataclass(frozen=True)
class Entry:
    """One recorded response: on which connection, to which request, normalized frame
    (correlation id, response header, body; without the size prefix)."""

    label: str
    connection: str
    api_key: int
    version: int
    response: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "connection": self.connection,
            "api_key": self.api_key,
            "version": self.version,
            "response": self.response.hex(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        return cls(
            data["label"],
            data["connection"],
            data["api_key"],
            data["version"],
            bytes.fromhex(data["response"]),
        )


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any, int]:
    """(correlation id, response entity, bytes left over) of a response frame."""
    cls = response_schema(api_key, version)
    (correlation_id,) = struct.unpack_from(">i", frame, 0)
    pos = 4 + (1 if cls.__flexible__ and api_key != _API_VERSIONS else 0)
    value, size = entity_reader(cls)(frame, pos)
    return correlation_id, value, len(frame) - pos - size


def request(api_key: int, version: int, **values: Any) -> Any:
    """A request entity of `api_key` at `version` (fields this version lacks are dropped)."""
    cls = request_schema(api_key, version)
    assert cls is not None, (api_key, version)
    return build(cls, **values)


def entity(api_key: int, version: int, *names: str, **values: Any) -> Any:
    """A nested request entity, by the first of `names` the version's module has."""
    cls = request_schema(api_key, version)
    module = sys.modules[cls.__module__]
    for name in names:
        if hasattr(module, name):
            return build(getattr(module, name), **values)
    raise AttributeError(f"none of {names} in {module.__name__}")


class Normalizer:
    """Replaces what legitimately varies between runs by same-sized placeholders."""

    def __init__(self, host: str, port: int) -> None:
        self.member_ids: dict[bytes, bytes] = {}
        self.topic_ids: dict[bytes, bytes] = {}
        self.cluster_id: bytes | None = None
        self._address = (host.encode() + struct.pack(">i", port), host.encode())

    def learn(self, value: Any) -> None:
        """Registers every non-zero UUID (topic ids) found in a decoded response."""
        for found in _uuids(value):
            raw = found.bytes
            if found.int and raw not in self.topic_ids:
                self.topic_ids[raw] = uuid.UUID(int=len(self.topic_ids) + 1).bytes

    def __call__(self, frame: bytes) -> bytes:
        for match in _UUID_TEXT.finditer(frame):
            text = match.group()
            if text not in self.member_ids:
                n = len(self.member_ids) + 1
                self.member_ids[text] = f"00000000-0000-4000-8000-{n:012d}".encode()
        for real, placeholder in self.member_ids.items():
            frame = frame.replace(real, placeholder)
        for real, placeholder in self.topic_ids.items():
            frame = frame.replace(real, placeholder)
        address, host = self._address
        frame = frame.replace(address, host + struct.pack(">i", PLACEHOLDER_PORT))
        if self.cluster_id:
            frame = frame.replace(self.cluster_id, b"A" * len(self.cluster_id))
        return frame


def _uuids(value: Any) -> Iterator[uuid.UUID]:
    if isinstance(value, uuid.UUID):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _uuids(getattr(value, f.name))
    elif isinstance(value, tuple):
        for item in value:
            yield from _uuids(item)


class _Connection:
    def __init__(self, address: str, client_id: str) -> None:
        self.raw = RawClient(address, timeout_s=60)
        self.client_id = client_id
        self.correlation_id = 0
        # (label, api key, version, correlation id) of requests sent, in order.
        self.pending: deque[tuple[str, int, int, int]] = deque()


class Session:
    """Connections to one server, and what was recorded on them.

    `call` sends a request and records its response; `send` + `recv` split it for requests
    that park (JoinGroup, SyncGroup); `quiet` sends one whose response is not recorded
    (sync points); `wait_for` polls quietly until a condition holds."""

    def __init__(self, address: str) -> None:
        self.address = address
        host, port = address.rsplit(":", 1)
        self.normalize = Normalizer(host, int(port))
        self.entries: list[Entry] = []
        self._connections: dict[str, _Connection] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}

    def close(self) -> None:
        for conn in self._connections.values():
            conn.raw.close()

    def _conn(self, name: str) -> _Connection:
        conn = self._connections.get(name)
        if conn is None:
            conn = self._connections[name] = _Connection(self.address, f"wire-{name}")
        return conn

    def send(self, conn_name: str, label: str, body: Any) -> None:
        conn = self._conn(conn_name)
        cls = type(body)
        conn.correlation_id += 1
        conn.raw.send(
            encode_request(
                cls.__api_key__, cls.__version__, conn.correlation_id, body, conn.client_id
            )
        )
        conn.pending.append((label, cls.__api_key__, cls.__version__, conn.correlation_id))

    def recv(self, conn_name: str, record: bool = True) -> Any:
        conn = self._conn(conn_name)
        label, api_key, version, correlation_id = conn.pending.popleft()
        frame = conn.raw.recv_frame()
        got_id, value, left = decode_response(api_key, version, frame)
        assert got_id == correlation_id, (label, got_id, correlation_id)
        assert left == 0, f"{label}: {left} bytes after the response"
        if record:
            self.normalize.learn(value)
            self.entries.append(Entry(label, conn_name, api_key, version, self.normalize(frame)))
        return value

    def call(self, conn_name: str, label: str, body: Any) -> Any:
        self.send(conn_name, label, body)
        return self.recv(conn_name)

    def quiet(self, conn_name: str, body: Any) -> Any:
        self.send(conn_name, "(not recorded)", body)
        return self.recv(conn_name, record=False)

    def wait_for(self, what: str, poll: Callable[[], bool], timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not poll():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s} s for {what}")
            time.sleep(0.01)


def play(address: str) -> list[Entry]:
    """Plays the session against the server at `address`; the normalized responses."""
    from tests.wire_script import script

    session = Session(address)
    try:
        script(session)
    finally:
        session.close()
    labels = [e.label for e in session.entries]
    assert len(labels) == len(set(labels)), "labels must be unique"
    return session.entries


def load(path: Path = FIXTURE) -> list[Entry]:
    data = json.loads(path.read_text())
    return [Entry.from_json(e) for e in data["entries"]]


def save(entries: list[Entry], path: Path = FIXTURE, note: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "about": "tests/wire_session.py: normalized responses of the recorded session; "
        "re-recording means the wire changed and must be justified",
        "recorded": note,
        "server_settings": SERVER_SETTINGS,
        "entries": [e.to_json() for e in entries],
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def mismatches(expected: list[Entry], got: list[Entry]) -> list[str]:
    """One message per response that differs, with a decoded field-by-field diff."""
    out = []
    if [e.label for e in expected] != [g.label for g in got]:
        out.append(
            "the session's requests differ from the recording's (re-record deliberately): "
            f"{len(expected)} recorded, {len(got)} played; first differing label: "
            + next(
                (
                    f"{e.label!r} / {g.label!r}"
                    for e, g in zip(expected, got, strict=False)
                    if e.label != g.label
                ),
                "(one list is a prefix of the other)",
            )
        )
    for e, g in zip(expected, got, strict=False):
        if e.label == g.label and e.response != g.response:
            out.append(describe_mismatch(e, g))
    return out


def describe_mismatch(expected: Entry, got: Entry) -> str:
    lines = [
        f"{expected.label} (api {expected.api_key} v{expected.version}, connection "
        f"{expected.connection}): response bytes differ"
    ]
    try:
        _, want, want_left = decode_response(expected.api_key, expected.version, expected.response)
        _, have, have_left = decode_response(got.api_key, got.version, got.response)
    except Exception as e:  # a response the codec cannot read: show the bytes
        lines.append(f"  (not decodable: {e!r})")
    else:
        lines.extend(f"  {line}" for line in field_diff(want, have))
        if want_left != have_left:
            lines.append(f"  trailing bytes: expected {want_left}, got {have_left}")
    at = next(
        (
            i
            for i, (a, b) in enumerate(zip(expected.response, got.response, strict=False))
            if a != b
        ),
        min(len(expected.response), len(got.response)),
    )
    lines.append(f"  first differing byte at {at} of {len(expected.response)}/{len(got.response)}")
    lines.append(f"  expected {expected.response[at : at + 32].hex()}")
    lines.append(f"  got      {got.response[at : at + 32].hex()}")
    return "\n".join(lines)


def field_diff(want: Any, have: Any, path: str = "") -> list[str]:
    """Field paths whose values differ between two decoded entities."""
    if type(want) is not type(have):
        return [f"{path or '.'}: expected {want!r}, got {have!r}"]
    if dataclasses.is_dataclass(want) and not isinstance(want, type):
        out = []
        for f in dataclasses.fields(want):
            out.extend(field_diff(getattr(want, f.name), getattr(have, f.name), f"{path}.{f.name}"))
        return out
    if isinstance(want, tuple):
        if len(want) != len(have):
            return [f"{path}: expected {len(want)} items, got {len(have)}: {want!r} / {have!r}"]
        out = []
        for i, (a, b) in enumerate(zip(want, have, strict=True)):
            out.extend(field_diff(a, b, f"{path}[{i}]"))
        return out
    return [] if want == have else [f"{path or '.'}: expected {want!r}, got {have!r}"]


def _play_with_server() -> list[Entry]:
    from tests.support import serving

    with tempfile.TemporaryDirectory() as tmp, serving(Path(tmp) / "data", **SERVER_SETTINGS) as s:
        return play(s.bootstrap)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", help="HOST:PORT of a running server (default: start one)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", action="store_true", help="write the fixture")
    action.add_argument("--check", action="store_true", help="compare with the fixture")
    action.add_argument("--flags", action="store_true", help="print the server's --set flags")
    parser.add_argument("--fixture", type=Path, default=FIXTURE, help=f"default: {FIXTURE}")
    parser.add_argument("--note", default="", help="what was recorded (kept in the file)")
    args = parser.parse_args(argv)
    if args.flags:
        print(" ".join(f"--set {name}={value}" for name, value in SERVER_SETTINGS.items()))
        return 0
    entries = play(args.server) if args.server else _play_with_server()
    if args.check:
        problems = mismatches(load(args.fixture), entries)
        for problem in problems:
            print(problem)
        print(f"{len(entries)} responses, {len(problems)} mismatches")
        return 1 if problems else 0
    save(entries, args.fixture, args.note)
    print(f"{len(entries)} responses written to {args.fixture}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An asyncio raw-protocol client for the group benchmarks (bench_groups.py).

Requests are encoded with ``tests/rawclient.encode_request`` (kio underneath);
responses are decoded with kio for the occasional JoinGroup/SyncGroup/OffsetFetch,
and by hand on the hot paths (Heartbeat, OffsetCommit), where a load generator
written in Python must stay cheaper than the server it measures.

Many requests may be in flight on one connection (pipelining); responses are
matched to requests by correlation id.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from kio.serial import entity_reader  # noqa: E402

from groupcoord.protocol.api import build, response_schema  # noqa: E402
from tests.rawclient import encode_request, request_class  # noqa: E402

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, API_VERSIONS = 8, 9, 18

MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
FENCED_INSTANCE_ID = 82


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def _mod(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user data (null)."""
    out = struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", len(partitions)) + b"".join(_I32.pack(p) for p in partitions)
    return out + struct.pack(">i", -1)


# --- request bodies ------------------------------------------------------------------------


def join_body(
    group: str,
    member_id: str = "",
    instance_id: str | None = None,
    session_timeout_ms: int = 60_000,
    rebalance_timeout_ms: int = 60_000,
    topics: tuple[str, ...] = ("bench-groups",),
    version: int = 9,
) -> Any:
    m = _mod(JOIN_GROUP, version)
    return build(
        m.JoinGroupRequest,
        group_id=group,
        session_timeout=ms(session_timeout_ms),
        rebalance_timeout=ms(rebalance_timeout_ms),
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=(
            build(m.JoinGroupRequestProtocol, name="range", metadata=subscription(list(topics))),
        ),
        reason=None,
    )


def sync_body(
    group: str,
    generation: int,
    member_id: str,
    assignments: dict[str, bytes] | None = None,
    instance_id: str | None = None,
    version: int = 5,
) -> Any:
    m = _mod(SYNC_GROUP, version)
    return build(
        m.SyncGroupRequest,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocol_name="range",
        assignments=tuple(
            build(m.SyncGroupRequestAssignment, member_id=k, assignment=v)
            for k, v in (assignments or {}).items()
        ),
    )


def heartbeat_body(
    group: str, generation: int, member_id: str, instance_id: str | None = None, version: int = 4
) -> Any:
    m = _mod(HEARTBEAT, version)
    return build(
        m.HeartbeatRequest,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
    )


def commit_body(
    group: str, topic: str, partition: int, offset: int, version: int = 9, count: int = 1
) -> Any:
    """A simple-consumer commit (generation -1, no member id) of partitions
    partition .. partition + count - 1, all at `offset`."""
    m = _mod(OFFSET_COMMIT, version)
    return build(
        m.OffsetCommitRequest,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=-1,
        topics=(
            build(
                m.OffsetCommitRequestTopic,
                name=topic,
                partitions=tuple(
                    build(
                        m.OffsetCommitRequestPartition,
                        partition_index=p,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                    for p in range(partition, partition + count)
                ),
            ),
        ),
    )


def offset_fetch_body(group: str, partitions: dict[str, list[int]], version: int = 8) -> Any:
    m = _mod(OFFSET_FETCH, version)
    return build(
        m.OffsetFetchRequest,
        groups=(
            build(
                m.OffsetFetchRequestGroup,
                group_id=group,
                member_id=None,
                member_epoch=-1,
                topics=tuple(
                    build(m.OffsetFetchRequestTopics, name=t, partition_indexes=tuple(ps))
                    for t, ps in partitions.items()
                ),
            ),
        ),
        require_stable=False,
    )


class Template:
    """A pre-encoded request frame whose correlation id (and optionally one i64 field)
    is patched in place, so sending costs a bytes join and no encoding."""

    __slots__ = ("head", "parts")

    def __init__(self, api_key: int, version: int, body: Any, i64_marker: int | None = None):
        frame = encode_request(api_key, version, 0x7EADBEEF, body)
        # size(4) api_key(2) version(2) correlation id(4) ...
        assert _I32.unpack_from(frame, 8)[0] == 0x7EADBEEF
        self.head = frame[:8]
        rest = frame[12:]
        # The bytes around each occurrence of the marker (every one takes the value).
        self.parts = [rest] if i64_marker is None else rest.split(struct.pack(">q", i64_marker))
        assert i64_marker is None or len(self.parts) > 1, "marker not found"

    @property
    def tail(self) -> bytes:
        """The frame after the correlation id, of a template without a marker."""
        assert len(self.parts) == 1, "a template with a marker has no fixed tail"
        return self.parts[0]

    def frame(self, correlation_id: int, value: int | None = None) -> bytes:
        head = self.head + _I32.pack(correlation_id)
        if len(self.parts) == 1:
            return head + self.parts[0]
        return head + struct.pack(">q", value).join(self.parts)


# --- connections ---------------------------------------------------------------------------


class Conn(asyncio.Protocol):
    """One TCP connection; any number of requests in flight, matched by correlation id.

    ``call()`` sends one request and awaits its decoded response. For load, set
    ``on_frames``: it then receives, per read, the list of (correlation id,
    frame bytes view start, buffer) and must do its own bookkeeping; the
    pending map is then not used.
    """

    def __init__(self) -> None:
        self.buf = bytearray()
        self.pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self.cid = 0
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()
        # Fast path: called as on_raw(buf, [(cid, pos_of_frame_body)...]) per read.
        self.on_raw: Callable[[bytearray, list[tuple[int, int]]], None] | None = None

    @classmethod
    async def open(cls, bootstrap: str) -> Conn:
        host, port = bootstrap.rsplit(":", 1)
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(cls, host, int(port))
        return proto

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        err = ConnectionError(f"connection lost: {exc!r}")
        for fut, _, _ in self.pending.values():
            if not fut.done():
                fut.set_exception(err)
        self.pending.clear()
        if not self.closed.done():
            self.closed.set_result(exc)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        n = len(buf)
        pos = 0
        got: list[tuple[int, int]] = []
        unpack = _I32.unpack_from
        while n - pos >= 4:
            size = unpack(buf, pos)[0]
            if n - pos - 4 < size:
                break
            got.append((unpack(buf, pos + 4)[0], pos + 4))
            pos += 4 + size
        if not got:
            return
        if self.on_raw is not None:
            self.on_raw(buf, got)
        else:
            for cid, at in got:
                entry = self.pending.pop(cid, None)
                if entry is None:
                    continue
                fut, api_key, version = entry
                if fut.done():
                    continue
                size = unpack(buf, at - 4)[0]
                frame = bytes(buf[at : at + size])
                try:
                    fut.set_result(decode_response(api_key, version, frame))
                except Exception as e:  # noqa: BLE001 - surfaced to the caller
                    fut.set_exception(e)
        del buf[:pos]

    def next_cid(self) -> int:
        self.cid = (self.cid + 1) & 0x7FFFFFFF
        return self.cid

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def call(self, api_key: int, version: int, body: Any, timeout: float = 120.0) -> Any:
        cid = self.next_cid()
        fut = asyncio.get_running_loop().create_future()
        self.pending[cid] = (fut, api_key, version)
        self.write(encode_request(api_key, version, cid, body, client_id="bench-groups"))
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            self.pending.pop(cid, None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    cls = response_schema(api_key, version)
    pos = 4
    if cls.__flexible__ and api_key != API_VERSIONS:
        pos += 1  # response header v1: empty tagged fields
    value, _ = entity_reader(cls)(frame, pos)
    return value


async def join_until_member(conn: Conn, group: str, **kw: Any) -> Any:
    """JoinGroup v9, answering MEMBER_ID_REQUIRED with the member id handed out."""
    timeout = kw.pop("timeout", 120.0)
    resp = await conn.call(JOIN_GROUP, 9, join_body(group, **kw), timeout=timeout)
    if resp.error_code == MEMBER_ID_REQUIRED:
        kw["member_id"] = resp.member_id
        resp = await conn.call(JOIN_GROUP, 9, join_body(group, **kw), timeout=timeout)
    return resp


def assign_all(members: list[str], topic: str = "bench-groups") -> dict[str, bytes]:
    """One partition per member (what a range assignor would hand out for that many)."""
    return {m: assignment(topic, [i]) for i, m in enumerate(sorted(members))}


async def join_and_sync(
    conn: Conn,
    group: str,
    instance_id: str | None = None,
    session_timeout_ms: int = 60_000,
    rebalance_timeout_ms: int = 60_000,
    member_id: str = "",
    timeout: float = 120.0,
) -> dict:
    """One member's JoinGroup (v9, with the member-id round trip) then SyncGroup (v5).

    The leader computes and sends the assignment. Returns member id, generation,
    leader flag and the codes seen.
    """
    # Like a real client: a rebalance that starts while syncing (a late member of the
    # group joined) is answered by rejoining with the member id we have.
    for _attempt in range(10):
        j = await join_until_member(
            conn,
            group,
            member_id=member_id,
            instance_id=instance_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            timeout=timeout,
        )
        if j.error_code != 0:
            raise RuntimeError(f"JoinGroup {group} -> error {int(j.error_code)} ({j!r})")
        leader = j.leader == j.member_id
        assignments = assign_all([m.member_id for m in j.members]) if leader else None
        s = await conn.call(
            SYNC_GROUP,
            5,
            sync_body(group, j.generation_id, j.member_id, assignments, instance_id),
            timeout=timeout,
        )
        if s.error_code != REBALANCE_IN_PROGRESS:
            break
        member_id = j.member_id
    if s.error_code != 0:
        raise RuntimeError(
            f"SyncGroup {group} gen {j.generation_id} member {j.member_id} -> "
            f"error {int(s.error_code)}"
        )
    return {
        "member_id": j.member_id,
        "generation": j.generation_id,
        "leader": leader,
        "members_seen": len(j.members),
        "assignment": s.assignment,
        "skip_assignment": getattr(j, "skip_assignment", False),
    }


def leave_body(group: str, members: list[tuple[str, str | None]], version: int = 5) -> Any:
    m = _mod(LEAVE_GROUP, version)
    return build(
        m.LeaveGroupRequest,
        group_id=group,
        members=tuple(
            build(m.MemberIdentity, member_id=mid, group_instance_id=iid, reason="bench done")
            for mid, iid in members
        ),
    )


def api_versions_body(version: int = 3) -> Any:
    m = _mod(API_VERSIONS, version)
    return build(
        m.ApiVersionsRequest, client_software_name="bench-groups", client_software_version="1"
    )


async def open_many(bootstrap: str, n: int, batch: int = 200) -> list[Conn]:
    """``n`` connections, opened ``batch`` at a time (a burst of thousands of SYNs
    overflows the listen backlog)."""
    conns: list[Conn] = []
    try:
        while len(conns) < n:
            k = min(batch, n - len(conns))
            conns += await asyncio.gather(*(Conn.open(bootstrap) for _ in range(k)))
    except BaseException:
        for c in conns:
            c.close()
        raise
    return conns


# --- load drivers (hand-decoded hot paths) -------------------------------------------------


def paced_count(elapsed_s: float, rate_per_s: float, index: int, drivers: int) -> int:
    """How many requests driver `index` of `drivers`, each sending `rate_per_s`, should
    have sent `elapsed_s` into an open-loop run. Driver k is ahead by k/drivers of one
    request, so the drivers' sends are spread evenly over each one's period: without
    the offset every driver sends in the same tick, and the server sees one burst of
    `drivers` requests per period (at 500/s over 100 connections, 100 at once every
    200 ms), whose draining time is then measured as latency."""
    return int(elapsed_s * rate_per_s + index / drivers)


class HeartbeatDriver:
    """Closed-loop Heartbeat v4 load on one connection: keeps ``inflight`` requests
    outstanding, cycling through this connection's members' pre-encoded frames.

    Response (header v1): correlation id i32, tagged fields (1 byte, 0); body:
    throttle_time_ms i32, error_code i16, tagged fields. So the error code sits 9
    bytes after the correlation id.
    """

    def __init__(self, conn: Conn, templates: list[Template], inflight: int, stats: LoadStats):
        self.conn = conn
        self.templates = templates
        self.n = len(templates)
        self.i = 0
        self.inflight = inflight
        self.sent: dict[int, float] = {}
        self.stats = stats
        conn.on_raw = self.on_raw

    def start(self) -> None:
        self.send(self.inflight, time.perf_counter())

    def send(self, k: int, now: float) -> None:
        conn, tpls, n, sent = self.conn, self.templates, self.n, self.sent
        pack = _I32.pack
        cid, i = conn.cid, self.i
        parts = []
        for _ in range(k):
            cid = (cid + 1) & 0x7FFFFFFF
            t = tpls[i]
            i += 1
            if i == n:
                i = 0
            parts.append(t.head)
            parts.append(pack(cid))
            parts.append(t.tail)
            sent[cid] = now
        conn.cid, self.i = cid, i
        conn.transport.write(b"".join(parts))  # type: ignore[union-attr]

    def on_raw(self, buf: bytearray, got: list[tuple[int, int]]) -> None:
        now = time.perf_counter()
        st = self.stats
        sent = self.sent
        unpack16 = _I16.unpack_from
        lat = st.latencies
        measuring = st.t_start <= now < st.t_end
        ok = 0
        for cid, at in got:
            t = sent.pop(cid, None)
            if t is None:
                st.unmatched += 1
                continue
            err = unpack16(buf, at + 9)[0]
            if err:
                st.errors[err] = st.errors.get(err, 0) + 1
            if measuring and t >= st.t_start:
                lat.append(now - t)
                ok += 1
        st.done += ok
        if st.running:
            self.send(len(got), now)


class CommitDriver:
    """Closed-loop OffsetCommit v9 on one connection: ``slots`` keys (partitions of one
    group), one request in flight per key, so the last acknowledged offset of each
    key is unambiguous.

    Response: correlation id, tagged (1 byte); throttle i32; topics compact array
    (1 byte: 2); name compact string (1 byte len+1, then the name); partitions
    compact array (1 byte); partition_index i32; error_code i16.
    """

    def __init__(
        self,
        conn: Conn,
        group: str,
        topic: str,
        slots: int,
        stats: LoadStats,
        marker: int,
        partitions: int = 1,
    ):
        self.conn = conn
        self.group, self.topic = group, topic
        self.partitions = partitions  # per request: slot j commits j*n .. j*n + n - 1
        self.templates = [
            Template(
                OFFSET_COMMIT,
                9,
                commit_body(group, topic, j * partitions, marker, count=partitions),
                i64_marker=marker,
            )
            for j in range(slots)
        ]
        self.next_offset = [1] * slots
        self.acked = [-1] * slots
        self.sent: dict[int, tuple[int, int, float]] = {}  # cid -> slot, offset, time
        self.stats = stats
        self.err_at = 4 + 1 + 4 + 1 + 1 + len(topic.encode()) + 1 + 4
        self.cursor = 0  # the next key of an open-loop send
        conn.on_raw = self.on_raw

    def start(self) -> None:
        now = time.perf_counter()
        self.conn.transport.write(  # type: ignore[union-attr]
            b"".join(self._frame(j, now) for j in range(len(self.templates)))
        )

    def _frame(self, j: int, now: float) -> bytes:
        conn = self.conn
        cid = conn.next_cid()
        off = self.next_offset[j]
        self.next_offset[j] = off + 1
        self.sent[cid] = (j, off, now)
        return self.templates[j].frame(cid, off)

    def send(self, k: int, now: float) -> None:
        """Open loop: `k` more commits now, over the keys in turn (several may be in flight
        on one key: offsets only grow, and one connection is answered in order)."""
        slots = len(self.templates)
        first = self.cursor
        self.cursor = (first + k) % slots
        self.conn.transport.write(  # type: ignore[union-attr]
            b"".join(self._frame((first + i) % slots, now) for i in range(k))
        )

    def on_raw(self, buf: bytearray, got: list[tuple[int, int]]) -> None:
        now = time.perf_counter()
        st = self.stats
        measuring = st.t_start <= now < st.t_end
        unpack16 = _I16.unpack_from
        again = []
        for cid, at in got:
            entry = self.sent.pop(cid, None)
            if entry is None:
                st.unmatched += 1
                continue
            j, off, t = entry
            # Exactly one topic, with our partitions (each: index i32, error i16, tagged).
            if buf[at + 9] != 2 or buf[at + self.err_at - 5] != self.partitions + 1:
                st.errors[-1] = st.errors.get(-1, 0) + 1
            else:
                err = 0
                for k in range(self.partitions):
                    err = err or unpack16(buf, at + self.err_at + 7 * k)[0]
                if err:
                    st.errors[err] = st.errors.get(err, 0) + 1
                else:
                    self.acked[j] = max(self.acked[j], off)
            if measuring:
                st.answered += 1
                if t >= st.t_start:
                    st.latencies.append(now - t)
                    st.done += 1
            again.append(j)
        if st.running and again:
            self.conn.transport.write(b"".join(self._frame(j, now) for j in again))  # type: ignore[union-attr]

    @property
    def outstanding(self) -> int:
        return len(self.sent)


class LoadStats:
    def __init__(self) -> None:
        self.latencies = array("d")
        self.errors: dict[int, int] = {}
        self.unmatched = 0
        self.done = 0  # answers in the window to requests sent in it (latencies kept)
        self.answered = 0  # every answer in the window (an overloaded server's rate)
        self.running = True
        self.t_start = float("inf")
        self.t_end = float("inf")

"""One asyncio Protocol per client connection.

Theory of operation: frames are decoded as they arrive and each request is handed to its
handler at once (pipelining), with the connection's context (topics/context.py: the
server's services and this client; handlers never see the connection). A handler returns a
response, an awaitable of one, or NO_RESPONSE (Produce with acks=0); a shard's answer
comes as a Pending, whose completion flushes the connection at once. Responses are queued
in request order and written from the head of the queue as they complete, so a parked
request (a long-poll Fetch, a Produce awaiting fsync, later a JoinGroup) holds back only
the responses behind it on the same connection. Reading pauses while too many requests are
in flight or too many response bytes wait in the transport, which is the per-connection
back-pressure; frames already read beyond the in-flight limit wait in the decoder until
answers make room (one read can hold thousands of small pipelined requests, and handling
them all at once would hold the event loop for seconds: nothing else, fsync completions
included, would run meanwhile). For the same reason the connections together handle at
most frames_per_loop_iteration_max frames per loop iteration (frame_budget.py); the
responses that became ready in an iteration are written by one callback for every
connection (OutgoingWrites).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from groupcoord.protocol.api import (
    ApiKey,
    Request,
    RequestError,
    UnknownApi,
    UnsupportedVersion,
    decode_request,
    encode_response,
    error_response,
)
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.framing import FrameDecoder, FrameTooLarge
from groupcoord.protocol.header import RequestHeader

from ..config import Config
from ..observability.logging import get_logger
from ..observability.metrics import ServerMetrics
from ..runtime.pending import Pending
from ..topics.context import NO_RESPONSE
from .cluster import api_versions_response
from .context import GroupContext
from .fast_paths import FAST_PATHS
from .frame_budget import FrameBudget

log = get_logger("groupcoord.connection")
_KEY_VERSION = struct.Struct(">hh")

Handler = Callable[[GroupContext, Request], Any]


class Host(Protocol):
    """What a connection uses of its server (app.Server)."""

    config: Config
    metrics: ServerMetrics
    context: GroupContext
    handlers: dict[int, Handler]
    supported_versions: dict[int, tuple[int, int]]
    frame_budget: FrameBudget
    outgoing: OutgoingWrites

    def register(self, connection: Connection) -> bool: ...

    def unregister(self, connection: Connection) -> None: ...


class _Slot:
    __slots__ = ("header", "started", "future", "pending", "response")

    def __init__(self, header: RequestHeader, started: float) -> None:
        self.header = header
        self.started = started
        self.future: asyncio.Future[Any] | None = None
        self.pending: Pending | None = None
        self.response: Any = None


class OutgoingWrites:
    """The connections with encoded responses waiting for this loop iteration's write: one
    callback per iteration writes them all (a syscall per connection), rather than a
    callback scheduled per connection (a commit load's round answers ~100 connections at
    once; scheduling each write was ~5% of the loop's time)."""

    __slots__ = ("_connections",)

    def __init__(self) -> None:
        self._connections: list[Connection] = []

    def add(self, connection: Connection) -> None:
        if not self._connections:
            asyncio.get_running_loop().call_soon(self._write_all)
        self._connections.append(connection)

    def _write_all(self) -> None:
        connections, self._connections = self._connections, []
        for connection in connections:
            connection._write_out()


class Connection(asyncio.Protocol):
    def __init__(self, server: Host) -> None:
        self.server = server
        config = server.config
        self.decoder = FrameDecoder(config.frame_bytes_max)
        self.inflight_max = config.connection_inflight_max
        self.transport: asyncio.Transport | None = None
        self.pending: deque[_Slot] = deque()
        self.peer = "?"
        # What the handlers get: the server's services and this client's address (as Kafka
        # prints an InetAddress: "/127.0.0.1"), read time and whether it is gone.
        self.context = server.context.for_client("/?")
        self.closed = False
        self._reading_paused = False
        self._writing_paused = False
        # Complete frames wait in the decoder (the in-flight limit was reached), and
        # whether handling them is already scheduled.
        self._frames_waiting = False
        self._frames_scheduled = False
        self.idle = asyncio.Event()
        # Encoded responses waiting for this loop iteration's single write (one syscall for
        # every response that became ready in the iteration, instead of one each; see
        # OutgoingWrites).
        self._out: list[bytes] = []
        self._out_bytes = 0
        self.idle.set()

    # asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}"
            self.context.client_host = f"/{peer[0]}"
        transport.set_write_buffer_limits(high=self.server.config.connection_write_buffer_bytes_max)
        if not self.server.register(self):
            log.warning("connection refused", peer=self.peer, reason="connections_max reached")
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.context.closed = True
        self.server.unregister(self)
        for slot in self.pending:
            if slot.future is not None:
                slot.future.cancel()
        self.pending.clear()
        self.idle.set()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        # When the read arrived: the frames it brought, handled now or held in the decoder,
        # arrived then (the shards' queue-time metric).
        self.context.read_at = time.perf_counter()
        self.server.metrics.bytes_in.inc(len(data))
        self.decoder.feed(data)
        self._handle_frames()

    def _handle_frames(self) -> None:
        """Handle the decoder's complete frames while fewer than inflight_max requests are
        in flight; the others wait there (and reading stays paused) until answers make room
        (_update_reading schedules this again). Past this loop iteration's frame budget
        (frame_budget.py) they wait for the next iteration."""
        self._frames_scheduled = False
        self._frames_waiting = False
        pending = self.pending
        limit = self.inflight_max
        budget = self.server.frame_budget
        while not self.closed:
            if len(pending) >= limit:
                self._frames_waiting = True
                break
            if not self.decoder.buffered_bytes:
                break
            if not budget.take():
                self._frames_waiting = True
                self._frames_scheduled = True
                budget.wait(self._handle_frames)
                break
            try:
                frame = self.decoder.next_frame()
            except FrameTooLarge as e:
                self._fail("frame_too_large", str(e))
                return
            if frame is None:
                break
            self._handle_frame(frame)
        self._update_reading()

    # requests ----------------------------------------------------------------------------

    def _handle_frame(self, frame: bytes) -> None:
        started = time.perf_counter()
        if len(frame) >= 4:
            fast = FAST_PATHS.get(_KEY_VERSION.unpack_from(frame, 0))
            if fast is not None:
                answered = fast(self.context, frame)
                if answered is not None:
                    self._queue(answered[0], started, answered[1])
                    return
        try:
            request = decode_request(frame, self.server.supported_versions)
        except UnsupportedVersion as e:
            self._answer_unsupported(e, started)
            return
        except UnknownApi as e:
            self._fail("unknown_api", str(e))
            return
        except RequestError as e:
            self._fail("malformed_request", str(e))
            return
        handler = self.server.handlers[request.api_key]
        try:
            result = handler(self.context, request)
        except Exception:
            log.exception("handler failed", api=request.api_key, version=request.api_version)
            result = error_response(
                request.api_key, request.api_version, ErrorCode.UNKNOWN_SERVER_ERROR
            )
        if result is NO_RESPONSE:
            self._observe(request.header, started, None)
            return
        self._queue(request.header, started, result)

    def _queue(self, header: RequestHeader, started: float, result: Any) -> None:
        """Queue a request's response (or a future of it) behind the earlier ones."""
        slot = _Slot(header, started)
        self.pending.append(slot)
        self.idle.clear()
        if isinstance(result, Pending):
            if not result.done:
                slot.pending = result
                # Nothing to flush until it is set; _handle_frames updates reading after
                # the frames of this read.
                result.listener = self._flush_ready
                return
            slot.response = result.value
        elif isinstance(result, Awaitable):
            slot.future = asyncio.ensure_future(result)
            slot.future.add_done_callback(self._on_done)
        else:
            slot.response = result
        self._flush_ready()

    def _answer_unsupported(self, e: UnsupportedVersion, started: float) -> None:
        header = e.header
        if header.api_key == ApiKey.API_VERSIONS:
            # KIP-511: answer at v0 with our ranges so the client can pick a version it shares.
            response = api_versions_response(
                self.server.supported_versions, 0, ErrorCode.UNSUPPORTED_VERSION
            )
            version = 0
        else:
            response = error_response(
                header.api_key, header.api_version, ErrorCode.UNSUPPORTED_VERSION
            )
            version = header.api_version
        slot = _Slot(
            header.__class__(header.api_key, version, header.correlation_id, header.client_id),
            started,
        )
        slot.response = response
        self.pending.append(slot)
        self.idle.clear()
        self._flush_ready()

    def _on_done(self, _future: asyncio.Future[Any]) -> None:
        self._flush_ready()

    def _flush_ready(self) -> None:
        pending = self.pending
        transport = self.transport
        while pending:
            slot = pending[0]
            future = slot.future
            if slot.pending is not None:
                if not slot.pending.done:
                    break
                response = slot.pending.value
            elif future is not None:
                if not future.done():
                    break
                if future.cancelled():
                    pending.popleft()
                    continue
                exc = future.exception()
                if exc is not None:
                    if not isinstance(exc, ConnectionError):
                        log.error(
                            "handler failed",
                            api=slot.header.api_key,
                            version=slot.header.api_version,
                            error=repr(exc),
                        )
                    response = error_response(
                        slot.header.api_key,
                        slot.header.api_version,
                        ErrorCode.UNKNOWN_SERVER_ERROR,
                    )
                else:
                    response = future.result()
            else:
                response = slot.response
            pending.popleft()
            header = slot.header
            if self.closed or transport is None:
                continue
            data = encode_response(
                header.api_key, header.api_version, header.correlation_id, response
            )
            if not self._out:
                self.server.outgoing.add(self)
            self._out.append(data)
            self._out_bytes += len(data)
            self._observe(header, slot.started, response)
        if not pending:
            self.idle.set()
        self._update_reading()

    def _write_out(self) -> None:
        out = self._out
        if not out:
            return
        if self.transport is not None and not self.closed:
            if len(out) == 1:
                self.transport.write(out[0])
            else:
                self.transport.writelines(out)
        self.server.metrics.bytes_out.inc(self._out_bytes)
        self._out = []
        self._out_bytes = 0

    def _observe(self, header: RequestHeader, started: float, response: Any) -> None:
        error = int(getattr(response, "error_code", 0)) if response is not None else 0
        counter, latency = self.server.metrics.request_children(
            header.api_key, header.api_version, error
        )
        counter.inc()
        latency.observe(time.perf_counter() - started)

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self.closed:
            return
        room = len(self.pending) < self.inflight_max
        if room and self._frames_waiting and not self._frames_scheduled:
            self._frames_scheduled = True
            asyncio.get_running_loop().call_soon(self._handle_frames)
        should_pause = self._writing_paused or not room or self._frames_waiting
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    def _fail(self, reason: str, detail: str) -> None:
        """Bad input: one log line, one metric, and only this connection is closed."""
        log.warning("closing connection", peer=self.peer, reason=reason, detail=detail[:200])
        self.server.metrics.connection_errors.labels(reason).inc()
        self.close()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._write_out()  # answers already encoded still go out before the close
            self.closed = True
            self.context.closed = True
            self.transport.close()

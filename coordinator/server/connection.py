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

Limits that outlive a request (frame_budget.py, connection_limits.py): a frame left partly
received by a read claims its announced size from the server's byte budget, and reading
waits when that is refused; unsent response bytes are counted there too. The connection
keeps when its partial frame began and its last read, which the periodic sweep of
connection_limits.py reads to close idle connections and slow senders: no timer per
connection or per request. Whatever fails while handling a read or encoding a response is
one log line and closes only this connection.
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
from groupcoord.protocol.buffered_framing import BufferedFrameDecoder
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.framing import FrameDecoder, FrameTooLarge
from groupcoord.protocol.header import RequestHeader

from ..config import Config
from ..observability.logging import get_logger
from ..observability.metrics import ServerMetrics
from ..runtime.pending import Pending
from ..security.tls import certificate_principal
from ..topics.context import NO_RESPONSE
from .cluster import api_versions_response
from .context import GroupContext
from .endpoints import ServedListener
from .fast_paths import fast_paths_for
from .frame_budget import FrameBudget
from .sasl_auth import SaslAuthenticator

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


class Connection(asyncio.BaseProtocol):
    """A streaming protocol (data_received, eof_received) without asyncio.Protocol as its
    base, so that TlsConnection (tls_connection.py) can be a buffered one: uvloop takes a
    protocol with get_buffer as buffered only when it is no asyncio.Protocol."""

    def __init__(
        self,
        server: Host,
        admitted_host: str | None = None,
        listener: ServedListener | None = None,
    ) -> None:
        """`admitted_host`: the client's address, when the listener admitted the
        connection already (Server.protocol_for); otherwise connection_made asks.
        `listener`: the listener it came in on (None: the server's first)."""
        self.server = server
        self.listener = listener
        config = server.config
        # The frames of a streaming connection's reads (data_received); a TLS connection
        # reads through get_buffer and replaces the decoder (tls_connection.py).
        self._stream_frames = FrameDecoder(config.frame_bytes_max)
        self.decoder: FrameDecoder | BufferedFrameDecoder = self._stream_frames
        self.inflight_max = config.connection_inflight_max
        self.transport: asyncio.Transport | None = None
        self.pending: deque[_Slot] = deque()
        self.peer = "?"
        # The client's address, for the per-address connection limit, and whether this
        # connection holds one of its admissions (released once, when it is lost).
        self.host = admitted_host or "?"
        self.admitted = admitted_host is not None
        # What the handlers get: the server's services and this client's address (as Kafka
        # prints an InetAddress: "/127.0.0.1"), read time and whether it is gone.
        self.context = (server.context if listener is None else listener.context).for_client("/?")
        # The requests read from the raw frame (with an authorizer: their checked forms).
        self._fast_paths = fast_paths_for(self.context)
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
        # The byte budget (frame_budget.py): what the decoder's frames were granted, the
        # unsent response bytes counted, and whether reading waits for bytes to be freed.
        self._held_in = 0
        self._held_out = 0
        self._bytes_wait = False
        # time.perf_counter() of the read that began the frame still incomplete (0: none),
        # for the frame read deadline.
        self._frame_started = 0.0

    # asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}"
            self.host = str(peer[0])
            self.context.set_client_address(str(peer[0]))
        # The listener admitted it already; register refuses only when stopping (or, for
        # a connection made otherwise, when the limits do: counted and logged there).
        if not self.server.register(self):
            self.closed = True
            transport.abort()
            return
        self.context.read_at = time.perf_counter()  # idle since it connected
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=self.server.config.connection_write_buffer_bytes_max)
        listener = self.listener
        if listener is not None and listener.spec.protocol != "PLAINTEXT":
            self._start_security(listener)

    def _start_security(self, listener: ServedListener) -> None:
        """SSL: the principal from the client's certificate (User:ANONYMOUS without one).
        SASL: the authenticator takes the frames until the exchange completes."""
        spec = listener.spec
        if spec.protocol == "SSL" and self.transport is not None:
            self.context.principal = certificate_principal(
                self.transport.get_extra_info("peercert")
            )
            log.debug("tls client", peer=self.peer, principal=self.context.principal)
        elif spec.uses_sasl:
            SaslAuthenticator(self, self.context.security, spec.name)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.context.closed = True
        if self.context.sasl is not None:
            self.context.sasl.connection_lost()
        self.server.unregister(self)
        held = self._held_in + self._held_out
        if held:
            self._held_in = self._held_out = 0
            self.server.frame_budget.adjust(-held)
        self._bytes_wait = False
        for slot in self.pending:
            if slot.future is not None:
                slot.future.cancel()
        self.pending.clear()
        self.idle.set()

    def eof_received(self) -> bool | None:
        return None  # the transport closes (asyncio.Protocol's answer)

    def pause_writing(self) -> None:
        # Unsent responses are counted in the byte budget once the transport holds more
        # than its high-water mark, and re-measured on resume and by each sweep (not per
        # write: the request path pays nothing for it).
        self._writing_paused = True
        if self.transport is not None:
            self._count_unsent(self.transport.get_write_buffer_size())
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self.transport is not None:
            self._count_unsent(self.transport.get_write_buffer_size())
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        self._stream_frames.feed(data)
        self._received(len(data))

    def _received(self, nbytes: int) -> None:
        """The decoder got a read of nbytes: handle the frames it completed."""
        # When the read arrived: the frames it brought, handled now or held in the decoder,
        # arrived then (the shards' queue-time metric, and the idle deadline).
        self.context.read_at = time.perf_counter()
        self.server.metrics.bytes_in.inc(nbytes)
        try:  # free unless something raises
            self._handle_frames()
        except Exception:
            # A bug, not the client's input (that is _fail): one log line with the
            # traceback, instead of the event loop's multi-line "Fatal error on transport".
            log.exception("handling a read failed", peer=self.peer)
            self.server.metrics.connection_errors.labels("internal_error").inc()
            self.close()

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
        decoder = self.decoder
        took = partial = False
        while not self.closed:
            if len(pending) >= limit:
                self._frames_waiting = True
                break
            if not decoder.buffered_bytes:
                break
            if not budget.take():
                self._frames_waiting = True
                self._frames_scheduled = True
                budget.wait(self._handle_frames)
                break
            try:
                frame = decoder.next_frame()
            except FrameTooLarge as e:
                self._fail("frame_too_large", str(e))
                return
            if frame is None:
                partial = True
                break
            self._handle_frame(frame)
            took = True
        if self.closed:
            return
        # Requests that arrive whole leave nothing held (the loop ended on an empty
        # decoder): the common path skips the accounting.
        if partial or self._frames_waiting or self._held_in or self._frame_started:
            self._account_input(decoder.claimed_bytes, partial, took)
        self._update_reading()

    def _account_input(self, claimed: int, partial: bool, took: bool) -> None:
        """After a read was handled: note when a partial frame began (a new one when a frame
        was taken since), and claim from the server's byte budget what the decoder's frames
        will take; when that is refused, reading waits (_update_reading) until bytes are
        freed (_retry_claim)."""
        if partial:
            if took or not self._frame_started:
                self._frame_started = self.context.read_at
        elif self._frame_started:
            self._frame_started = 0.0
        held = self._held_in
        if claimed <= held:
            self._bytes_wait = False
            if claimed < held:
                self._held_in = claimed
                self.server.frame_budget.adjust(claimed - held)
            return
        if self.server.frame_budget.claim(held, claimed):
            self._held_in = claimed
            self._bytes_wait = False
        elif not self._bytes_wait:
            self._bytes_wait = True
            self.server.frame_budget.wait_for_bytes(self._retry_claim)

    def _retry_claim(self) -> None:
        """Bytes were freed: claim again, and read again if granted (else wait again)."""
        if self.closed or not self._bytes_wait:
            return
        budget = self.server.frame_budget
        claimed = self.decoder.claimed_bytes
        if claimed > self._held_in:
            if not budget.claim(self._held_in, claimed):
                budget.wait_for_bytes(self._retry_claim)
                return
            self._held_in = claimed
        self._bytes_wait = False
        if self._frame_started:  # the wait was the server's: the frame's deadline restarts
            self._frame_started = time.perf_counter()
        self._update_reading()

    def _count_unsent(self, unsent: int) -> None:
        """Count the transport's unsent response bytes (as measured now) in the budget."""
        delta = unsent - self._held_out
        if delta:
            self._held_out = unsent
            self.server.frame_budget.adjust(delta)

    def sweep(self, now: float, idle_s: float, frame_read_s: float) -> str | None:
        """connection_limits.py's periodic visit: measure unsent responses, and close the
        connection when a deadline passed: its partial frame began more than frame_read_s
        ago (not counting a wait for the byte budget), or nothing is in flight and nothing
        was received for idle_s (connections.max.idle.ms). Returns the reason it closed."""
        if self.closed or self.transport is None:
            return None
        self._count_unsent(self.transport.get_write_buffer_size())
        started = self._frame_started
        if started:
            if self._bytes_wait or now - started <= frame_read_s:
                return None
            reason = "frame_read_timeout"
        elif self.pending or self._frames_waiting or now - self.context.read_at <= idle_s:
            return None
        else:
            reason = "idle_timeout"
        self.server.metrics.connection_errors.labels(reason).inc()
        self.abort()
        return reason

    # requests ----------------------------------------------------------------------------

    def _handle_frame(self, frame: bytes) -> None:
        started = time.perf_counter()
        if len(frame) >= 4:
            fast = self._fast_paths.get(_KEY_VERSION.unpack_from(frame, 0))
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
            try:  # free unless something raises
                data = encode_response(
                    header.api_key, header.api_version, header.correlation_id, response
                )
            except Exception:
                # A response the codec cannot write (a handler's bug): the client would wait
                # for it forever, so this connection closes, with one log line.
                log.exception(
                    "encoding a response failed",
                    peer=self.peer,
                    api=header.api_key,
                    version=header.api_version,
                )
                self.server.metrics.connection_errors.labels("response_encoding_failed").inc()
                self.close()
                return
            if not self._out:
                self.server.outgoing.add(self)
            self._out.append(data)
            self._out_bytes += len(data)
            self._observe(header, slot.started, response)
        if not pending:
            self.idle.set()
        self._update_reading()

    def _send_raw(self, data: bytes) -> None:
        """Send bytes that are no Kafka response (a SASL v0 handshake's raw token), in
        order with the responses queued before them."""
        if self.closed or self.transport is None:
            return
        if not self._out:
            self.server.outgoing.add(self)
        self._out.append(data)
        self._out_bytes += len(data)

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
        should_pause = self._writing_paused or not room or self._frames_waiting or self._bytes_wait
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

    def abort(self) -> None:
        """Close at once, dropping unsent bytes (a deadline passed: the client may not be
        reading at all, and a graceful close would wait for it)."""
        if self.transport is not None and not self.closed:
            self.closed = True
            self.context.closed = True
            self.transport.abort()

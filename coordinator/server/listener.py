"""The Kafka listener: accepts connections itself, so that running out of descriptors is
seen, logged once and waited out, instead of failing silently.

Why not loop.create_server: under uvloop (the server's loop) an EMFILE on accept is
handled inside libuv, which accepts the pending connections and closes them at once with
nothing logged (or, without its spare descriptor, closes the listening socket for good);
asyncio's own loop logs a multi-line traceback per failed accept. Here an accept that
fails for want of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM) pauses accepting for
`retry_delay_s` and leaves the connections waiting in the kernel's backlog, to be served
once descriptors are free; the first failure of an episode logs one error naming the
limit, the end of the episode one line saying how long it lasted and how many retries
failed. Accepted sockets are handed to the loop with connect_accepted_socket.

Admission happens here, right after accept() (which gives the peer's address), so that a
flood of connections from one address costs as little as it can: `protocol_for(host)`
answers the protocol of an admitted connection, or None, and a refused connection is
closed at once with a reset (SO_LINGER 0: no FIN handshake, no TIME_WAIT), before any
transport or protocol exists for it. Accepting drains the kernel's queue in batches of up
to _ACCEPTS_PER_CALLBACK per readiness callback, so a flood waiting there is worked off in
few loop iterations while the loop still runs other callbacks between batches.
"""

from __future__ import annotations

import asyncio
import errno
import resource
import socket
import ssl
import struct
import time
from collections.abc import Callable

from ..observability.logging import get_logger
from .accept_queues import listen_sockets

log = get_logger("groupcoord.listener")

_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
# Accepts per readiness callback; the rest of the kernel's queue waits for the next loop
# iteration, which comes at once if nothing else is ready. An accept costs 30-45 us even
# when refused (mostly the kernel's: the accept, the reset; an admitted connection's
# transport is set up in a task after): a batch holds the loop under 1 ms, so requests on
# open connections are served between batches during a flood (batches of 100 held it
# 3-10 ms on a loaded 2-core machine).
_ACCEPTS_PER_CALLBACK = 16
# SO_LINGER on, 0 s: close() resets the connection at once.
_LINGER_RESET = struct.pack("ii", 1, 0)


class Listener:
    """Listening sockets with an accept loop of our own; see the module docstring."""

    def __init__(
        self,
        sockets: list[socket.socket],
        protocol_for: Callable[[str], asyncio.BaseProtocol | None],
        *,
        name: str = "kafka",
        retry_delay_s: float = 1.0,
        on_accept_failure: Callable[[str], None] | None = None,
        tls_context: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        """`protocol_for(peer host)`: the protocol of a connection just accepted from that
        address, or None to refuse it (reset at once). `name` goes into the log lines;
        `on_accept_failure(errno name)` counts failed accepts (a metric); `tls_context()`:
        the TLS context of each new connection (asked per connection, so that a reloaded
        certificate serves the next handshake), None for plain TCP."""
        self.sockets = sockets
        self._tls_context = tls_context
        self.name = name
        self._protocol_for = protocol_for
        self._retry_delay_s = retry_delay_s
        self._on_accept_failure = on_accept_failure
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        # The current out-of-descriptors episode: when it began, and retries that failed.
        self._starved_since: float | None = None
        self._failed_retries = 0
        self._tasks: set[asyncio.Task[object]] = set()
        self._resume()

    @classmethod
    async def start(
        cls,
        host: str,
        port: int,
        protocol_for: Callable[[str], asyncio.BaseProtocol | None],
        *,
        backlog: int = 1024,
        queues: int = 1,
        **kwargs: object,
    ) -> Listener:
        """Bind every address `host` resolves to (as loop.create_server does) and listen,
        with `queues` accept queues per address (accept_queues.py), each `backlog` deep."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        sockets: list[socket.socket] = []
        seen = set()
        try:
            for family, kind, proto, _, address in infos:
                if (family, address) in seen:
                    continue
                seen.add((family, address))
                sockets.extend(listen_sockets(family, kind, proto, address, backlog, queues))
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        return cls(sockets, protocol_for, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop accepting and close the listening sockets (connections stay open)."""
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        self._pause()
        for sock in self.sockets:
            sock.close()

    def _pause(self) -> None:
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())

    def _resume(self) -> None:
        self._retry = None
        if self._closed:
            return
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)
        if self._starved_since is not None:
            # Try at once: a connection may be waiting in the backlog with no readiness
            # event left to report it.
            for sock in self.sockets:
                self._accept(sock)
                if self._retry is not None:
                    break

    def _accept(self, sock: socket.socket) -> None:
        protocol_for = self._protocol_for
        for _ in range(_ACCEPTS_PER_CALLBACK):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:
                self._accept_failed(e)
                return
            if self._starved_since is not None:
                self._end_starvation()
            protocol = protocol_for(address[0])
            if protocol is None:
                _reset(conn)
                continue
            conn.setblocking(False)
            task = self._loop.create_task(self._connect(conn, protocol))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _accept_failed(self, e: OSError) -> None:
        """Pause accepting for a while; log the first failure of an episode."""
        code = errno.errorcode.get(e.errno or 0, str(e.errno))
        if self._on_accept_failure is not None:
            self._on_accept_failure(code)
        if self._starved_since is None:
            self._starved_since = time.monotonic()
            self._failed_retries = 0
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            out_of_descriptors = e.errno in _OUT_OF_RESOURCES
            log.error(
                "cannot accept connections: out of file descriptors"
                if out_of_descriptors
                else "cannot accept connections",
                listener=self.name,
                error=f"{code}: {e.strerror}",
                fd_limit_soft=soft,
                fd_limit_hard=hard,
                retry_delay_ms=int(self._retry_delay_s * 1000),
                hint="raise the file-descriptor limit (ulimit -n), lower connections_max or "
                "segment_files_open_max"
                if out_of_descriptors
                else None,
            )
        else:
            self._failed_retries += 1
        self._pause()
        self._retry = self._loop.call_later(self._retry_delay_s, self._resume)

    def _end_starvation(self) -> None:
        assert self._starved_since is not None
        log.warning(
            "accepting connections again",
            listener=self.name,
            starved_ms=int((time.monotonic() - self._starved_since) * 1000),
            failed_retries=self._failed_retries,
        )
        self._starved_since = None

    async def _connect(self, conn: socket.socket, protocol: asyncio.BaseProtocol) -> None:
        tls = self._tls_context() if self._tls_context is not None else None
        try:
            await self._loop.connect_accepted_socket(lambda: protocol, conn, ssl=tls)
        except OSError as e:  # the client went away (or failed the TLS handshake) first
            conn.close()
            # The loop calls connection_lost only after connection_made, which a failed
            # set-up never reached: tell the protocol here (it may hold an admission).
            protocol.connection_lost(e)
            log.debug("accepted connection lost", error=str(e))


def _reset(conn: socket.socket) -> None:
    """Close a refused connection with a reset: nothing is sent but the RST, and no
    TIME_WAIT is left behind."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    except OSError:
        pass  # already reset by the peer: close() is all there is to do
    conn.close()

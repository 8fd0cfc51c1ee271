"""Listening sockets that keep a connection flood from one client address out of everyone
else's way: several accept queues on one port, chosen by the client's address.

Why: the kernel's accept queue is FIFO. A flood of 12,000 connection attempts from one
address (tests/bench/bench_connection_flood.py) queued up to a few thousand connections
ahead of a new client from another address, and the listener, at ~40 us per accepted and
refused connection, took 30-160 ms to reach it, however cheap the refusal was made.

How: `queues` sockets bound to the same address with SO_REUSEPORT form one group, and a
classic BPF program attached to the group (SO_ATTACH_REUSEPORT_CBPF, no privilege needed)
picks the socket of each new connection from a hash of its source address alone (the
kernel's own choice hashes the source port too, which would spread a flood over every
queue). A flooding address then fills only its own queue; the listener drains every ready
queue a batch at a time in each loop turn (listener.py), so a connection from an address
in another queue waits one turn, not for the flood. An address that shares the flood's
queue (1 in `queues`) waits as before.

SO_REUSEPORT would also let a second process of the same user bind the port and take a
share of the connections silently (a second server started by mistake): the port is
first bound alone, without it, which fails as usual when anything holds the port. Where
SO_REUSEPORT or the BPF program is not available (not Linux), one socket is used.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import struct

from ..observability.logging import get_logger

log = get_logger("groupcoord.listener")

# linux/asm-generic/socket.h; classic BPF opcodes and the "network header" base of loads.
_SO_ATTACH_REUSEPORT_CBPF = 51
_SKF_NET_OFF = -0x100000
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = 32-bit word at k (network byte order)
_MUL_K, _RSH_K, _MOD_K = 0x24, 0x74, 0x94  # BPF_ALU | op | BPF_K
_RET_A = 0x16  # BPF_RET | BPF_A
# Offset of the source address's last 32 bits in the IP header: the whole IPv4 address,
# or the interface-identifier half's low word of an IPv6 one.
_SOURCE_WORD_OFFSET = {socket.AF_INET: 12, socket.AF_INET6: 8 + 12}
# Fibonacci hashing: multiply by 2^32 / phi and keep the top 8 bits, which every bit of
# the address moves (neighbouring addresses land in different queues).
_GOLDEN = 0x9E3779B1
ACCEPT_QUEUES_MAX = 64


def _instruction(code: int, k: int) -> bytes:
    return struct.pack("HBBI", code, 0, 0, k & 0xFFFFFFFF)


def source_hash_program(family: int, queues: int) -> bytes:
    """The classic BPF program: socket index = hash(source address) % queues."""
    return b"".join(
        [
            _instruction(_LD_W_ABS, _SKF_NET_OFF + _SOURCE_WORD_OFFSET[family]),
            _instruction(_MUL_K, _GOLDEN),
            _instruction(_RSH_K, 24),
            _instruction(_MOD_K, queues),
            _instruction(_RET_A, 0),
        ]
    )


def queue_of(address: str, queues: int) -> int:
    """The queue the program picks for a client address (what tests and logs use)."""
    packed = socket.inet_pton(socket.AF_INET6 if ":" in address else socket.AF_INET, address)
    word = int.from_bytes(packed[-4:], "big")
    return (((word * _GOLDEN) & 0xFFFFFFFF) >> 24) % queues


def _attach(sock: socket.socket, program: bytes) -> None:
    code = ctypes.create_string_buffer(program, len(program))
    # struct sock_fprog {unsigned short len; struct sock_filter *filter;}: the kernel
    # copies the program during the call, so `code` need not outlive it.
    fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(code))
    sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_REUSEPORT_CBPF, fprog)


def _socket(family: int, kind: int, proto: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


def listen_sockets(
    family: int, kind: int, proto: int, address: tuple, backlog: int, queues: int
) -> list[socket.socket]:  # type: ignore[type-arg]
    """Bind and listen on `address`: `queues` sockets in a source-hashed SO_REUSEPORT
    group, or one socket when `queues` is 1 or the platform cannot (logged once).
    Non-blocking. Raises OSError as bind() does (EADDRINUSE when the port is held)."""
    sharded = queues > 1 and family in _SOURCE_WORD_OFFSET
    # The port alone first: fails when anything holds it (and learns an ephemeral port).
    first = _socket(family, kind, proto, reuse_port=False)
    try:
        first.bind(address)
    except BaseException:
        first.close()
        raise
    if not sharded:
        return _listening([first], backlog)
    address = (address[0], first.getsockname()[1], *address[2:])
    first.close()
    sockets: list[socket.socket] = []
    try:
        for _ in range(queues):
            sockets.append(_socket(family, kind, proto, reuse_port=True))
            sockets[-1].bind(address)
        _listening(sockets, backlog)
        _attach(sockets[0], source_hash_program(family, queues))
        return sockets
    except (OSError, AttributeError) as e:
        for sock in sockets:
            sock.close()
        if isinstance(e, OSError) and e.errno == errno.EADDRINUSE:  # EADDRINUSE: taken meanwhile
            raise
        log.warning(
            "one accept queue: per-address accept queues are not available here",
            error=str(e),
        )
        single = _socket(family, kind, proto, reuse_port=False)
        try:
            single.bind(address)
        except BaseException:
            single.close()
            raise
        return _listening([single], backlog)


def _listening(sockets: list[socket.socket], backlog: int) -> list[socket.socket]:
    for sock in sockets:
        sock.listen(backlog)
        sock.setblocking(False)
    return sockets

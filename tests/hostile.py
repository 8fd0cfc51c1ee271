"""Hostile client loads shared by the integration tests and tests/bench: connections from
chosen loopback addresses, partial large frames, and the server's resident memory."""

from __future__ import annotations

import socket
import struct
import threading
import time

from tests.support import ServerProcess


def connect(
    server: ServerProcess, source: str = "127.0.0.1", timeout_s: float = 30
) -> socket.socket:
    """A connection to the server from `source` (any 127.0.0.x: all of 127/8 is loopback on
    Linux, so tests have as many client addresses as they need)."""
    return socket.create_connection(
        ("127.0.0.1", server.port), timeout=timeout_s, source_address=(source, 0)
    )


def rss_bytes(pid: int) -> int:
    """The process's resident memory (VmRSS)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def send_partial_frames(
    server: ServerProcess, count: int, frame_bytes: int, sent_bytes: int
) -> tuple[list[socket.socket], int]:
    """`count` connections each announcing a frame of `frame_bytes` and sending up to
    `sent_bytes` of it (less when the server stops reading: a send stuck for 3 s ends);
    returns the connections (left open) and the server's largest RSS seen meanwhile."""
    assert server.proc is not None
    socks = [connect(server) for _ in range(count)]
    chunk = b"\x00" * (1 << 20)

    def send(sock: socket.socket) -> None:
        sock.settimeout(3)
        try:
            sock.sendall(struct.pack(">i", frame_bytes))
            left = sent_bytes
            while left > 0:
                sock.sendall(chunk[: min(left, len(chunk))])
                left -= len(chunk)
        except OSError:
            pass

    threads = [threading.Thread(target=send, args=(s,), daemon=True) for s in socks]
    for t in threads:
        t.start()
    peak = 0
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_bytes(server.proc.pid))
        time.sleep(0.05)
    for _ in range(20):  # and a second more, once every sender is done or stuck
        peak = max(peak, rss_bytes(server.proc.pid))
        time.sleep(0.05)
    return socks, peak

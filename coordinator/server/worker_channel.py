"""serve --workers: the channel the workers' requests to each other go by, and the
principal those requests carry.

Theory of operation. Each worker also listens on a Unix socket of Linux's abstract
namespace named by the cluster id and its index (`channel_address`), and sends its
requests to a peer (topic_sync.py, worker_txns.py, peer_ends.py) there, never on the
client listeners. A connection on it is accepted only from a process of the server's own
OS user (SO_PEERCRED), and every request on it carries WORKER_PRINCIPAL, a principal type
("Worker") that no client listener's authentication gives (SASL, TLS and OAUTHBEARER
give "User:" principals), so a client cannot pass for a worker. With an authorizer the
workers' principal is a super user, as Kafka's brokers' principal usually is in
super.users: it has CLUSTER_ACTION on the cluster, which WriteTxnMarkers and
AddPartitionsToTxn v4+ need from anyone else (as in Kafka), and the topic changes a
worker repeats pass as on Kafka's controller, which takes forwarded changes only from a
broker with CLUSTER_ACTION. What marks a request as a peer's (not to be repeated
further) is the principal, not the client id a client may pick.

Why a Unix socket and the OS user rather than SASL with a secret the parent hands its
workers: the workers are on one machine; a secret would need a SASL listener the client
listeners may not have (PLAINTEXT or SSL only), and anyone able to read the secret (the
server's own OS user, through /proc or the data directory) can connect as that user
anyway. The abstract namespace leaves no socket file behind and has no path length limit
from the data directory.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from typing import Any

from ..observability.logging import get_logger
from .connection import Connection
from .peer_sasl import open_peer
from .worker_layout import WORKER_PRINCIPAL

log = get_logger("groupcoord.worker_channel")

CHANNEL_HOST = "worker-channel"  # what the connection limits count its connections as
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


def channel_address(cluster_id: str, index: int) -> str:
    """Worker `index`'s Unix socket in the abstract namespace (leading NUL)."""
    return f"\0groupcoord-{cluster_id}-worker-{index}"


def peer_uid(sock: socket.socket) -> int | None:
    try:
        _pid, uid, _gid = _PEERCRED.unpack(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        )
    except OSError:
        return None
    return int(uid)


class WorkerChannelConnection(Connection):
    """A peer worker's connection: refused unless the peer runs as this server's OS user;
    its requests carry WORKER_PRINCIPAL."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        uid = peer_uid(sock) if sock is not None else None
        if uid != os.getuid():
            log.warning("worker channel: connection of another OS user refused", uid=uid)
            self.closed = True
            transport.abort()
            return
        self.context.principal = WORKER_PRINCIPAL
        self.context.client_host = "/" + CHANNEL_HOST
        super().connection_made(transport)


def listening_socket(address: str, backlog: int) -> socket.socket:
    """The channel's listening socket (uvloop takes abstract addresses only as sockets)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def open_channel(address: str, timeout_s: float) -> tuple[Any, Any]:
    """A connection to a peer's channel (reader, writer); OSError / TimeoutError. An
    address of the abstract namespace (leading NUL) is a worker's channel; "host:port" is
    a cluster node's peer listener over TCP, authenticated (serve --cluster: peer_sasl.py)."""
    if not address.startswith("\0"):
        host, _, port = address.rpartition(":")
        return await open_peer(host, int(port), timeout_s)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, address), timeout_s)
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_unix_connection(sock=sock)

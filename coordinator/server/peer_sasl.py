"""serve --cluster: how nodes authenticate the requests they send each other (app._peer:
transaction markers, AddPartitionsToTxn for a transactional id another node owns).

Theory of operation. Each node listens on one more TCP port, its *peer listener*, at its
first listener's host (`cluster_peer_port`; its address is registered in the database:
cluster/peer_auth.py). A connection there must first complete SASL SCRAM-SHA-512 (Kafka's
SaslHandshake v1 + SaslAuthenticate, the server's own exchange: sasl_auth.py) as the one
user PEER_USER, whose password only cluster nodes can derive: an HMAC of the secret that
the first node stored in the database when the cluster was created. Nothing else is read
before that, and a failed exchange is answered SASL_AUTHENTICATION_FAILED and closed (with
the failed-authentication delay), as on any SASL listener. An authenticated connection's
requests carry WORKER_PRINCIPAL, the inter-node principal that `serve --workers` uses too:
with an authorizer it is a super user (it has CLUSTER_ACTION, which WriteTxnMarkers needs
from anyone else, so an ordinary client's WriteTxnMarkers is refused with
CLUSTER_AUTHORIZATION_FAILED while a node's is served). SCRAM never sends the password
and proves the server knows it too, so a node also knows it reached a cluster node.

TLS (`cluster_peer_security_protocol=SASL_SSL`, Kafka's security.inter.broker.protocol):
the peer listener then speaks TLS only (a plaintext peer fails the handshake and is
closed before anything is read), with the node's certificate (ssl_certificate_file); a
connecting node checks the listener's certificate against ssl_truststore_file for the
host it dialled, and with `cluster_peer_ssl_client_auth=required` shows its own, checked
against the same truststore (mutual TLS). SCRAM runs inside TLS as before: TLS keeps the
traffic private between machines, the secret still decides who is a node.

The client side (`open_peer`) is used by worker_channel.open_channel for a "host:port"
peer address; the password and the TLS context are the process's (`use_peer_password`,
once the node read the secret): one cluster node per process.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import hmac
import ssl
from collections.abc import Callable
from typing import Any

from groupcoord.protocol.api import ApiKey, build, request_types

from ..security.scram import ScramClient, ScramCredential, credential_from_password
from .connection import Connection
from .endpoints import ServedListener
from .listener import Listener
from .peer_exchange import exchange
from .sasl_auth import SaslAuthenticator
from .tls_connection import TlsConnection
from .worker_layout import WORKER_PRINCIPAL

PEER_LISTENER_NAME = "CLUSTER_PEER"
PEER_USER = "groupcoord-node"
PEER_MECHANISM = "SCRAM-SHA-512"
PEER_CLIENT_ID = "groupcoord-node"
SCRAM_ITERATIONS = 4096
_HANDSHAKE_VERSION = 1
_AUTHENTICATE_VERSION = 2

_password: str | None = None
# The context this process's node connects to its peers with (SASL_SSL peers), asked per
# connection (SIGHUP rebuilds it); None: plain TCP.
_client_tls: Callable[[], ssl.SSLContext | None] | None = None
# Per password, SaltedPassword by (salt, iterations): a node's PBKDF2 of the password once
# per peer, not once per connection (peer_request opens one per request).
_salted: dict[str, dict[tuple[bytes, int], bytes]] = {}


def peer_password(secret: bytes) -> str:
    """The password of PEER_USER from the cluster's secret (never stored anywhere)."""
    digest = hmac.new(secret, b"groupcoord cluster peer", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def use_peer_password(
    password: str, client_tls: Callable[[], ssl.SSLContext | None] | None = None
) -> None:
    """This process's nodes authenticate to their peers with `password`, over TLS with
    the context `client_tls()` gives when that is not None."""
    global _password, _client_tls
    _password = password
    _client_tls = client_tls


class PeerServices:
    """What the SASL exchange asks of the server's AuthServices, for the peer listener:
    one mechanism and one user."""

    def __init__(self, password: str, base: Any) -> None:
        self.mechanisms = (PEER_MECHANISM,)
        self.receive_bytes_max = base.receive_bytes_max
        self.failed_delay_s = base.failed_delay_s
        self.reauth_ms = 0
        self.oauth = None
        self.plain_users: dict[str, str] = {}
        self._credential: ScramCredential = credential_from_password(
            PEER_MECHANISM, password, iterations=SCRAM_ITERATIONS
        )

    def scram_lookup(self, mechanism: str) -> object:
        credential = self._credential

        def lookup(user: str) -> ScramCredential | None:
            return credential if user == PEER_USER else None

        return lookup


class PeerAuthenticator(SaslAuthenticator):
    """The SASL exchange of the peer listener: a success gives WORKER_PRINCIPAL."""

    def _complete(self, user: str | None) -> int:
        lifetime_ms = super()._complete(user)
        self.connection.context.principal = WORKER_PRINCIPAL
        return lifetime_ms


class PeerConnection(Connection):
    """A connection on the peer listener: SCRAM as PEER_USER before anything else."""

    peer_services: PeerServices

    def _start_security(self, listener: ServedListener) -> None:
        PeerAuthenticator(self, self.peer_services, listener.spec.name)


class PeerTlsConnection(PeerConnection, TlsConnection):
    """A connection on a peer listener that speaks TLS (SASL_SSL peers)."""


async def open_peer_listener(app: Any, peers: Any) -> Listener:
    """serve --cluster, before the leases: read the cluster's secret, listen at the first
    listener's host (`cluster_peer_port`), and register the address (`peers`:
    cluster/peer_auth.PeerListeners). Its connections are served as the first listener's
    (its node and context) once authenticated here."""
    first = app.listeners[0]
    security = app.security
    tls = security.peer_contexts is not None
    password = peer_password(await peers.read_secret())
    use_peer_password(password, (lambda: security.peer_contexts[1]) if tls else None)
    services = PeerServices(password, security)
    protocol = "SASL_SSL" if tls else "SASL_PLAINTEXT"
    spec = dataclasses.replace(first.spec, name=PEER_LISTENER_NAME, protocol=protocol)
    served = ServedListener(spec, first.node, first.context)
    kind = PeerTlsConnection if tls else PeerConnection

    def connection(host: str) -> PeerConnection | None:
        if app.stopping or app.limits.admit(host) is not None:
            return None
        peer = kind(app, admitted_host=host, listener=served)
        peer.peer_services = services
        return peer

    listener = await Listener.start(
        first.spec.host,
        app.config.cluster_peer_port,
        connection,
        name=PEER_LISTENER_NAME,
        tls_context=(lambda: security.peer_contexts[0]) if tls else None,
    )
    try:
        await peers.register(first.node.host, listener.sockets[0].getsockname()[1])
    except BaseException:
        listener.close()
        raise
    return listener


async def _token(reader: Any, writer: Any, token: bytes) -> bytes:
    """One SaslAuthenticate: the server's answer token; ConnectionRefusedError on failure."""
    auth = request_types(ApiKey.SASL_AUTHENTICATE, _AUTHENTICATE_VERSION)
    answer = await exchange(
        reader,
        writer,
        ApiKey.SASL_AUTHENTICATE,
        _AUTHENTICATE_VERSION,
        build(auth.SaslAuthenticateRequest, auth_bytes=token),
        PEER_CLIENT_ID,
    )
    if answer.error_code:
        raise ConnectionRefusedError(f"peer authentication failed: {answer.error_message}")
    return bytes(answer.auth_bytes)


async def _authenticate(reader: Any, writer: Any, password: str) -> None:
    hs = request_types(ApiKey.SASL_HANDSHAKE, _HANDSHAKE_VERSION)
    answer = await exchange(
        reader,
        writer,
        ApiKey.SASL_HANDSHAKE,
        _HANDSHAKE_VERSION,
        build(hs.SaslHandshakeRequest, mechanism=PEER_MECHANISM),
        PEER_CLIENT_ID,
    )
    if answer.error_code:
        raise ConnectionRefusedError(f"peer handshake refused ({answer.error_code})")
    client = ScramClient(
        PEER_MECHANISM, PEER_USER, password, salted_cache=_salted.setdefault(password, {})
    )
    server_first = await _token(reader, writer, client.first())
    server_final = await _token(reader, writer, client.final(server_first))
    if not client.verify(server_final):
        raise ConnectionRefusedError("the peer does not know the cluster's secret")


async def open_peer(
    host: str,
    port: int,
    timeout_s: float,
    password: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> Any:
    """A connection to a node's peer listener, authenticated (reader, writer); OSError
    (ConnectionRefusedError when the exchange fails, ssl.SSLError when the TLS handshake
    does) / TimeoutError. `password` and `tls` (None: the process's, use_peer_password)."""
    password = _password if password is None else password
    if password is None:
        raise ConnectionRefusedError("no cluster secret read yet")
    if tls is None and _client_tls is not None:
        tls = _client_tls()
    opening = (
        asyncio.open_connection(host, port)
        if tls is None
        else asyncio.open_connection(host, port, ssl=tls, server_hostname=host)
    )
    reader, writer = await asyncio.wait_for(opening, timeout_s)
    try:
        await asyncio.wait_for(_authenticate(reader, writer, password), timeout_s)
    except BaseException:
        writer.close()
        raise
    return reader, writer

"""Cluster nodes talk to each other over TLS (issue 22 / 21: Kafka's
security.inter.broker.protocol=SASL_SSL; server/peer_sasl.py): three `serve --cluster`
nodes on a real PostgreSQL with cluster_peer_security_protocol=SASL_SSL and mutual TLS
(cluster_peer_ssl_client_auth=required), each node with its own certificate from one CA:
- a transaction coordinated by one node that commits offsets of a group another node
  coordinates completes: the marker goes over the peer listener, which speaks TLS only;
- a plaintext peer connection is refused, even with the right SCRAM password;
- over TLS, a client without a certificate the CA signed is refused, and a node's
  certificate still needs the cluster's secret (SCRAM runs inside TLS).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator

import pytest

from groupcoord.coordinator.server.peer_sasl import open_peer, peer_password
from tests.cluster_support import Cluster, running_cluster, transaction_across_nodes
from tests.tls_certs import make_pki

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster(peer_tls="required") as c:
        yield c


def _listener(cluster: Cluster, node_id: int) -> tuple[str, int]:
    rows = cluster.query(
        "SELECT host, port FROM cluster_peer_listeners WHERE node_id = $1", node_id
    )
    return rows[0][0], rows[0][1]


def _password(cluster: Cluster) -> str:
    return peer_password(bytes(cluster.query("SELECT secret FROM cluster_secret")[0][0]))


def _context(cluster: Cluster, certificate: tuple[str, str] | None) -> ssl.SSLContext:
    assert cluster.pki is not None
    context = ssl.create_default_context(cafile=str(cluster.pki.ca))
    if certificate is not None:
        context.load_cert_chain(*certificate)
    return context


def _attempt(host: str, port: int, password: str, tls: ssl.SSLContext | None) -> str:
    """Open an authenticated peer connection; the subject CN of the listener's
    certificate (empty over plain TCP)."""

    async def run() -> str:
        _reader, writer = await open_peer(host, port, 10, password=password, tls=tls)
        try:
            peer = writer.get_extra_info("peercert") or {}
            subject = dict(rdn[0] for rdn in peer.get("subject", ()))
            return str(subject.get("commonName", ""))
        finally:
            writer.close()

    return asyncio.run(run())


def test_transaction_markers_cross_nodes_over_tls(cluster: Cluster) -> None:
    transaction_across_nodes(cluster)


def test_plaintext_peer_connection_refused(cluster: Cluster) -> None:
    host, port = _listener(cluster, 1)
    # The right password over plain TCP: the listener reads a TLS handshake, not Kafka
    # requests, and closes the connection.
    with pytest.raises((OSError, EOFError)) as refused:
        _attempt(host, port, _password(cluster), None)
    assert not isinstance(refused.value, ConnectionRefusedError)  # not SCRAM's refusal


def test_peer_tls_is_mutual_and_still_needs_the_secret(cluster: Cluster) -> None:
    assert cluster.pki is not None
    host, port = _listener(cluster, 2)
    node1 = (str(cluster.pki.dir / "node1.pem"), str(cluster.pki.dir / "node1.key"))
    # What a node does: its certificate, the cluster's password; the listener is node 2's.
    assert _attempt(host, port, _password(cluster), _context(cluster, node1)) == (
        "groupcoord-node-2"
    )
    # No client certificate: the TLS handshake is refused (mutual TLS).
    with pytest.raises((OSError, EOFError)) as refused:
        _attempt(host, port, _password(cluster), _context(cluster, None))
    assert not isinstance(refused.value, ConnectionRefusedError)
    # A certificate from another CA: refused as well.
    stranger = make_pki(cluster.pki.dir / "stranger", ca_name="stranger-ca")
    cert, key = stranger.issue("intruder", "/CN=groupcoord-node-9", node=True)
    with pytest.raises((OSError, EOFError)) as refused:
        _attempt(host, port, _password(cluster), _context(cluster, (str(cert), str(key))))
    assert not isinstance(refused.value, ConnectionRefusedError)
    # A node's certificate without the cluster's secret: SCRAM refuses it.
    with pytest.raises(ConnectionRefusedError, match="authentication failed"):
        _attempt(host, port, peer_password(b"a guess"), _context(cluster, node1))

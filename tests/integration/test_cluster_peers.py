"""Cluster nodes authenticate the requests they send each other (issue 22; server/
peer_sasl.py, cluster/peer_auth.py): three `serve --cluster` nodes on a real PostgreSQL
with the authorizer on, where ordinary clients (User:ANONYMOUS) have no right on the
cluster resource:
- a transaction coordinated by one node that commits offsets of a group another node
  coordinates completes: its WriteTxnMarkers to that node goes to the node's peer
  listener, authenticated by SCRAM with the cluster's secret, as the inter-node principal;
- an ordinary client's WriteTxnMarkers to any node gets CLUSTER_AUTHORIZATION_FAILED;
- the peer listener takes nothing from a client that does not know the secret: a wrong
  password fails the SCRAM exchange, an unauthenticated request is never answered.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from groupcoord.coordinator.server.peer_sasl import open_peer, peer_password
from tests.cluster_support import (
    TOPIC,
    Cluster,
    running_cluster,
    transaction_across_nodes,
    until,
)
from tests.integration.txn_support import write_markers
from tests.rawclient import RawClient

pytestmark = pytest.mark.integration

CLUSTER_AUTHORIZATION_FAILED = 31
AUTHORIZED = [
    "--set",
    "authorizer_enabled=true",
    "--set",
    "allow_everyone_if_no_acl_found=true",
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster(extra_args=AUTHORIZED) as c:
        # One ACL on the cluster resource (for someone else): from then on ordinary
        # clients have no right there (allow_everyone_if_no_acl_found covers only
        # resources without ACLs). ACLs follow the metadata store: made once, through node 1,
        # and every node refuses ordinary clients once its image has it.
        binding = AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            "User:admin",
            "*",
            AclOperation.DESCRIBE,
            AclPermissionType.ALLOW,
        )
        admin = AdminClient({"bootstrap.servers": c.nodes[1].bootstrap})
        for future in admin.create_acls([binding]).values():
            future.result(30)
        until(lambda: all(markers_refused(n.bootstrap) for n in c.nodes.values()), "the ACL")
        yield c


def markers_refused(bootstrap: str) -> bool:
    with RawClient(bootstrap) as client:
        errors = write_markers(client, [(1000, 0, True, {TOPIC: [0, 1]})])
    return set(errors.values()) == {CLUSTER_AUTHORIZATION_FAILED}


def peer_listeners(cluster: Cluster) -> dict[int, tuple[str, int]]:
    rows = cluster.query("SELECT node_id, host, port FROM cluster_peer_listeners")
    return {r[0]: (r[1], r[2]) for r in rows}


def test_ordinary_client_cannot_write_markers(cluster: Cluster) -> None:
    for node in cluster.nodes.values():
        with RawClient(node.bootstrap) as client:
            errors = write_markers(client, [(1000, 0, True, {TOPIC: [0, 1]})])
        assert set(errors.values()) == {CLUSTER_AUTHORIZATION_FAILED}, errors


def test_transaction_markers_cross_nodes_authenticated(cluster: Cluster) -> None:
    transaction_across_nodes(cluster)


def test_peer_listener_refuses_whoever_lacks_the_secret(cluster: Cluster) -> None:
    listeners = peer_listeners(cluster)
    assert sorted(listeners) == [1, 2, 3]
    host, port = listeners[1]
    secret = bytes(cluster.query("SELECT secret FROM cluster_secret")[0][0])

    async def attempt(password: str) -> None:
        _reader, writer = await open_peer(host, port, 10, password=password)
        writer.close()

    asyncio.run(attempt(peer_password(secret)))  # what a node does
    with pytest.raises(ConnectionRefusedError, match="authentication failed"):
        asyncio.run(attempt(peer_password(b"a guess")))
    # A client that does not authenticate first is closed without an answer (as on any
    # SASL listener), its request not served.
    with RawClient(f"{host}:{port}") as client, pytest.raises((OSError, EOFError, ConnectionError)):
        write_markers(client, [(1000, 0, True, {TOPIC: [0]})])
    with socket.create_connection((host, port), 10):
        pass  # still listening

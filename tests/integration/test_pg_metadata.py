"""Cluster metadata in a real PostgreSQL (issue 22 item 2b): writers bump the version and
NOTIFY; followers see a third node's changes by NOTIFY, and after a missed NOTIFY (their
connection dropped while the change was committed) by the version check on reconnect."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from groupcoord.coordinator.cluster.metadata_store import (
    MetadataFollower,
    MetadataStore,
    TopicExists,
    ensure_metadata_schema,
)
from groupcoord.coordinator.security.acl_binding import AclBinding
from groupcoord.coordinator.security.acl_model import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from groupcoord.coordinator.security.scram import ScramCredential
from tests.postgres_server import PostgresServer, postgres_server

pytestmark = pytest.mark.integration

WAIT_S = 30


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture
async def pool(pg: PostgresServer) -> AsyncIterator[asyncpg.Pool]:
    # One connection, opened now: the missed-NOTIFY test writes while new connections
    # to the database are refused.
    pool = await asyncpg.create_pool(pg.dsn, min_size=1, max_size=1)
    async with pool.acquire() as connection:
        await ensure_metadata_schema(connection)
    yield pool
    await pool.close()


async def test_followers_see_a_third_writers_changes_by_notify(
    pool: asyncpg.Pool, pg: PostgresServer
) -> None:
    # A long check interval: only NOTIFY can bring the change in time.
    followers = [MetadataFollower(pg.dsn, check_interval_s=3600) for _ in range(2)]
    for follower in followers:
        await follower.start()
    try:
        writer = MetadataStore(pool)
        cluster_id = await writer.ensure_cluster_id("cluster-A")
        assert await writer.ensure_cluster_id("cluster-B") == cluster_id == "cluster-A"
        topic_id = uuid.uuid4()
        await writer.create_topic("orders", 3, topic_id, {"retention.ms": "1000"})
        with pytest.raises(TopicExists):
            await writer.create_topic("orders", 1)
        await writer.alter_topic_configs("orders", {"cleanup.policy": "compact"}, ["retention.ms"])
        acl = AclBinding(
            ResourceType.TOPIC,
            "orders",
            PatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        await writer.create_acls([acl])
        credential = ScramCredential(b"salt", b"stored", b"server", 4096)
        version = await writer.upsert_credential("alice", "SCRAM-SHA-256", credential)
        for follower in followers:
            image = await follower.wait_for_version(version, WAIT_S)
            assert image.cluster_id == "cluster-A"
            assert image.topics["orders"].topic_id == topic_id
            assert image.topics["orders"].partitions == 3
            assert image.configs["orders"] == {"cleanup.policy": "compact"}
            assert image.acls == {acl}
            assert image.credentials[("alice", "SCRAM-SHA-256")] == credential
            assert {how for _, how in follower.reloads[1:]} == {"notify"}
        version = await writer.delete_topic("orders")
        for follower in followers:
            image = await follower.wait_for_version(version, WAIT_S)
            assert "orders" not in image.topics and "orders" not in image.configs
    finally:
        for follower in followers:
            await follower.close()


async def test_a_missed_notify_is_caught_up_on_reconnect(
    pool: asyncpg.Pool, pg: PostgresServer
) -> None:
    follower = MetadataFollower(pg.dsn, check_interval_s=3600, reconnect_delay_s=0.1)
    await follower.start()
    writer = MetadataStore(pool)
    # A database's connections are switched off from another database.
    admin = await asyncpg.connect(pg.dsn.rsplit("/", 1)[0] + "/postgres")
    try:
        pid = follower.backend_pid
        assert pid is not None
        # The follower's connection goes and it cannot come back until the change is
        # committed: its NOTIFY reaches nobody on that node.
        await admin.execute("ALTER DATABASE groupcoord ALLOW_CONNECTIONS false")
        await pool.execute("SELECT pg_terminate_backend($1)", pid)
        version = await writer.create_topic("missed", 2)
        await asyncio.sleep(0.5)  # the follower tries (and fails) to reconnect meanwhile
        assert follower.image.version < version
        await admin.execute("ALTER DATABASE groupcoord ALLOW_CONNECTIONS true")
        image = await follower.wait_for_version(version, WAIT_S)
        assert image.topics["missed"].partitions == 2
        assert follower.reloads[-1] == (version, "reconnect")
        assert follower.reconnects >= 1
        # And it follows by NOTIFY again on its new connection.
        version = await writer.create_partitions("missed", 4)
        image = await follower.wait_for_version(version, WAIT_S)
        assert image.topics["missed"].partitions == 4
        assert follower.reloads[-1] == (version, "notify")
    finally:
        await admin.execute("ALTER DATABASE groupcoord ALLOW_CONNECTIONS true")
        await admin.close()
        await follower.close()

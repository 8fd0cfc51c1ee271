"""Cluster metadata in PostgreSQL (issue 22 item 2b): topics (ids, partition counts), topic
configs, ACLs, SCRAM credentials and the cluster id, in tables with one version counter;
every node's image follows it.

Writes (`MetadataStore`). Each change is one transaction that first bumps the counter
(`UPDATE metadata_version ... RETURNING version`: the row lock orders metadata writers, so
versions are committed in order), then changes the rows and sends NOTIFY on the
`groupcoord_metadata` channel with the new version (PostgreSQL delivers it at commit, and
not at all on rollback). Metadata changes are rare (topics created, ACLs altered): a
counter row every writer locks costs nothing that matters.

Reading (`MetadataFollower`). A node holds an immutable `MetadataImage` read in one
repeatable-read transaction (the version and every table, consistent with each other). A
dedicated connection LISTENs; a notification of a version above the image's reloads the
image. A missed NOTIFY never leaves a node stale: notifications are lost only with the
connection, and after every reconnect the follower compares the stored version with its
image's (and reloads when they differ) before it reports itself in sync; the same check
also runs every `check_interval_s` as a backstop for a connection that died silently.
The image is reloaded whole: metadata of thousands of topics is read in milliseconds, and
a change log table would grow this to incremental loads when it is not (README Decisions).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import asyncpg
import structlog

from groupcoord.coordinator.security.acl_binding import AclBinding
from groupcoord.coordinator.security.acl_model import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from groupcoord.coordinator.security.scram import ScramCredential

log = structlog.get_logger("groupcoord.cluster")

CHANNEL = "groupcoord_metadata"
_DDL_LOCK_KEY = 0x67635F6D65746164  # "gc_metad"

METADATA_DDL = """
CREATE TABLE IF NOT EXISTS metadata_version (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    version  bigint NOT NULL
);
INSERT INTO metadata_version VALUES (true, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS cluster_id (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    cluster_id  text NOT NULL
);
CREATE TABLE IF NOT EXISTS topics (
    name        text PRIMARY KEY,
    topic_id    uuid NOT NULL UNIQUE,
    partitions  integer NOT NULL CHECK (partitions > 0)
);
CREATE TABLE IF NOT EXISTS topic_configs (
    topic  text NOT NULL REFERENCES topics (name) ON DELETE CASCADE,
    name   text NOT NULL,
    value  text NOT NULL,
    PRIMARY KEY (topic, name)
);
CREATE TABLE IF NOT EXISTS acls (
    resource_type    smallint NOT NULL,
    resource_name    text NOT NULL,
    pattern_type     smallint NOT NULL,
    principal        text NOT NULL,
    host             text NOT NULL,
    operation        smallint NOT NULL,
    permission_type  smallint NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                 permission_type)
);
CREATE TABLE IF NOT EXISTS scram_credentials (
    username    text NOT NULL,
    mechanism   text NOT NULL,
    salt        bytea NOT NULL,
    stored_key  bytea NOT NULL,
    server_key  bytea NOT NULL,
    iterations  integer NOT NULL,
    PRIMARY KEY (username, mechanism)
);
"""

_BUMP = "UPDATE metadata_version SET version = version + 1 RETURNING version"


class TopicExists(Exception):
    """CreateTopics of a name that exists (TOPIC_ALREADY_EXISTS)."""


class UnknownTopic(Exception):
    """A change of a topic that does not exist (UNKNOWN_TOPIC_OR_PARTITION)."""


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The metadata as of `version` (0: nothing written yet)."""

    version: int = 0
    cluster_id: str | None = None
    topics: Mapping[str, TopicRecord] = field(default_factory=dict)
    configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    acls: frozenset[AclBinding] = frozenset()
    # (user, mechanism) -> credential
    credentials: Mapping[tuple[str, str], ScramCredential] = field(default_factory=dict)


async def ensure_metadata_schema(connection: asyncpg.Connection) -> None:
    """Create the metadata tables (idempotent; nodes starting together take turns)."""
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _DDL_LOCK_KEY)
        await connection.execute(METADATA_DDL)


async def read_version(connection: asyncpg.Connection) -> int:
    return int(await connection.fetchval("SELECT version FROM metadata_version"))


async def read_image(connection: asyncpg.Connection) -> MetadataImage:
    """Every table and the version, read in one snapshot."""
    async with connection.transaction(isolation="repeatable_read", readonly=True):
        version = await read_version(connection)
        cluster_id = await connection.fetchval("SELECT cluster_id FROM cluster_id")
        topics = {
            r["name"]: TopicRecord(r["name"], r["topic_id"], r["partitions"])
            for r in await connection.fetch("SELECT name, topic_id, partitions FROM topics")
        }
        configs: dict[str, dict[str, str]] = {}
        for r in await connection.fetch("SELECT topic, name, value FROM topic_configs"):
            configs.setdefault(r["topic"], {})[r["name"]] = r["value"]
        acls = frozenset(
            AclBinding(
                ResourceType(r[0]),
                r[1],
                PatternType(r[2]),
                r[3],
                r[4],
                AclOperation(r[5]),
                AclPermissionType(r[6]),
            )
            for r in await connection.fetch("SELECT * FROM acls")
        )
        credentials = {
            (r["username"], r["mechanism"]): ScramCredential(
                bytes(r["salt"]), bytes(r["stored_key"]), bytes(r["server_key"]), r["iterations"]
            )
            for r in await connection.fetch("SELECT * FROM scram_credentials")
        }
    return MetadataImage(version, cluster_id, topics, configs, acls, credentials)


class MetadataStore:
    """The writers: each method is one transaction that bumps the version and notifies;
    returns the new version (see the module docstring)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def _change(self, body: Callable[[asyncpg.Connection], object]) -> int:
        async with self._pool.acquire() as connection, connection.transaction():
            version = int(await connection.fetchval(_BUMP))
            outcome = body(connection)
            if asyncio.iscoroutine(outcome):
                await outcome
            await connection.execute("SELECT pg_notify($1, $2)", CHANNEL, str(version))
        return version

    async def ensure_cluster_id(self, proposed: str) -> str:
        """The cluster id: `proposed` if none is stored yet (the first node), else the
        stored one."""
        async with self._pool.acquire() as connection:
            stored = await connection.fetchval("SELECT cluster_id FROM cluster_id")
        if stored is not None:
            return str(stored)

        async def insert(connection: asyncpg.Connection) -> None:
            await connection.execute(
                "INSERT INTO cluster_id VALUES (true, $1) ON CONFLICT DO NOTHING", proposed
            )

        await self._change(insert)
        async with self._pool.acquire() as connection:
            return str(await connection.fetchval("SELECT cluster_id FROM cluster_id"))

    async def create_topic(
        self,
        name: str,
        partitions: int,
        topic_id: uuid.UUID | None = None,
        configs: Mapping[str, str] | None = None,
    ) -> int:
        """Raises TopicExists."""
        new_id = topic_id or uuid.uuid4()

        async def insert(connection: asyncpg.Connection) -> None:
            done = await connection.fetchval(
                "INSERT INTO topics VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING 1",
                name,
                new_id,
                partitions,
            )
            if done is None:
                raise TopicExists(name)
            if configs:
                await connection.executemany(
                    "INSERT INTO topic_configs VALUES ($1, $2, $3)",
                    [(name, key, value) for key, value in configs.items()],
                )

        return await self._change(insert)

    async def delete_topic(self, name: str, topic_id: uuid.UUID | None = None) -> int:
        """Deletes the topic (only if its id is `topic_id`, when given: a topic deleted and
        created again meanwhile is another one) and its configs. Raises UnknownTopic."""

        async def delete(connection: asyncpg.Connection) -> None:
            if (
                await connection.fetchval(
                    "DELETE FROM topics WHERE name = $1"
                    " AND ($2::uuid IS NULL OR topic_id = $2) RETURNING 1",
                    name,
                    topic_id,
                )
                is None
            ):
                raise UnknownTopic(name)

        return await self._change(delete)

    async def create_partitions(self, name: str, total: int) -> int:
        """Grow the topic to `total` partitions. Raises UnknownTopic, ValueError when
        `total` is not above the current count."""

        async def grow(connection: asyncpg.Connection) -> None:
            current = await connection.fetchval(
                "SELECT partitions FROM topics WHERE name = $1 FOR UPDATE", name
            )
            if current is None:
                raise UnknownTopic(name)
            if total <= current:
                raise ValueError(f"topic {name} has {current} partitions already")
            await connection.execute(
                "UPDATE topics SET partitions = $2 WHERE name = $1", name, total
            )

        return await self._change(grow)

    async def alter_topic_configs(
        self, name: str, set_: Mapping[str, str], delete: Iterable[str] = ()
    ) -> int:
        """Set and delete configs of a topic. Raises UnknownTopic."""

        async def alter(connection: asyncpg.Connection) -> None:
            if await connection.fetchval("SELECT 1 FROM topics WHERE name = $1", name) is None:
                raise UnknownTopic(name)
            if set_:
                await connection.executemany(
                    "INSERT INTO topic_configs VALUES ($1, $2, $3)"
                    " ON CONFLICT (topic, name) DO UPDATE SET value = excluded.value",
                    [(name, key, value) for key, value in set_.items()],
                )
            removed = list(delete)
            if removed:
                await connection.execute(
                    "DELETE FROM topic_configs WHERE topic = $1 AND name = ANY($2::text[])",
                    name,
                    removed,
                )

        return await self._change(alter)

    async def replace_topic_configs(self, name: str, configs: Mapping[str, str]) -> int:
        """Make `configs` the topic's whole override set. Raises UnknownTopic."""

        async def replace(connection: asyncpg.Connection) -> None:
            if await connection.fetchval("SELECT 1 FROM topics WHERE name = $1", name) is None:
                raise UnknownTopic(name)
            await connection.execute(
                "DELETE FROM topic_configs WHERE topic = $1 AND NOT (name = ANY($2::text[]))",
                name,
                list(configs),
            )
            if configs:
                await connection.executemany(
                    "INSERT INTO topic_configs VALUES ($1, $2, $3)"
                    " ON CONFLICT (topic, name) DO UPDATE SET value = excluded.value",
                    [(name, key, value) for key, value in configs.items()],
                )

        return await self._change(replace)

    async def create_acls(self, bindings: Iterable[AclBinding]) -> int:
        """Add ACLs (one already there is no change)."""
        rows = [_acl_row(binding) for binding in bindings]

        async def insert(connection: asyncpg.Connection) -> None:
            await connection.executemany(
                "INSERT INTO acls VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
                rows,
            )

        return await self._change(insert)

    async def delete_acls(self, bindings: Iterable[AclBinding]) -> int:
        """Remove these ACLs (DeleteAcls resolves its filters against the image first)."""
        rows = [_acl_row(binding) for binding in bindings]

        async def delete(connection: asyncpg.Connection) -> None:
            await connection.executemany(
                "DELETE FROM acls WHERE resource_type = $1 AND resource_name = $2"
                " AND pattern_type = $3 AND principal = $4 AND host = $5 AND operation = $6"
                " AND permission_type = $7",
                rows,
            )

        return await self._change(delete)

    async def upsert_credential(
        self, user: str, mechanism: str, credential: ScramCredential
    ) -> int:
        async def upsert(connection: asyncpg.Connection) -> None:
            await connection.execute(
                "INSERT INTO scram_credentials VALUES ($1, $2, $3, $4, $5, $6)"
                " ON CONFLICT (username, mechanism) DO UPDATE SET salt = excluded.salt,"
                " stored_key = excluded.stored_key, server_key = excluded.server_key,"
                " iterations = excluded.iterations",
                user,
                mechanism,
                credential.salt,
                credential.stored_key,
                credential.server_key,
                credential.iterations,
            )

        return await self._change(upsert)

    async def delete_credential(self, user: str, mechanism: str) -> int:
        async def delete(connection: asyncpg.Connection) -> None:
            await connection.execute(
                "DELETE FROM scram_credentials WHERE username = $1 AND mechanism = $2",
                user,
                mechanism,
            )

        return await self._change(delete)


def _acl_row(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (
        int(binding.resource_type),
        binding.resource_name,
        int(binding.pattern_type),
        binding.principal,
        binding.host,
        int(binding.operation),
        int(binding.permission_type),
    )


class MetadataFollower:
    """This node's image of the metadata, kept current by LISTEN plus a version check on
    every (re)connect and every `check_interval_s` (module docstring). `on_change(image)`
    is called on the loop with each newer image."""

    def __init__(
        self,
        dsn: str,
        on_change: Callable[[MetadataImage], None] | None = None,
        *,
        check_interval_s: float = 5.0,
        reconnect_delay_s: float = 0.2,
        application_name: str = "groupcoord-metadata",
    ) -> None:
        self._dsn = dsn
        # Names the listening connection in pg_stat_activity (tests find it there).
        self._application_name = application_name
        self._on_change = on_change
        self._check_interval_s = check_interval_s
        self._reconnect_delay_s = reconnect_delay_s
        self.image = MetadataImage()
        self._connection: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._lost = asyncio.Event()
        self._notified = 0  # highest version a notification announced
        # How each image change was found ("start", "notify", "reconnect", "check") and how
        # many reconnects there were: what the tests assert.
        self.reloads: list[tuple[int, str]] = []
        self.reconnects = 0

    @property
    def backend_pid(self) -> int | None:
        """The listening connection's server process (tests terminate it)."""
        connection = self._connection
        return None if connection is None or connection.is_closed() else connection.get_server_pid()

    async def start(self) -> MetadataImage:
        """Connect, LISTEN and load the image; then follow in the background."""
        await self._connect("start")
        self._task = asyncio.get_running_loop().create_task(self._follow())
        return self.image

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()

    async def wait_for_version(self, version: int, timeout_s: float) -> MetadataImage:
        """The image once it is at `version` or later; TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self.image.version < version:
            if time.monotonic() > deadline:
                raise TimeoutError(f"image at {self.image.version}, wanted {version}")
            await asyncio.sleep(0.01)
        return self.image

    async def _connect(self, how: str) -> None:
        """LISTEN first, then read: a change committed between the two is seen by the read
        or announced by a notification, never missed."""
        connection = await asyncpg.connect(
            self._dsn, server_settings={"application_name": self._application_name}
        )
        try:
            self._lost.clear()
            connection.add_termination_listener(lambda _c: self._lost.set())
            await connection.add_listener(CHANNEL, self._notify)
            self._connection = connection
            await self._reload(how, connection)
        except BaseException:
            with contextlib.suppress(Exception):
                await connection.close()
            raise

    def _notify(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self._notified = max(self._notified, int(payload))
        if self._notified > self.image.version:
            self._wake.set()

    async def _reload(self, how: str, connection: asyncpg.Connection) -> None:
        if how != "start" and await read_version(connection) == self.image.version:
            return
        image = await read_image(connection)
        if image.version <= self.image.version and how != "start":
            return
        self.image = image
        self.reloads.append((image.version, how))
        if self._on_change is not None:
            self._on_change(image)

    async def _follow(self) -> None:
        while True:
            connection = self._connection
            try:
                if connection is None or connection.is_closed() or self._lost.is_set():
                    raise ConnectionError("the listening connection is gone")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake_or_lost(), self._check_interval_s)
                if self._lost.is_set() or connection.is_closed():
                    raise ConnectionError("the listening connection is gone")
                woke = self._wake.is_set()
                self._wake.clear()
                await self._reload("notify" if woke else "check", connection)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the connection or the database is away: reconnect
                log.warning("metadata follower reconnecting", error=repr(exc))
                if connection is not None:
                    connection.terminate()
                self._connection = None
                await self._reconnect()

    async def _wake_or_lost(self) -> None:
        wake = asyncio.ensure_future(self._wake.wait())
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            await asyncio.wait({wake, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            wake.cancel()
            lost.cancel()

    async def _reconnect(self) -> None:
        delay_s = self._reconnect_delay_s
        while True:
            await asyncio.sleep(delay_s)
            try:
                await self._connect("reconnect")
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("metadata follower reconnect failed", error=repr(exc))
                delay_s = min(delay_s * 2, 2.0)
                continue
            self.reconnects += 1
            return

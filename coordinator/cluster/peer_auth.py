"""serve --cluster: the cluster's secret and the nodes' peer listeners, in PostgreSQL; the
listener and the authentication are server/peer_sasl.py's.

Theory of operation. The first node to start on a database creates `cluster_secret`'s one
row (32 random bytes); every node reads it at start and derives the peer password from it
(peer_sasl.peer_password), so only processes that can read the cluster's database (the
nodes, and whoever administers the database) can pass for a node. Each node then opens
its peer listener (peer_sasl.open_peer_listener) and registers its address in
`cluster_peer_listeners`; `PeerListeners`
keeps every node's address as last read (once per lease renew interval), which app._peer
answers from. A node restarted on another port re-registers: its peers find it at the
next read (meanwhile a request to it fails and is retried as for a node that is down).
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import asyncpg

from ..config import Config
from ..observability.logging import get_logger
from .leases import session_settings

log = get_logger("groupcoord.cluster")

SECRET_BYTES = 32
# Creating the tables takes this advisory lock: nodes starting together would otherwise
# race in CREATE TABLE IF NOT EXISTS (a unique violation in the catalog).
_DDL_LOCK = 0x6763_7065  # "gcpe"
_DDL = """
CREATE TABLE IF NOT EXISTS cluster_secret (
    id      integer PRIMARY KEY CHECK (id = 1),
    secret  bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS cluster_peer_listeners (
    node_id  integer PRIMARY KEY,
    host     text NOT NULL,
    port     integer NOT NULL
);
"""
_CREATE_SECRET = "INSERT INTO cluster_secret (id, secret) VALUES (1, $1) ON CONFLICT DO NOTHING"
_SECRET = "SELECT secret FROM cluster_secret WHERE id = 1"
_REGISTER = """
INSERT INTO cluster_peer_listeners (node_id, host, port) VALUES ($1, $2, $3)
ON CONFLICT (node_id) DO UPDATE SET host = EXCLUDED.host, port = EXCLUDED.port
"""
_LISTENERS = "SELECT node_id, host, port FROM cluster_peer_listeners"


async def cluster_secret(conn: Any) -> bytes:
    """The cluster's secret, created by the first node that asks."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _DDL_LOCK)
        await conn.execute(_DDL)
        await conn.execute(_CREATE_SECRET, secrets.token_bytes(SECRET_BYTES))
        return bytes(await conn.fetchval(_SECRET))


class PeerListeners:
    """Every node's peer listener address, and this node's registration (module
    docstring)."""

    def __init__(self, config: Config, lock_hold_ms: int) -> None:
        self.config = config
        self.lock_hold_ms = lock_hold_ms
        self.addresses: dict[int, str] = {}
        self._refresh: asyncio.Task[None] | None = None

    def address(self, node_id: int) -> str:
        """Node `node_id`'s peer listener, host:port; OSError when not known (yet)."""
        found = self.addresses.get(node_id)
        if found is None:
            raise OSError(f"node {node_id} has no peer listener registered")
        return found

    async def _connect(self) -> Any:
        return await asyncpg.connect(
            self.config.cluster,
            server_settings=session_settings(self.lock_hold_ms, self.config.node_id),
        )

    async def read_secret(self) -> bytes:
        """The cluster's secret (created by the first node that asks)."""
        conn = await self._connect()
        try:
            return await cluster_secret(conn)
        finally:
            await conn.close()

    async def register(self, host: str, port: int) -> None:
        """This node's peer listener is at host:port; from now on the addresses of every
        node are read once per renew interval."""
        conn = await self._connect()
        try:
            await conn.execute(_REGISTER, self.config.node_id, host, port)
            await self._read(conn)
        finally:
            await conn.close()
        log.info("peer listener", host=host, port=port)
        self._refresh = asyncio.ensure_future(self._refresh_loop())

    async def _read(self, conn: Any) -> None:
        rows = await conn.fetch(_LISTENERS)
        self.addresses = {r["node_id"]: f"{r['host']}:{r['port']}" for r in rows}

    async def _refresh_loop(self) -> None:
        interval_s = self.config.cluster_lease_renew_interval_ms / 1000
        conn: Any = None
        try:
            while True:
                await asyncio.sleep(interval_s)
                try:
                    if conn is None:
                        conn = await self._connect()
                    await asyncio.wait_for(self._read(conn), max(interval_s, 1.0) * 2)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the database is away: the last addresses stand
                    log.warning("peer listeners not read", error=repr(e))
                    if conn is not None:
                        conn.terminate()
                    conn = None
        finally:
            if conn is not None:
                conn.terminate()

    async def close(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            await asyncio.gather(self._refresh, return_exceptions=True)

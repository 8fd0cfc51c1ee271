"""The test PostgreSQL starts, takes writes through asyncpg, and keeps them over a restart."""

from __future__ import annotations

import asyncio

import asyncpg

from tests.postgres_server import postgres_server


def test_postgres_starts_and_keeps_rows_over_a_restart() -> None:
    async def write(dsn: str) -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE TABLE t (k int PRIMARY KEY, v text)")
            await conn.execute("INSERT INTO t VALUES (1, 'one')")
        finally:
            await conn.close()

    async def read(dsn: str) -> list[tuple[int, str]]:
        conn = await asyncpg.connect(dsn)
        try:
            return [tuple(r) for r in await conn.fetch("SELECT k, v FROM t")]
        finally:
            await conn.close()

    with postgres_server() as pg:
        asyncio.run(write(pg.dsn))
        pg.restart()
        assert asyncio.run(read(pg.dsn)) == [(1, "one")]

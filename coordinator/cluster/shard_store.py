"""Coordinator shard records in PostgreSQL: the durable copy of each shard's log.

Theory of operation. A shard's log is the sequence of record batches its runner appends
(runtime/log_runner.py), byte for byte as the local shard log holds them. In cluster mode
each group-commit round of a shard is ONE database transaction, one statement (`append`:
one round trip) that first runs the fencing guard (schema.FENCED_WRITE_GUARD: the lease
row still names this node at the epoch it loaded the shard at) and then inserts the
batches the round covers, numbered by a per-shard sequence (`seq`, dense, growing) and
tagged with the writer's lease epoch (so that "one writer at a time" can be checked:
epochs never decrease along seq). A guard that returns nothing raises Fenced and nothing
is written: a node whose lease moved can never write the shard again.

A *snapshot* of a shard is a run of batches whose replay gives the shard's state as of
batch `seq` (the local log, compacted, read from its start); writing one (also fenced)
deletes the batches it covers, so a takeover loads one snapshot plus a short tail
(`load`), the batches in the order they were written, and replays them through the
runner's existing replay path (the local log rebuilt from them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .schema import FENCED_WRITE_GUARD

SHARD_STORE_DDL = """
CREATE TABLE IF NOT EXISTS shard_batches (
    resource  text NOT NULL,
    seq       bigint NOT NULL,
    epoch     bigint NOT NULL,
    data      bytea NOT NULL,
    PRIMARY KEY (resource, seq)
);
CREATE TABLE IF NOT EXISTS shard_snapshots (
    resource  text PRIMARY KEY,
    seq       bigint NOT NULL,
    data      bytea NOT NULL
);
"""

# One statement, one round trip: the fencing guard (schema.py's, verbatim: $1 lease, $2
# node, $3 epoch) as a CTE the insert joins, so the rows go in only when the guard returns
# its row, which stays locked until the statement's transaction commits.
_GUARDED_INSERT = (
    "WITH guard AS ("
    + FENCED_WRITE_GUARD
    + """)
INSERT INTO shard_batches (resource, seq, epoch, data)
SELECT $4, s, $3, d FROM unnest($5::bigint[], $6::bytea[]) AS t(s, d), guard
"""
)
_SNAPSHOT = """
INSERT INTO shard_snapshots (resource, seq, data) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET seq = EXCLUDED.seq, data = EXCLUDED.data
 WHERE shard_snapshots.seq < EXCLUDED.seq
"""
_TRIM = "DELETE FROM shard_batches WHERE resource = $1 AND seq <= $2"
_LOAD_SNAPSHOT = "SELECT seq, data FROM shard_snapshots WHERE resource = $1"
_LOAD_TAIL = "SELECT seq, data FROM shard_batches WHERE resource = $1 AND seq > $2 ORDER BY seq"


class Fenced(Exception):
    """This node no longer holds the shard's lease at the epoch it wrote with: the write was
    refused (another node owns the shard now, or will)."""


@dataclass(slots=True)
class ShardImage:
    """What a takeover loads: the snapshot's batches then the tail's, in order, and the
    sequence number the next appended batch takes."""

    batches: list[bytes]
    next_seq: int
    snapshot_seq: int  # -1: no snapshot
    tail_batches: int


async def create_tables(conn: Any) -> None:
    await conn.execute(SHARD_STORE_DDL)


async def _guard(conn: Any, lease: str, node_id: int, epoch: int) -> None:
    if await conn.fetchval(FENCED_WRITE_GUARD, lease, node_id, epoch) is None:
        raise Fenced(f"{lease}: node {node_id} no longer holds epoch {epoch}")


async def append(
    conn: Any,
    resource: str,
    lease: str,
    node_id: int,
    epoch: int,
    first_seq: int,
    batches: list[bytes],
) -> None:
    """Write `batches` (at least one) as `resource`'s seq first_seq.. in one statement
    (its own transaction) behind the fencing guard of `lease` (the lease covering the
    shard: node.py). Raises Fenced when the guard refuses (nothing written)."""
    status = await conn.execute(
        _GUARDED_INSERT,
        lease,
        node_id,
        epoch,
        resource,
        list(range(first_seq, first_seq + len(batches))),
        batches,
    )
    if status != f"INSERT 0 {len(batches)}":
        raise Fenced(f"{lease}: node {node_id} no longer holds epoch {epoch}")


async def write_snapshot(
    conn: Any, resource: str, lease: str, node_id: int, epoch: int, seq: int, data: bytes
) -> None:
    """Store `data` (batches whose replay is the shard's state as of batch `seq`) and drop
    the batches it covers, behind the fencing guard. Raises Fenced as `append`."""
    async with conn.transaction():
        await _guard(conn, lease, node_id, epoch)
        await conn.execute(_SNAPSHOT, resource, seq, data)
        await conn.execute(_TRIM, resource, seq)


async def load(conn: Any, resource: str) -> ShardImage:
    """The shard's snapshot and tail (module docstring). Read in one repeatable-read
    transaction, so a snapshot written meanwhile cannot drop the tail under the read."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        snapshot = await conn.fetchrow(_LOAD_SNAPSHOT, resource)
        snapshot_seq = -1 if snapshot is None else snapshot["seq"]
        tail = await conn.fetch(_LOAD_TAIL, resource, snapshot_seq)
    batches = [] if snapshot is None else [bytes(snapshot["data"])]
    batches.extend(bytes(row["data"]) for row in tail)
    last = tail[-1]["seq"] if tail else snapshot_seq
    return ShardImage(batches, last + 1, snapshot_seq, len(tail))

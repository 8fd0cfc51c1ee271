"""Coordinator shard records in PostgreSQL: the durable copy of each shard's log.

Theory of operation. A shard's log is the sequence of record batches its runner appends
(runtime/log_runner.py), byte for byte as the local shard log holds them. In cluster mode
each group-commit round of a node is ONE database transaction for all its shards with
something to write, one statement (`append_round`: one round trip) that first runs the
fencing guard for every shard of the round (schema.FENCED_WRITE_GUARD's condition and
lock, each shard with the lease covering it and its own epoch) and then inserts the
batches of the shards whose guard returned a row, numbered by a per-shard sequence (`seq`,
dense, growing) and tagged with the writer's lease epoch (so that "one writer at a time"
can be checked: epochs never decrease along seq). A shard whose guard returns nothing is
Fenced and none of its rows is written, while the other shards of the round commit: a
node whose lease on one shard moved can never write that shard again, and its other
shards go on.

A *snapshot* of a shard is a run of batches whose replay gives the shard's state as of
batch `seq` (the local log, compacted, read from its start), stored as ONE bytea: the
batches concatenated and compressed as one LZ4 frame (coordinator records compress about
6:1; compressed here, the database stores it as is, STORAGE EXTERNAL, and a takeover
fetches a sixth of the bytes and decompresses at memory speed instead of the database's
pglz). Writing one (also fenced) deletes the batches it covers, so a takeover loads one
snapshot plus a short tail (`load`), the batches in the order they were written, and
replays them through the runner's existing replay path (the local log rebuilt from them
in one write).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lz4.frame

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
ALTER TABLE shard_snapshots ALTER COLUMN data SET STORAGE EXTERNAL;
"""

# One statement, one round trip, one transaction for every shard of a round: the fencing
# guard (schema.py's condition and FOR SHARE lock: lease row names node $1 at the shard's
# epoch) for each shard ($2 resource, $3 its lease, $4 its epoch) as a CTE, then the rows
# of the shards whose guard returned a row ($5 resource, $6 seq, $7 data), tagged with
# their epoch. The guard's rows stay locked until the statement's transaction commits, so
# no lease moves while the round is in flight; the resources it returns are the ones
# written. The rows are locked in lease order (sorted, then locked), the order the lease
# renewal locks them in (leases.py's _RENEW): a round and a renewal of the same leases
# never lock them crosswise (a deadlock, PostgreSQL failing one of them: the renewal, so
# leases lapsed, or the round, so all its shards' commits failed).
_GUARDED_ROUND = """
WITH guard AS (
    SELECT w.resource, w.epoch FROM leases l
      JOIN unnest($2::text[], $3::text[], $4::bigint[]) AS w (resource, lease, epoch)
        ON l.resource = w.lease AND l.owner_node = $1 AND l.epoch = w.epoch
     ORDER BY l.resource
       FOR SHARE OF l
), written AS (
    INSERT INTO shard_batches (resource, seq, epoch, data)
    SELECT b.resource, b.seq, guard.epoch, b.data
      FROM unnest($5::text[], $6::bigint[], $7::bytea[]) AS b (resource, seq, data)
      JOIN guard ON guard.resource = b.resource
)
SELECT resource FROM guard
"""
_SNAPSHOT = """
INSERT INTO shard_snapshots (resource, seq, data) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET seq = EXCLUDED.seq, data = EXCLUDED.data
 WHERE shard_snapshots.seq < EXCLUDED.seq
"""
_TRIM = "DELETE FROM shard_batches WHERE resource = $1 AND seq <= $2"
_LOAD_SNAPSHOT = "SELECT seq, data FROM shard_snapshots WHERE resource = $1"
_LOAD_TAIL = "SELECT seq, data FROM shard_batches WHERE resource = $1 AND seq > $2 ORDER BY seq"


_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"


class Fenced(Exception):
    """This node no longer holds the shard's lease at the epoch it wrote with: the write was
    refused (another node owns the shard now, or will)."""


@dataclass(slots=True)
class ShardImage:
    """What a takeover loads: the snapshot (an LZ4 frame of its batches, b"" when none)
    and the tail's batches, in order, and the sequence number the next appended batch
    takes."""

    snapshot_lz4: bytes
    tail: list[bytes]
    next_seq: int
    snapshot_seq: int  # -1: no snapshot

    @property
    def tail_batches(self) -> int:
        return len(self.tail)

    def batches(self) -> bytearray:
        """The snapshot's batches then the tail's, as one buffer (a bytearray: the log
        appends it as is, stamping base offsets in place; decompressed straight into it,
        the tail added in place, a 50 MB snapshot is not copied again)."""
        snapshot = self.snapshot_lz4
        if snapshot.startswith(_LZ4_FRAME_MAGIC):
            data: bytearray = lz4.frame.decompress(snapshot, return_bytearray=True)
        else:
            # Stored as plain batches (written before snapshots were compressed; a batch
            # starts with its base offset, never that high).
            data = bytearray(snapshot)
        for batch in self.tail:
            data += batch
        return data


def compress_snapshot(batches: list[bytes]) -> bytes:
    """The stored form of a snapshot's batches (module docstring)."""
    return bytes(lz4.frame.compress(b"".join(batches)))


async def create_tables(conn: Any) -> None:
    await conn.execute(SHARD_STORE_DDL)


async def _guard(conn: Any, lease: str, node_id: int, epoch: int) -> None:
    if await conn.fetchval(FENCED_WRITE_GUARD, lease, node_id, epoch) is None:
        raise Fenced(f"{lease}: node {node_id} no longer holds epoch {epoch}")


@dataclass(slots=True)
class ShardWrite:
    """One shard's part of a round: `batches` (at least one) as `resource`'s seq
    first_seq.., fenced by `lease` (the lease covering the shard: node.py) at `epoch`."""

    resource: str
    lease: str
    epoch: int
    first_seq: int
    batches: list[bytes]


async def append_round(conn: Any, node_id: int, writes: list[ShardWrite]) -> list[bool]:
    """Write every shard's batches of a round in one statement (its own transaction), each
    shard behind its own fencing guard; returns, per write, whether it was written (False:
    its guard refused, Fenced, and nothing of it was written; the others were). Raises
    what the database raised (then nothing of the round was written)."""
    resources: list[str] = []
    row_seqs: list[int] = []
    row_data: list[bytes] = []
    for write in writes:
        count = len(write.batches)
        resources.extend([write.resource] * count)
        row_seqs.extend(range(write.first_seq, write.first_seq + count))
        row_data.extend(write.batches)
    guarded = await conn.fetch(
        _GUARDED_ROUND,
        node_id,
        [w.resource for w in writes],
        [w.lease for w in writes],
        [w.epoch for w in writes],
        resources,
        row_seqs,
        row_data,
    )
    written = {row[0] for row in guarded}
    return [w.resource in written for w in writes]


async def append(
    conn: Any,
    resource: str,
    lease: str,
    node_id: int,
    epoch: int,
    first_seq: int,
    batches: list[bytes],
) -> None:
    """`append_round` of one shard. Raises Fenced when the guard refuses (nothing
    written)."""
    write = ShardWrite(resource, lease, epoch, first_seq, batches)
    if not (await append_round(conn, node_id, [write]))[0]:
        raise Fenced(f"{lease}: node {node_id} no longer holds epoch {epoch}")


async def write_snapshot(
    conn: Any, resource: str, lease: str, node_id: int, epoch: int, seq: int, data: bytes
) -> None:
    """Store `data` (`compress_snapshot` of batches whose replay is the shard's state as of
    batch `seq`) and drop
    the batches it covers, behind the fencing guard. Raises Fenced as `append`."""
    async with conn.transaction():
        # The snapshot (megabytes) goes in before the guard locks the lease row: renewals
        # of the lease wait for that lock (up to the lock timeout, leases.py), so it is
        # held only for the trim and the commit. A refused guard rolls the snapshot back.
        await conn.execute(_SNAPSHOT, resource, seq, data)
        await _guard(conn, lease, node_id, epoch)
        await conn.execute(_TRIM, resource, seq)


async def load(conn: Any, resource: str) -> ShardImage:
    """The shard's snapshot and tail (module docstring). Read in one repeatable-read
    transaction, so a snapshot written meanwhile cannot drop the tail under the read."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        snapshot = await conn.fetchrow(_LOAD_SNAPSHOT, resource)
        snapshot_seq = -1 if snapshot is None else snapshot["seq"]
        tail = await conn.fetch(_LOAD_TAIL, resource, snapshot_seq)
    last = tail[-1]["seq"] if tail else snapshot_seq
    return ShardImage(
        b"" if snapshot is None else snapshot["data"],
        [row["data"] for row in tail],
        last + 1,
        snapshot_seq,
    )

"""The cluster's tables in PostgreSQL that every part shares: nodes and leases.

Fencing. Every shard and partition is a *resource* with one row in `leases`: its owner node,
a fencing `epoch` that grows by one each time ownership changes hands, and the time the lease
runs out (the database's clock, `now()`, so nodes' clocks never matter). A node writes state
of a resource only inside a database transaction that first locks the lease row and checks
that the row still names this node at the epoch it acquired (`FENCED_WRITE_GUARD`), so a node
that wakes up after its lease moved cannot write: its epoch is stale and the database refuses.

Resource names: `group-shard:<n>`, `txn-shard:<n>` (coordinator shards of each family) and
`partition:<topic>:<partition>` (a topic partition).
"""

from __future__ import annotations

# Applied by every node at start (idempotent). Parts that own further tables create them in
# their own modules, after this.
SCHEMA_DDL = """
CREATE TABLE IF NOT EXISTS cluster_nodes (
    node_id      integer PRIMARY KEY,
    host         text NOT NULL,
    port         integer NOT NULL,
    rack         text,
    alive_until  timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    resource     text PRIMARY KEY,
    owner_node   integer NOT NULL,
    epoch        bigint NOT NULL,
    expires_at   timestamptz NOT NULL
);
"""

# Run first inside a write's transaction, with $1 = resource, $2 = owner node, $3 = epoch:
# returns one row when the write may go on, none when this node's lease on the resource is
# stale (moved to another node, or re-acquired at a higher epoch); the row stays locked until
# the transaction ends, so the lease cannot move while the write is in flight.
FENCED_WRITE_GUARD = """
SELECT 1 FROM leases
 WHERE resource = $1 AND owner_node = $2 AND epoch = $3
   FOR SHARE
"""


def group_shard_resource(shard: int) -> str:
    return f"group-shard:{shard}"


def txn_shard_resource(shard: int) -> str:
    return f"txn-shard:{shard}"


def partition_resource(topic: str, partition: int) -> str:
    return f"partition:{topic}:{partition}"

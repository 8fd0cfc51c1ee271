"""Which node owns what: coordinator shards (groups, transactions) and topic partitions.

Theory of operation. With `serve --workers N` the nodes are N worker processes, numbered
0..N-1 in the order of their node ids; ownership is a pure function of the node count and
the shard or partition, so every worker computes the same answer without asking anyone
(nothing moves while the count is fixed: data_dir records it, server/workers.py). A
cluster whose ownership moves (leases in a database, issue 22 item 2) replaces this
`Ownership` by one reading its lease table: callers only ask `owns_shard`,
`shard_owner`, `owns_partition`, `partition_leader`.

Shards go round-robin (shard % N), as Kafka's placement of __consumer_offsets partitions
on a fresh cluster spreads them; a topic's partitions go round-robin from a start picked
by the topic's name (Kafka picks a random start per topic; a hash keeps it the same on
every worker without telling them), so one-partition topics spread over the nodes too.
The coordinators' own topics (__consumer_offsets, __transaction_state) are led by their
shard's owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .runtime.partitioning import INTERNAL_TOPIC_NAMES, java_string_hashcode


def shard_owner_index(node_count: int, shard: int) -> int:
    """The index (0..node_count-1) of the node owning coordinator shard `shard`."""
    return shard % node_count


def partition_owner_index(node_count: int, topic: str, partition: int) -> int:
    """The index of the node leading `topic`'s partition `partition`."""
    if topic in INTERNAL_TOPIC_NAMES:
        return shard_owner_index(node_count, partition)
    h = java_string_hashcode(topic)
    start = 0 if h == -(1 << 31) else abs(h)
    return (start + partition) % node_count


class OwnershipView(Protocol):
    """What callers ask of an ownership: this `Ownership`, or in cluster mode the view
    over the node's leases (cluster/lease_ownership.py)."""

    @property
    def node_id(self) -> int: ...

    def shard_owner(self, shard: int) -> int: ...

    def owns_shard(self, shard: int) -> bool: ...

    def partition_leader(self, topic: str, partition: int) -> int: ...

    def owns_partition(self, topic: str, partition: int) -> bool: ...


@dataclass(frozen=True, slots=True)
class Ownership:
    """The cluster's nodes (ids in index order) and this node's index among them."""

    node_ids: tuple[int, ...]
    index: int

    @property
    def node_id(self) -> int:
        return self.node_ids[self.index]

    def shard_owner(self, shard: int) -> int:
        """The node id owning coordinator shard `shard` (of either family)."""
        return self.node_ids[shard_owner_index(len(self.node_ids), shard)]

    def owns_shard(self, shard: int) -> bool:
        return shard_owner_index(len(self.node_ids), shard) == self.index

    def partition_leader(self, topic: str, partition: int) -> int:
        """The node id leading `topic`'s partition `partition`."""
        return self.node_ids[partition_owner_index(len(self.node_ids), topic, partition)]

    def owns_partition(self, topic: str, partition: int) -> bool:
        return partition_owner_index(len(self.node_ids), topic, partition) == self.index

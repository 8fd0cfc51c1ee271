"""The ownership view of a cluster node (ownership.py's OwnershipView over its leases).

Coordinator shard n of both families (groups' `__consumer_offsets-n`, transactions'
`__transaction_state-n`) is one lease, `group-shard:n`, as one node owns shard n of both
with `serve --workers`: FindCoordinator's answer for a transactional id and a group of the
same shard is the same node, and the transaction coordinator's work on offsets of its
shard stays local. The transaction shard's records are stored under `txn-shard:n`, fenced
by that lease (node.py).

Topic partitions: with the local partition store (this node's data directory; the store in
PostgreSQL is issue 22 item 2b's other half) every node leads every partition of the
topics it knows, as a single node does; that is the seam `partition_leader` /
`owns_partition`, which the partition store in the database replaces by `partition:t:p`
leases (node.py's PARTITION_LEASES).
"""

from __future__ import annotations

from .leases import LeaseManager
from .schema import group_shard_resource


class LeaseOwnership:
    """Who owns which shard, as this node's lease manager last saw it (`leases`, set once
    the node starts leasing; before, it owns nothing and knows no owner)."""

    def __init__(self, node_id: int) -> None:
        self._node_id = node_id
        self.leases: LeaseManager | None = None

    @property
    def node_id(self) -> int:
        return self._node_id

    def shard_owner(self, shard: int) -> int:
        """The node owning coordinator shard `shard` (of either family); -1 while nobody
        does (a takeover under way)."""
        owner = None if self.leases is None else self.leases.owner_of(group_shard_resource(shard))
        return -1 if owner is None else owner

    def owns_shard(self, shard: int) -> bool:
        leases = self.leases
        return leases is not None and leases.epoch_of(group_shard_resource(shard)) is not None

    def partition_leader(self, topic: str, partition: int) -> int:
        """This node: topic partitions are in its local store (module docstring)."""
        return self._node_id

    def owns_partition(self, topic: str, partition: int) -> bool:
        return True

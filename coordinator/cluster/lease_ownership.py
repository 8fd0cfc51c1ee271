"""The ownership view of a cluster node (ownership.py's OwnershipView over its leases).

Coordinator shard n of both families (groups' `__consumer_offsets-n`, transactions'
`__transaction_state-n`) is one lease, `group-shard:n`, as one node owns shard n of both
with `serve --workers`: FindCoordinator's answer for a transactional id and a group of the
same shard is the same node, and the transaction coordinator's work on offsets of its
shard stays local. The transaction shard's records are stored under `txn-shard:n`, fenced
by that lease (node.py).

Topic partitions: `partition:<topic>:<p>` leases (partition_leases.py); the leader is the
lease's owner (-1 while none), and this node owns a partition once it holds the lease and
loaded the partition (`serves`). Without partition leases (`serves` None) every node
leads every partition of the topics it knows (only before the node attached its topics).
"""

from __future__ import annotations

from collections.abc import Callable

from .leases import LeaseManager
from .schema import group_shard_resource, partition_resource


class LeaseOwnership:
    """Who owns which shard, as this node's lease manager last saw it (`leases`, set once
    the node starts leasing; before, it owns nothing and knows no owner)."""

    def __init__(self, node_id: int) -> None:
        self._node_id = node_id
        self.leases: LeaseManager | None = None
        # (topic, partition) -> served here now; None: every partition is (no leases).
        self.serves: Callable[[str, int], bool] | None = None

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
        """The node holding the partition's lease; -1 while nobody does (module docstring)."""
        if self.serves is None:
            return self._node_id
        leases = self.leases
        owner = None if leases is None else leases.owner_of(partition_resource(topic, partition))
        return -1 if owner is None else owner

    def owns_partition(self, topic: str, partition: int) -> bool:
        return self.serves is None or self.serves(topic, partition)

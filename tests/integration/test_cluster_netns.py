"""A cluster node cut off from the network (issue 22: "cut a node off (netns)"): three
`serve --cluster` nodes on a real PostgreSQL, node 3 in its own network namespace joined
to the host by a veth pair (tests/netns.py). Under commit and rebalance load on a group
whose shard node 3 owns, node 3's end of the pair goes down past its lease: another node
serves the group, no acknowledged commit is lost, the shard's rows show one writer at a
time (the cut node, still running, writes nothing more at its old epoch); the link comes
back: node 3 rejoins and takes a share of the shards again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.cluster_support import (
    Cluster,
    CommitLoad,
    RebalanceLoad,
    check_nothing_lost,
    running_cluster,
    same_shard_group,
    until,
)
from tests.netns import veth_namespace

pytestmark = pytest.mark.integration

CUT_NODE = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with veth_namespace() as ns, running_cluster(ns) as c:
        yield c


def group_owned_by(cluster: Cluster, node_id: int) -> str:
    return next(g for g in (f"cut-{i}" for i in range(1000)) if cluster.owner(g)[0] == node_id)


def test_node_cut_off_past_its_lease_then_reconnected(cluster: Cluster) -> None:
    ns = cluster.ns
    assert ns is not None
    cut = cluster.nodes[CUT_NODE]
    group = group_owned_by(cluster, CUT_NODE)
    commits = CommitLoad(cluster.bootstrap, group)
    rebalances = RebalanceLoad(cluster.bootstrap, same_shard_group(group, "cut-rebalancing-"))
    commits.start()
    rebalances.start()
    try:
        commits.wait_commits(20)
        until(lambda: rebalances.assignments >= 2, "rebalances before the cut")
        owner, epoch = cluster.owner(group)
        assert owner == CUT_NODE
        ns.cut()
        cut_at = time.monotonic()
        try:
            until(lambda: cluster.owner(group)[0] not in (-1, CUT_NODE), "another node taking over")
            new_owner, new_epoch = cluster.owner(group)
            assert new_epoch > epoch
            commits.wait_commits(20)
            served_again_s = commits.last_ok - cut_at
            assignments = rebalances.assignments
            until(lambda: rebalances.assignments > assignments, "a rebalance after the takeover")
            assert cut.alive()  # cut off, not dead: it stopped serving on its own
        finally:
            ns.restore()
        # Reconnected: whatever it still had in flight at its old epoch is refused by the
        # fencing guard; it rejoins under the new ownership and takes a share again.
        until(lambda: cluster.held().get(CUT_NODE, 0) >= 1, "the cut node taking a share")
        until(lambda: sorted(cluster.held().values()) == [2, 2, 2], "the shards split again")
        commits.wait_commits(20)
        print(f"group served again {served_again_s:.1f}s after cutting node {CUT_NODE} off")
    finally:
        commits.stop()
        rebalances.stop()
    # Also: the shard's rows by seq never go back to an older epoch (one writer at a time).
    check_nothing_lost(cluster, group, commits)
    assert new_owner != CUT_NODE

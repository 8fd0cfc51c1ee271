"""Three `serve --cluster` nodes on one real PostgreSQL, real processes, confluent-kafka
clients (issue 22 item 2): the nodes split the coordinator shards and list each other;
SIGKILL of the node owning a busy group's shard under commit and rebalance load: another
node serves the group again, no acknowledged commit is lost, and the shard's rows show one
writer at a time; SIGSTOP of the owner past its lease and SIGCONT: the shard moved, the
paused node writes nothing more to it and takes a share again; a restart of PostgreSQL
under load: the nodes wait, then resume, nothing acknowledged lost."""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka.admin import AdminClient

from tests.cluster_support import (
    PARTITIONS,
    Cluster,
    CommitLoad,
    Kip848Member,
    RebalanceLoad,
    check_nothing_lost,
    cluster_fixture,
    same_shard_group,
    until,
)

pytestmark = pytest.mark.integration

cluster = pytest.fixture(scope="module", name="cluster")(cluster_fixture)


def test_nodes_list_each_other_and_answer_for_their_shards(cluster: Cluster) -> None:
    for node in cluster.nodes.values():
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        brokers = admin.list_topics(timeout=30).brokers
        assert sorted((b.id, b.port) for b in brokers.values()) == sorted(
            (i, n.port) for i, n in cluster.nodes.items()
        )
    # A commit through any bootstrap node reaches the shard's owner and is readable back.
    load = CommitLoad(cluster.nodes[1].bootstrap, "listing")
    load.start()
    try:
        load.wait_commits(20)
    finally:
        load.stop()
    check_nothing_lost(cluster, "listing", load)


def test_sigkill_of_the_owner_under_commit_and_rebalance_load(cluster: Cluster) -> None:
    group = "busy"
    commits = CommitLoad(cluster.bootstrap, group)
    rebalances = RebalanceLoad(cluster.bootstrap, same_shard_group(group, "rebalancing-"))
    member = Kip848Member(cluster.bootstrap, same_shard_group(group, "kip848-"))
    commits.start()
    rebalances.start()
    member.start()
    try:
        commits.wait_commits(50)
        until(lambda: rebalances.assignments >= 2, "rebalances before the kill")
        until(lambda: member.commits_ok >= 2, "the KIP-848 member committing")
        owner, epoch = cluster.owner(group)
        victim = cluster.nodes[owner]
        victim.kill()
        killed = time.monotonic()
        until(lambda: cluster.owner(group)[0] not in (-1, owner), "another node taking over")
        new_owner, new_epoch = cluster.owner(group)
        assert new_epoch > epoch
        commits.wait_commits(50)
        served_again_s = commits.last_ok - killed
        assignments = rebalances.assignments
        until(lambda: rebalances.assignments > assignments, "a rebalance after the takeover")
        # The KIP-848 member goes on at its epoch on the new coordinator: its commits
        # (checked against its member id and epoch) are taken without a rejoin.
        ok = member.commits_ok
        until(lambda: member.commits_ok >= ok + 2, "the KIP-848 member committing again")
        assert member.epochs_lost == 0
        assert len(member.assigned) == PARTITIONS  # assigned once, never revoked
        print(f"group served again {served_again_s:.1f}s after SIGKILL of node {owner}")
    finally:
        commits.stop()
        rebalances.stop()
        member.stop()
    check_nothing_lost(cluster, group, commits)
    victim.start()  # it rejoins: the shards are split again
    until(lambda: sorted(cluster.held().values()) == [2, 2, 2], "the shards split again")


def test_sigstop_past_the_lease_then_sigcont(cluster: Cluster) -> None:
    group = "paused"
    commits = CommitLoad(cluster.bootstrap, group)
    commits.start()
    try:
        commits.wait_commits(30)
        owner, _ = cluster.owner(group)
        paused = cluster.nodes[owner]
        assert paused.proc is not None
        os.killpg(paused.proc.pid, signal.SIGSTOP)
        try:
            until(lambda: cluster.owner(group)[0] not in (-1, owner), "the shard moving away")
            commits.wait_commits(30)
        finally:
            os.killpg(paused.proc.pid, signal.SIGCONT)
        # Awake: it lost its leases, writes nothing more at its old epoch, and rejoins
        # under the new ownership, taking a share again.
        until(lambda: cluster.held().get(owner, 0) >= 1, "the paused node taking a share")
        until(lambda: sorted(cluster.held().values()) == [2, 2, 2], "the shards split again")
        commits.wait_commits(30)
    finally:
        commits.stop()
    check_nothing_lost(cluster, group, commits)


def test_postgres_restart_under_load(cluster: Cluster) -> None:
    group = "through-restart"
    commits = CommitLoad(cluster.bootstrap, group)
    commits.start()
    try:
        commits.wait_commits(30)
        cluster.pg.restart()
        commits.wait_commits(30)  # the nodes resumed
    finally:
        commits.stop()
    check_nothing_lost(cluster, group, commits)
    until(lambda: sorted(cluster.held().values()) == [2, 2, 2], "the shards split again")
    assert all(node.alive() for node in cluster.nodes.values())

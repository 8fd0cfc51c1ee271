"""Group-coordinator metrics with Kafka's names and meaning (group-coordinator-metrics),
read from the shards at scrape time: nothing on the request path pays for them except
the histograms the runtime observes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

CLASSIC_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")


class ShardStats(Protocol):
    """What a shard reports (groups/shard.py's ShardStats)."""

    @property
    def classic_groups(self) -> Mapping[str, int]: ...  # by state
    @property
    def consumer_groups(self) -> Mapping[str, int]: ...  # by state
    @property
    def offsets(self) -> int: ...
    @property
    def consumer_rebalances(self) -> int: ...
    @property
    def completed_rebalances(self) -> int: ...
    @property
    def classic_rebalances(self) -> Mapping[str, int]: ...  # by the state left
    @property
    def commits(self) -> int: ...
    @property
    def expirations(self) -> int: ...
    @property
    def deletions(self) -> int: ...


class CoordinatorCollector(Collector):
    def __init__(self, shard_stats: Callable[[], Iterable[tuple[str, ShardStats]]]) -> None:
        """`shard_stats()`: each shard's state ("loading", "active", ...) and counts
        (CoordinatorService.shard_stats)."""
        self.shard_stats = shard_stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        states: Counter[str] = Counter()
        consumer_states: Counter[str] = Counter()
        offsets = 0
        counters: Counter[str] = Counter()
        partitions: Counter[str] = Counter()
        rebalances_from: Counter[str] = Counter()
        for state, stats in self.shard_stats():
            rebalances_from.update(stats.classic_rebalances)
            partitions[state] += 1
            states.update(stats.classic_groups)
            consumer_states.update(stats.consumer_groups)
            counters["consumer_rebalances"] += stats.consumer_rebalances
            offsets += stats.offsets
            counters["completed_rebalances"] += stats.completed_rebalances
            counters["commits"] += stats.commits
            counters["expirations"] += stats.expirations
            counters["deletions"] += stats.deletions
        groups = GaugeMetricFamily(
            "groupcoord_group_count", "Groups by protocol", labels=["protocol"]
        )
        groups.add_metric(["classic"], sum(states.values()))
        groups.add_metric(["consumer"], sum(consumer_states.values()))
        yield groups
        classic = GaugeMetricFamily(
            "groupcoord_classic_group_count", "Classic groups by state", labels=["state"]
        )
        for state in CLASSIC_STATES:
            classic.add_metric([state], states.get(state, 0))
        yield classic
        consumer = GaugeMetricFamily(
            "groupcoord_consumer_group_count",
            "Consumer (KIP-848) groups by state",
            labels=["state"],
        )
        for state in CONSUMER_STATES:
            consumer.add_metric([state], consumer_states.get(state, 0))
        yield consumer
        yield CounterMetricFamily(
            "groupcoord_consumer_group_rebalances",
            "Consumer-group epoch bumps from heartbeats (consumer-group-rebalance-count)",
            value=counters["consumer_rebalances"],
        )
        yield GaugeMetricFamily(
            "groupcoord_offset_count", "Committed offsets stored", value=offsets
        )
        shards = GaugeMetricFamily(
            "groupcoord_coordinator_partitions",
            "Coordinator shards by state (num-partitions)",
            labels=["state"],
        )
        for state in ("loading", "active", "failed"):
            shards.add_metric([state], partitions.get(state, 0))
        yield shards
        yield CounterMetricFamily(
            "groupcoord_group_completed_rebalances",
            "Classic rebalances completed: the leader's assignment written, the group Stable"
            " (group-completed-rebalance-count)",
            value=counters["completed_rebalances"],
        )
        started = CounterMetricFamily(
            "groupcoord_classic_group_rebalances",
            "Classic rebalances started, by the state the group was in (Empty: its first"
            " members; Stable or CompletingRebalance: a member came, went or changed)",
            labels=["state"],
        )
        for state in sorted({"Empty", "Stable", "CompletingRebalance", *rebalances_from}):
            started.add_metric([state], rebalances_from.get(state, 0))
        yield started
        yield CounterMetricFamily(
            "groupcoord_offset_commits",
            "Offsets committed (per partition)",
            value=counters["commits"],
        )
        yield CounterMetricFamily(
            "groupcoord_offset_expirations", "Offsets expired", value=counters["expirations"]
        )
        yield CounterMetricFamily(
            "groupcoord_offset_deletions",
            "Offsets deleted (OffsetDelete)",
            value=counters["deletions"],
        )

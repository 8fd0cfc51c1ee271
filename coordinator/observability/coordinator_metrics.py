"""Group-coordinator metrics with Kafka's names and meaning (group-coordinator-metrics),
read from the shards at scrape time: nothing on the request path pays for them except
the histograms the runtime observes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..runtime.service import CoordinatorService

CLASSIC_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
CONSUMER_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")


class CoordinatorCollector(Collector):
    def __init__(self, service: CoordinatorService) -> None:
        self.service = service

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        runners = self.service.runners
        states: Counter[str] = Counter()
        consumer_states: Counter[str] = Counter()
        offsets = 0
        counters: Counter[str] = Counter()
        partitions: Counter[str] = Counter()
        for runner in runners:
            partitions[runner.state.value] += 1
            shard = runner.shard
            for group in shard.groups.values():
                states[group.state.value] += 1
            for consumer_group in shard.consumer_groups.values():
                consumer_states[consumer_group.state().value] += 1
            counters["consumer_rebalances"] += shard.consumer.rebalances
            offsets += shard.offsets.offset_count()
            for name in ("completed_rebalances",):
                counters[name] += getattr(shard.classic, name, 0)
            for name in ("commits", "expirations", "deletions"):
                counters[name] += getattr(shard.offsets, name, 0)
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
            "Classic rebalances completed (transitions to Stable)",
            value=counters["completed_rebalances"],
        )
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

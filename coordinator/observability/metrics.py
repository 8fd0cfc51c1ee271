"""Prometheus metrics of the server. One registry per server instance, so tests that run
several servers in one process do not collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "groupcoord_requests",
            "Requests answered, by API, version and top-level error",
            ["api", "version", "error"],
            registry=r,
        )
        self.request_latency = Histogram(
            "groupcoord_request_latency_seconds",
            "Time from a request's arrival to its response being written, by API",
            ["api"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.bytes_in = Counter("groupcoord_network_in_bytes", "Request bytes received", registry=r)
        self.bytes_out = Counter("groupcoord_network_out_bytes", "Response bytes sent", registry=r)
        self.connections = Gauge("groupcoord_connections", "Open client connections", registry=r)
        self.connection_errors = Counter(
            "groupcoord_connection_errors",
            "Connections closed because of bad input, by reason",
            ["reason"],
            registry=r,
        )
        self.log_size = Gauge(
            "groupcoord_log_size_bytes", "Bytes stored per topic", ["topic"], registry=r
        )
        self.log_partitions = Gauge("groupcoord_partitions", "Partitions served", registry=r)
        self.produced_records = Counter(
            "groupcoord_produced_records", "Records appended by Produce", ["topic"], registry=r
        )
        self.event_processing = Histogram(
            "groupcoord_coordinator_event_processing_seconds",
            "Time a coordinator event (request or timer) ran on its shard",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.event_purgatory = Histogram(
            "groupcoord_coordinator_event_purgatory_seconds",
            "Time coordinator replies waited for their records to be durable",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.partition_load = Histogram(
            "groupcoord_coordinator_partition_load_seconds",
            "Time to load a coordinator shard from its log",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.flush_latency = Histogram(
            "groupcoord_log_flush_seconds",
            "Time a Produce waited for its group-commit fsync",
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )

"""Prometheus metrics of the server. One registry per server instance, so tests that run
several servers in one process do not collide. The standard process and platform
collectors are registered in it; counters export no `_created` series (a timestamp per
counter and label set that no dashboard reads, doubling the scrape).

`name_labels` False (metrics_name_labels): the series labelled by a topic (or a log, whose
name is a topic's) are made without that label, and their `labels(name)` is the one
unlabelled child, so every name's updates add up in it (the callers stay as they are)."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from .fast_metrics import FastCounter, FastHistogram

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


def build_version() -> str:
    """The installed groupcoord's version ("unknown" when run from a checkout that is not
    installed)."""
    try:
        return version("groupcoord")
    except PackageNotFoundError:
        return "unknown"


class _Unlabelled:
    """A metric made without its name label: `labels(...)` is its one child."""

    __slots__ = ("child",)

    def __init__(self, metric: Any) -> None:
        self.child = metric  # prometheus_client: a metric without labels is its own child

    def labels(self, *_names: str) -> Any:
        return self.child


def _named(metric_type: Any, name: str, help_text: str, label: str, names: bool, r: Any) -> Any:
    """A metric labelled by `label` (a topic's or log's name), or without it (summed)."""
    if names:
        return metric_type(name, help_text, [label], registry=r)
    return _Unlabelled(
        metric_type(name, help_text + f" (all {label}s: metrics_name_labels off)", [], registry=r)
    )


class ServerMetrics:
    def __init__(self, name_labels: bool = True) -> None:
        """`name_labels`: metrics_name_labels (see the module docstring)."""
        self.name_labels = name_labels
        # Process-wide in prometheus_client: every counter made from here on.
        disable_created_metrics()
        # Labelled children cached by (api, version, error): looking labels up costs more
        # than the increment on the hot path.
        self._request_children: dict[tuple[int, int, int], tuple[Any, Any]] = {}
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        build = Gauge(
            "groupcoord_build_info",
            "The server's build: version and Python (always 1)",
            ["version", "python"],
            registry=r,
        )
        build.labels(build_version(), platform.python_version()).set(1)
        self.requests = FastCounter(
            "groupcoord_requests",
            "Requests answered, by API, version and top-level error (code and name)",
            ["api", "version", "error", "error_name"],
        )
        r.register(self.requests)
        self.request_latency = FastHistogram(
            "groupcoord_request_latency_seconds",
            "Time from a request's arrival to its response being written, by API",
            ["api"],
            LATENCY_BUCKETS_S,
        )
        r.register(self.request_latency)
        # Updated per read and per write: lock-free counters (fast_metrics.py).
        network_in = FastCounter("groupcoord_network_in_bytes", "Request bytes received", [])
        network_out = FastCounter("groupcoord_network_out_bytes", "Response bytes sent", [])
        r.register(network_in)
        r.register(network_out)
        self.bytes_in = network_in.labels()
        self.bytes_out = network_out.labels()
        self.connections = Gauge("groupcoord_connections", "Open client connections", registry=r)
        self.connection_errors = Counter(
            "groupcoord_connection_errors",
            "Connections refused or closed by the server (bad input, limits, deadlines), by reason",
            ["reason"],
            registry=r,
        )
        self.queued_bytes = Gauge(
            "groupcoord_queued_request_bytes",
            "Bytes held in partly received frames and unsent responses "
            "(capped by queued_request_bytes_max)",
            registry=r,
        )
        self.failed_authentications = Counter(
            "groupcoord_failed_authentication",
            "Failed SASL authentications and re-authentications, by listener (Kafka's "
            "failed-authentication-total)",
            ["listener"],
            registry=r,
        )
        self.authentications = Counter(
            "groupcoord_successful_authentication",
            "Completed SASL authentications, by listener, mechanism and kind "
            "(authenticated, reauthenticated)",
            ["listener", "mechanism", "kind"],
            registry=r,
        )
        self.authorization_denials = Counter(
            "groupcoord_authorization_denials",
            "Authorization checks the ACL authorizer denied, by API and resource type"
            " (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID); resources hidden from listings"
            " (Metadata of all topics, ListGroups) are not counted",
            ["api", "resource_type"],
            registry=r,
        )
        self.accept_failures = Counter(
            "groupcoord_accept_failures",
            "Failed accepts of new connections, by error (EMFILE: out of file descriptors)",
            ["error"],
            registry=r,
        )
        self.log_size = _named(
            Gauge, "groupcoord_log_size_bytes", "Bytes stored per topic", "topic", name_labels, r
        )
        self.log_partitions = Gauge("groupcoord_partitions", "Partitions served", registry=r)
        self.storage_corrupt_batches = _named(
            Counter,
            "groupcoord_storage_corrupt_batches",
            "Stored batches found damaged (failing their CRC-32C, length or offset checks),"
            " by log (topic-partition or coordinator shard log)",
            "log",
            name_labels,
            r,
        )
        self.produced_records = _named(
            Counter,
            "groupcoord_produced_records",
            "Records appended by Produce",
            "topic",
            name_labels,
            r,
        )
        # Observed on every coordinator event, batch or round: lock-free (fast_metrics.py).
        self.event_queue = _seconds_histogram(
            r,
            "groupcoord_coordinator_event_queue_seconds",
            "Time a coordinator event waited before it ran on its shard: a request from the"
            " read that brought it, a timer from its due time",
        )
        self.event_processing = _seconds_histogram(
            r,
            "groupcoord_coordinator_event_processing_seconds",
            "Time a coordinator event (request or timer) ran on its shard",
        )
        self.event_purgatory = _seconds_histogram(
            r,
            "groupcoord_coordinator_event_purgatory_seconds",
            "Time coordinator replies waited for their records to be durable",
        )
        self.batch_linger = _seconds_histogram(
            r,
            "groupcoord_coordinator_batch_linger_seconds",
            "Time from a coordinator batch's first record to its write (batch-linger-time-ms)",
        )
        self.batch_flush = _seconds_histogram(
            r,
            "groupcoord_coordinator_batch_flush_seconds",
            "Time a coordinator shard took to write a batch of records to its log",
        )
        self.sync_round = _seconds_histogram(
            r,
            "groupcoord_log_sync_round_seconds",
            "Time a group-commit round took to make its logs durable (one fsync or syncfs"
            " call covering every log written since the round before)",
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

    def authorization_denied(self, api: str, resource_type: str) -> None:
        """Count one denied authorization check (security/denials.py logs it)."""
        self.authorization_denials.labels(api, resource_type).inc()

    def accept_failures_by_error(self, error: str) -> None:
        self.accept_failures.labels(error).inc()

    def request_children(self, api_key: int, version: int, error: int) -> tuple[Any, Any]:
        """The (requests counter, latency histogram) children for one kind of answer."""
        key = (api_key, version, error)
        children = self._request_children.get(key)
        if children is None:
            name = api_name(api_key)
            children = (
                self.requests.labels(name, str(version), str(error), error_name(error)),
                self.request_latency.labels(name),
            )
            self._request_children[key] = children
        return children


def _seconds_histogram(registry: CollectorRegistry, name: str, documentation: str) -> Any:
    """A FastHistogram without labels, registered; returns the child to observe."""
    histogram = FastHistogram(name, documentation, [], LATENCY_BUCKETS_S)
    registry.register(histogram)
    return histogram.labels()


def error_name(code: int) -> str:
    from groupcoord.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return "UNKNOWN"


def api_name(api_key: int) -> str:
    from groupcoord.protocol.api import ApiKey

    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)

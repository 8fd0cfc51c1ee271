"""deploy/'s Prometheus alert rules and Grafana dashboard against a real server's /metrics:
after some activity (a topic, a produce, a classic group that consumes and commits), every
metric they name is exported (as a series, or as a declared family whose labelled series
appear once counted), every label they match on or group by is one that metric has, and
every literal label value they match is one the server can write. Exceptions:
tests/deploy_support.NOT_FROM_THE_SERVER."""

from __future__ import annotations

import re
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from groupcoord.coordinator.observability.lag_status import PartitionStatus
from groupcoord.protocol.api import ApiKey
from groupcoord.protocol.errors import ErrorCode
from tests.deploy_support import (
    NOT_FROM_THE_SERVER,
    TARGET_LABELS,
    alert_exprs,
    dashboard_exprs,
    matchers,
    metric_names,
)
from tests.integration.test_clients import create_topic
from tests.support import ServerProcess, serving

_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("_count", "_sum"),
}
# Label values a series may carry that one server run need not show: every API and error.
_KNOWN_VALUES = {
    "api": {k.name for k in ApiKey},
    "error_name": {e.name for e in ErrorCode},
    "error": {str(int(e)) for e in ErrorCode},
    "status": {s.name for s in PartitionStatus},
}
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def _activity(server: ServerProcess) -> None:
    """A topic, a produce, and a classic group that consumes it and commits."""
    create_topic(server.bootstrap, "deployed", 2)
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(20):
        producer.produce("deployed", value=b"x", partition=i % 2)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "deployed-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe(["deployed"])
        got, deadline = 0, time.monotonic() + 60
        while got < 20 and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == 20
        assert consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _exported(text: str) -> tuple[set[str], dict[str, dict[str, set[str]]]]:
    """Every sample name /metrics can hold, and per sample name its labels and their values
    (for families declared without a series yet: the names their type gives, no labels)."""
    names: set[str] = set()
    labels: dict[str, dict[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + s for s in _SUFFIXES.get(family.type, ()))
        for sample in family.samples:
            names.add(sample.name)
            seen = labels.setdefault(sample.name, {})
            for label, value in sample.labels.items():
                seen.setdefault(label, set()).add(value)
    return names, labels


def _problems(exprs: list[str], text: str, where: str) -> list[str]:
    names, labels = _exported(text)
    problems = []
    for expr in exprs:
        used = metric_names(expr)
        assert used, f"{where}: no metric found in {expr!r}"
        for name in sorted(used - names - NOT_FROM_THE_SERVER):
            problems.append(f"{name} (in {expr.strip()!r}) is not in /metrics")
        # Labels grouped by must be on one of the expression's metrics (when it has series).
        known = [labels[n] for n in used if n in labels]
        if known and not used & NOT_FROM_THE_SERVER:
            have = set().union(*known) | TARGET_LABELS | {"le"}
            for clause in _GROUPING.findall(expr):
                for label in filter(None, (s.strip() for s in clause.split(","))):
                    if label not in have:
                        problems.append(
                            f"label {label!r} (in {expr.strip()!r}) is on none of {sorted(used)}"
                        )
        for name, label, op, value in matchers(expr):
            if name in NOT_FROM_THE_SERVER or label in TARGET_LABELS or name not in labels:
                continue
            if label not in labels[name]:
                problems.append(f"{name} has no label {label!r} (in {expr.strip()!r})")
                continue
            if value.startswith("$") or not re.fullmatch(r"\w+(\|\w+)*", value):
                continue
            allowed = labels[name][label] | _KNOWN_VALUES.get(label, set())
            for one in value.split("|"):
                if one not in allowed:
                    problems.append(f"{name}{{{label}{op}...}}: value {one!r} never exported")
    return [f"{where}: {problem}" for problem in problems]


def test_alert_rules_and_dashboard_use_only_exported_metrics(tmp_path: Path) -> None:
    with serving(tmp_path / "data") as server:
        _activity(server)
        text = server.metrics_text()
    assert "groupcoord_offset_commits_total 2.0" in text  # the activity did happen
    problems = _problems(alert_exprs(), text, "deploy/prometheus/alerts.yml")
    problems += _problems(dashboard_exprs(), text, "deploy/grafana/groupcoord.json")
    assert not problems, "\n".join(problems)

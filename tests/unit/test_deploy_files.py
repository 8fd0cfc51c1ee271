"""deploy/ checked as its consumers would: the alert rules by `promtool check rules` and
`promtool test rules` (Debian's prometheus package; .ci/run installs it), Prometheus's
configuration by `promtool check config`, the Kubernetes manifests against the Kubernetes
API schemas (kubernetes-validate: the schemas ship inside the package, strict mode refuses
unknown fields) plus what the schemas cannot say (the probes, the advertised listener the
server accepts), the compose file binding every port to 127.0.0.1 and mounting files that
exist, the dashboard's structure. The metric names they use are checked against a real
server in tests/integration/test_deploy_metrics.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from groupcoord.coordinator.config import ENV_PREFIX, check_advertised, load_config
from tests.deploy_support import ALERTS, DASHBOARD, DEPLOY, matchers, metric_names

KUBERNETES = DEPLOY / "kubernetes"
# The oldest Kubernetes release still commonly run, and the newest the package knows.
KUBERNETES_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())


def _promtool() -> str:
    found = shutil.which("promtool")
    assert found, (
        "promtool is missing: install Debian's prometheus package (apt-get install prometheus;"
        " .ci/run does it when promtool is absent)"
    )
    return found


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_promtool_checks_the_alert_rules() -> None:
    out = _run(_promtool(), "check", "rules", str(ALERTS))
    assert re.search(r"SUCCESS: \d+ rules found", out), out


def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    # The check above can fail: the same file with one expression broken is refused.
    broken = tmp_path / "alerts.yml"
    broken.write_text(ALERTS.read_text().replace("groupcoord_storage_healthy == 0", "sum by ("))
    done = subprocess.run(
        [_promtool(), "check", "rules", str(broken)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0


def test_promtool_checks_the_prometheus_config(tmp_path: Path) -> None:
    config: dict[str, Any] = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    # compose.yaml mounts alerts.yml at the path the config names: point it at the file here.
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    config["rule_files"] = [str(ALERTS)]
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(config))
    _run(_promtool(), "check", "config", str(copy))


_RULE_TESTS = """
rule_files: [{alerts}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'groupcoord_storage_healthy{{instance="a"}}'
        values: '1 1 0 0 0 0'
      - series: 'groupcoord_coordinator_partitions{{instance="a",state="failed"}}'
        values: '0 0 0 2 2 2'
      - series: 'groupcoord_classic_group_rebalances_total{{instance="a",state="Stable"}}'
        values: '0+20x30'
      - series: 'groupcoord_consumer_group_rebalances_total{{instance="a"}}'
        values: '0x30'
      - series: 'groupcoord_group_lag_records{{instance="a",group="g",topic="t",partition="0"}}'
        values: '10+10x40'
      - series: 'groupcoord_group_lag_records{{instance="a",group="s",topic="t",partition="0"}}'
        values: '50x40'
      - series: 'groupcoord_group_status{{instance="a",group="s"}}'
        values: '1 1 3x20'
      - series: 'groupcoord_group_status{{instance="a",group="g"}}'
        values: '1 2x20'
    alert_rule_test:
      - eval_time: 5m
        alertname: GroupcoordStorageUnhealthy
        exp_alerts:
          - exp_labels: {{severity: critical, instance: a}}
            exp_annotations:
              summary: 'groupcoord a: a log cannot be written (full disk, I/O error);
                /health says which'
      - eval_time: 5m
        alertname: GroupcoordCoordinatorLoadFailed
        exp_alerts:
          - exp_labels: {{severity: critical, instance: a, state: failed}}
            exp_annotations: {{summary: 'groupcoord a: 2 coordinator shards failed to load'}}
      - eval_time: 25m
        alertname: GroupcoordRebalanceStorm
        exp_alerts:
          - exp_labels: {{severity: warning, instance: a}}
            exp_annotations: {{summary: 'groupcoord a: 200 rebalances in 10 minutes'}}
      - eval_time: 35m
        alertname: GroupcoordGroupLagGrowing
        exp_alerts:
          - exp_labels: {{severity: warning, instance: a, group: g}}
            exp_annotations: {{summary: 'group g: lag grew by 150 records in 15 minutes'}}
      - eval_time: 15m
        alertname: GroupcoordGroupNotConsuming
        exp_alerts:
          - exp_labels: {{severity: warning, instance: a, group: s}}
            exp_annotations:
              summary: 'group s: Burrow status ERROR for 10 minutes (a partition stopped,
                stalled or rewound)'
      - eval_time: 35m
        alertname: GroupcoordGroupStalled
        exp_alerts:
          - exp_labels: {{severity: warning, instance: a, group: s}}
            exp_annotations:
              summary: 'group s: 50 records behind and not moving for 30 minutes'
"""


def test_alert_rules_fire_on_the_series_they_watch(tmp_path: Path) -> None:
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(_RULE_TESTS.format(alerts=json.dumps(str(ALERTS))))
    _run(_promtool(), "test", "rules", str(tests))


def test_promql_names_are_read_loosely_but_correctly() -> None:
    expr = (
        'sum by (api, le) (rate(groupcoord_x_bucket{a="b(c) d",e!~"$v"}[$__rate_interval]))'
        " / on (api) group_left max_over_time(other:recorded[5m]) > 1e3 and bool up"
    )
    assert metric_names(expr) == {"groupcoord_x_bucket", "other:recorded", "up"}
    assert matchers(expr) == [
        ("groupcoord_x_bucket", "a", "=", "b(c) d"),
        ("groupcoord_x_bucket", "e", "!~", "$v"),
    ]


def _manifests() -> list[dict[str, Any]]:
    docs = [
        doc
        for path in sorted(KUBERNETES.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]
    assert {d["kind"] for d in docs} == {"StatefulSet", "Service"}
    return docs


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kubernetes_manifests_validate_against_the_schemas(version: str) -> None:
    for doc in _manifests():
        kubernetes_validate.validate(doc, version, strict=True)


def test_kubernetes_schema_check_can_fail() -> None:
    (sts,) = [d for d in _manifests() if d["kind"] == "StatefulSet"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")  # a misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, KUBERNETES_VERSIONS[-1], strict=True)


def _env(container: dict[str, Any], pod: str, namespace: str) -> dict[str, str]:
    """The container's environment as Kubernetes makes it: fieldRefs filled, $(VAR) expanded
    from variables defined before it."""
    env: dict[str, str] = {}
    fields = {"metadata.name": pod, "metadata.namespace": namespace}
    for var in container["env"]:
        if "valueFrom" in var:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], var["value"])
    return env


def test_statefulset_probes_volume_and_advertised_listener() -> None:
    docs = _manifests()
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    headless = services[sts["spec"]["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    pod = sts["spec"]["template"]
    for service in services.values():
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for service in services.values():
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports.keys()
    # The data directory is the claim template's volume.
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = _env(container, "groupcoord-0", "kafka")
    assert mounts[claim["metadata"]["name"]] == env[ENV_PREFIX + "DATA_DIR"]
    # Every probe asks /health on the port the server serves its HTTP endpoints on.
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/health"
        assert ports[get["port"]] == int(env[ENV_PREFIX + "METRICS_LISTEN"].rsplit(":", 1)[1])
    # The server takes this environment (no unknown GROUPCOORD_* variable) and advertises
    # the pod's stable DNS name under the headless Service, never 0.0.0.0.
    config = load_config(environ=env)
    check_advertised(config)
    assert config.advertised_address == (
        f"groupcoord-0.{headless['metadata']['name']}.kafka.svc.cluster.local",
        ports["kafka"],
    )


def test_compose_binds_loopback_and_mounts_existing_files() -> None:
    compose: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert {"groupcoord", "prometheus", "grafana"} <= services.keys()
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: port {port} not on 127.0.0.1"
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
    mounts = [v.split(":")[:2] for v in services["prometheus"]["volumes"]]
    assert ["./prometheus/alerts.yml", "/etc/prometheus/alerts.yml"] in mounts
    grafana = [v.split(":")[:2] for v in services["grafana"]["volumes"]]
    provider = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "dashboards" / "groupcoord.yaml").read_text()
    )
    folder = provider["providers"][0]["options"]["path"]
    assert ["./grafana/groupcoord.json", f"{folder}/groupcoord.json"] in grafana


def test_dashboard_structure() -> None:
    dash = json.loads(DASHBOARD.read_text())
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    queries = [p for p in panels if p["type"] != "row"]
    assert queries
    for panel in queries:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert metric_names(target["expr"]), (panel["title"], target["expr"])
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance"} <= variables

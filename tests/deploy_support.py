"""What deploy/'s Prometheus rules and Grafana dashboard ask of /metrics: the metric names
and label matchers in their PromQL, read loosely (no PromQL parser: strings, label matchers,
ranges and grouping clauses are cut out, then every identifier that is not a function call,
a keyword or a variable is a metric name)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "groupcoord.json"

# Names the deploy files may use that a groupcoord server does not export: `up` is written
# by Prometheus for every scrape.
NOT_FROM_THE_SERVER = {"up"}
# Labels Prometheus adds to every series it scrapes.
TARGET_LABELS = {"instance", "job"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "atan2",
}
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^{}]*)\}")
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects."""
    text = _RANGE.sub("", _MATCHERS.sub("", _STRING.sub('""', expr)))
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        before = text[match.start() - 1] if match.start() else " "
        if before in "$.0123456789" or match.group().lower() in _KEYWORDS:
            continue  # a Grafana variable, a number's exponent, a keyword
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function
        names.add(match.group())
    return names


def matchers(expr: str) -> list[tuple[str, str, str, str]]:
    """(metric, label, operator, value) of each label matcher of a selector with a name."""
    return [
        (name, label, op, value)
        for name, body in _SELECTOR.findall(expr)
        for label, op, value in _MATCHER.findall(body)
    ]


def alert_exprs() -> list[str]:
    rules: dict[str, Any] = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    """Every panel query, and the metric of each label_values() variable query."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found = re.fullmatch(r"label_values\(\s*([^,]+?)\s*,\s*\w+\s*\)", query)
            assert found, f"variable {var['name']}: query {query!r} not label_values(metric, label)"
            exprs.append(found.group(1))
    return exprs

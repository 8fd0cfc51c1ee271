"""`groups timeline GROUP`: the coordinator's rebalance timeline of a group, read from the
server's HTTP port (GET /api/groups/<group>/timeline; ours only, Kafka has no such thing)."""

from __future__ import annotations

import datetime
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .kafka_client import split_address
from .output import MISSING, kafka_table

DEFAULT_HTTP_PORT = 9464  # metrics_listen's default port


def http_address(http: str | None, bootstrap: str) -> str:
    """--http, or the bootstrap server's host with the default HTTP port."""
    if http:
        return http
    host, _ = split_address(bootstrap)
    return f"[{host}]:{DEFAULT_HTTP_PORT}" if ":" in host else f"{host}:{DEFAULT_HTTP_PORT}"


class TimelineNotFound(Exception):
    pass


def fetch(http: str, group: str, timeout_s: float, token: str | None = None) -> dict[str, Any]:
    """The timeline's JSON; TimelineNotFound on 404 (an unknown group), OSError when the
    server cannot be reached (or refuses: 401 without the bearer `token` it requires).
    `http`: HOST:PORT, or a URL's scheme and authority (https://HOST:PORT)."""
    base = http if http.startswith(("http://", "https://")) else f"http://{http}"
    url = f"{base}/api/groups/{urllib.parse.quote(group, safe='')}/timeline"
    target: str | urllib.request.Request = url
    if token is not None:
        target = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as response:
            data: dict[str, Any] = json.loads(response.read().decode())
            return data
    except urllib.error.HTTPError as e:
        try:
            detail = json.loads(e.read().decode()).get("error", "")
        except (ValueError, AttributeError):
            detail = ""
        if e.code == 404:
            raise TimelineNotFound(detail or f"group {group!r} not found") from None
        raise OSError(f"{url}: HTTP {e.code} {detail}".strip()) from None


def _time(ms: int) -> str:
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _details(details: dict[str, Any] | None) -> str:
    if not details:
        return MISSING
    return " ".join(
        f"{k}={json.dumps(v, separators=(',', ':')) if not isinstance(v, str) else v}"
        for k, v in details.items()
    )


def rows(timeline: dict[str, Any]) -> list[list[object]]:
    return [
        [
            _time(int(e["time_ms"])),
            e["event"],
            e.get("generation_or_epoch"),
            e.get("member_id"),
            e.get("cause") or None,
            _details(e.get("details")),
        ]
        for e in timeline.get("events", [])
    ]


HEADER = ("TIME", "EVENT", "EPOCH", "MEMBER-ID", "CAUSE", "DETAILS")


def print_table(timeline: dict[str, Any]) -> None:
    kafka_table(HEADER, rows(timeline), (24, None, 10, None, None, None))

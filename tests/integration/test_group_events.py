"""Group events (coordinator/groups/events.py) caused by real clients: one INFO log line
each in the server's log, and the rebalance timeline served at
GET /api/groups/<group>/timeline, rebuilt from the log after a SIGKILL.

Members are killed for real (a consumer process SIGKILLed: no LeaveGroup, its session
expires), bounced (a static member restarted with its instance id), and groups and offsets
are deleted and reset by confluent-kafka's AdminClient."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from tests.integration.test_clients import create_topic
from tests.support import ROOT, ServerProcess, serving

PARTITIONS = 4


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with serving(
        tmp_path / "data",
        group_initial_rebalance_delay_ms=0,
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_session_timeout_ms=6000,
        group_consumer_assignment_interval_ms=0,
    ) as proc:
        yield proc


def timeline(server: ServerProcess, group: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{server.metrics_port}/api/groups/{urllib.parse.quote(group)}/timeline"
    with urllib.request.urlopen(url, timeout=5) as r:
        answer = json.loads(r.read())
    assert answer["group"] == group
    events: list[dict[str, Any]] = answer["events"]
    return events


def group_lines(server: ServerProcess, group: str | None = None) -> list[dict[str, Any]]:
    """The server log's group event lines (of `group`), oldest first."""
    lines = []
    for text in server.log_path.read_text(errors="replace").splitlines():
        if '"group event"' not in text:
            continue
        line = json.loads(text)
        if line.get("event") == "group event" and group in (None, line["group"]):
            lines.append(line)
    return lines


def kinds(events: list[dict[str, Any]], key: str = "event") -> list[str]:
    return [e[key] for e in events]


def classic_consumer(server: ServerProcess, group: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": group,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "enable.auto.commit": False,
            **extra,
        }
    )


def poll_until(consumers: list[Consumer], condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.1)
        if condition():
            return
    raise AssertionError(f"timed out waiting for {what}")


# A consumer in its own process, killed with SIGKILL: it never says goodbye.
_CHILD = """
import sys, time
from confluent_kafka import Consumer
config = dict(arg.split("=", 1) for arg in sys.argv[3:])
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], **config})
c.subscribe(["t"])
said = False
while True:
    c.poll(0.2)
    if c.assignment() and not said:
        print("assigned", flush=True)
        said = True
"""


def child_consumer(server: ServerProcess, group: str, **config: str) -> subprocess.Popen[str]:
    args = [f"{k}={v}" for k, v in config.items()]
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, server.bootstrap, group, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_assigned(child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip() == "assigned", line


def test_timeline_of_unknown_group_is_404(server: ServerProcess) -> None:
    url = f"http://127.0.0.1:{server.metrics_port}/api/groups/nope/timeline"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=5)
    assert e.value.code == 404
    assert "error" in json.loads(e.value.read())


def test_classic_member_killed_expires_and_rebalance_logged(server: ServerProcess) -> None:
    """A classic member whose process is SIGKILLed: its session expires (member_expired,
    cause session timeout), the survivor's rebalance is started and completed with the
    dead member's partitions moved to it; every step one log line and one timeline event."""
    create_topic(server.bootstrap, "t", PARTITIONS)
    victim = child_consumer(server, "g", **{"session.timeout.ms": "6000"})
    survivor = classic_consumer(server, "g")
    try:
        wait_assigned(victim)
        survivor.subscribe(["t"])
        poll_until(
            [survivor],
            lambda: (
                "rebalance_completed" in kinds(timeline(server, "g"))
                and len(survivor.assignment()) == PARTITIONS // 2
            ),
            60,
            "two members sharing the partitions",
        )
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        poll_until(
            [survivor],
            lambda: (
                "member_expired" in kinds(timeline(server, "g"))
                and len(survivor.assignment()) == PARTITIONS
            ),
            60,
            "the killed member expired and its partitions moved",
        )
    finally:
        if victim.poll() is None:
            victim.kill()
        survivor.close()
    events = timeline(server, "g")
    assert kinds(events)[0] == "group_created"
    expired = [e for e in events if e["event"] == "member_expired"]
    assert len(expired) == 1 and expired[0]["cause"] == "session timeout"
    victim_id = expired[0]["member_id"]
    after = events[events.index(expired[0]) :]
    started = next(e for e in after if e["event"] == "rebalance_started")
    assert victim_id in started["cause"] and "session timeout" in started["cause"]
    completed = [e for e in after if e["event"] == "rebalance_completed"][0]
    assert completed["details"]["members"] == 1
    moved = completed["details"]["moved"]
    assert completed["details"]["partitions_moved"] == PARTITIONS // 2 == len(moved)
    assert {m["from"] for m in moved} == {victim_id}
    # The log has a line per event, with the same fields.
    logged = group_lines(server, "g")
    assert [(e["event"], e["member_id"]) for e in events] == [
        (line["group_event"], line["member_id"]) for line in logged
    ][: len(events)]
    assert all(line["level"] == "info" for line in logged)

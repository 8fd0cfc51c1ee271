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
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient

from tests.integration.group_support import wait_until
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


def test_static_member_bounced_is_fenced_without_rebalance(server: ServerProcess) -> None:
    """A static member closed (librdkafka sends no LeaveGroup for one) and started again
    with its instance id: the old member id is fenced by the new one, which takes its
    place in the same generation."""
    create_topic(server.bootstrap, "t", PARTITIONS)
    first = classic_consumer(server, "static", **{"group.instance.id": "inst-1"})
    first.subscribe(["t"])
    poll_until(
        [first], lambda: len(first.assignment()) == PARTITIONS, 60, "the first instance assigned"
    )
    first.close()
    second = classic_consumer(server, "static", **{"group.instance.id": "inst-1"})
    second.subscribe(["t"])
    try:
        poll_until(
            [second],
            lambda: (
                len(second.assignment()) == PARTITIONS
                and "member_fenced" in kinds(timeline(server, "static"))
            ),
            60,
            "the second instance to take over",
        )
    finally:
        second.close()
    events = timeline(server, "static")
    joined = [e for e in events if e["event"] == "member_joined"]
    fenced = [e for e in events if e["event"] == "member_fenced"]
    assert len(joined) == 2 and len(fenced) == 1
    assert fenced[0]["member_id"] == joined[0]["member_id"]
    assert fenced[0]["cause"] == f"static member inst-1 rejoined as {joined[1]['member_id']}"
    assert joined[1]["details"]["instance_id"] == "inst-1"
    # KIP-814: the replacement kept the generation, nothing was rebalanced for it.
    assert fenced[0]["generation_or_epoch"] == joined[1]["generation_or_epoch"] == 1
    assert kinds(events[events.index(fenced[0]) :]).count("rebalance_started") == 0
    logged = group_lines(server, "static")
    assert ("member_fenced", fenced[0]["member_id"]) in [
        (line["group_event"], line["member_id"]) for line in logged
    ]


def test_admin_resets_and_deletes_offsets_then_deletes_the_group(server: ServerProcess) -> None:
    """Admin clients on an emptied group: alter_consumer_group_offsets (a reset: each
    offset from and to), OffsetDelete, delete_consumer_groups; one event each."""
    create_topic(server.bootstrap, "t", 2)
    consumer = classic_consumer(server, "admin-g")
    consumer.subscribe(["t"])
    poll_until([consumer], lambda: len(consumer.assignment()) == 2, 60, "assignment")
    consumer.commit(
        offsets=[TopicPartition("t", 0, 5), TopicPartition("t", 1, 7)], asynchronous=False
    )
    consumer.close()
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    reset = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("admin-g", [TopicPartition("t", 0, 1)])]
    )
    reset["admin-g"].result(10)
    # confluent-kafka's AdminClient has no OffsetDelete: kafka-python's does.
    kafka_admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        kafka_admin.delete_group_offsets("admin-g", [KafkaTopicPartition("t", 1)])
    finally:
        kafka_admin.close()
    admin.delete_consumer_groups(["admin-g"])["admin-g"].result(10)
    events = timeline(server, "admin-g")
    tail = kinds(events)[-4:]
    assert tail == ["group_emptied", "offsets_reset", "offsets_deleted", "group_deleted"], tail
    by_kind = {e["event"]: e for e in events}
    assert by_kind["offsets_reset"]["details"]["offsets"] == [
        {"topic": "t", "partition": 0, "from": 5, "to": 1}
    ]
    assert by_kind["offsets_deleted"]["details"]["deleted"] == [["t", 1]]
    assert by_kind["group_deleted"]["cause"] == "DeleteGroups (admin request)"
    logged = [line["group_event"] for line in group_lines(server, "admin-g")]
    assert logged[-4:] == tail
    # The consumer's own commits (with its generation) made no event.
    assert "offsets_reset" not in logged[:-3]


def test_consumer_protocol_member_killed_and_closed(server: ServerProcess) -> None:
    """KIP-848 (group.protocol=consumer): members join (the group epoch bumps: rebalance
    started), the target moves partitions (assignment changed, revoked and assigned
    counted), every member reconciles (rebalance completed); a SIGKILLed member's session
    expires, a closed one leaves."""
    create_topic(server.bootstrap, "t", PARTITIONS)
    victim = child_consumer(server, "kip848", **{"group.protocol": "consumer"})
    stayer = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "kip848",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    try:
        wait_assigned(victim)
        stayer.subscribe(["t"])
        poll_until(
            [stayer],
            lambda: (
                len(stayer.assignment()) == PARTITIONS // 2
                and kinds(timeline(server, "kip848"))[-1] == "rebalance_completed"
            ),
            60,
            "two members reconciled",
        )
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        poll_until(
            [stayer],
            lambda: (
                len(stayer.assignment()) == PARTITIONS
                and "member_expired" in kinds(timeline(server, "kip848"))
            ),
            60,
            "the killed member to expire",
        )
    finally:
        if victim.poll() is None:
            victim.kill()
        stayer.close()
    events = timeline(server, "kip848")
    names = kinds(events)
    assert names[:2] == ["group_created", "member_joined"]
    for kind in ("rebalance_started", "assignment_changed", "rebalance_completed"):
        assert kind in names
    expired = next(e for e in events if e["event"] == "member_expired")
    assert expired["cause"] == "session timeout"
    after = events[events.index(expired) + 1 :]
    started = next(e for e in after if e["event"] == "rebalance_started")
    assert expired["member_id"] in started["cause"]
    changed = next(e for e in after if e["event"] == "assignment_changed")
    assert changed["details"]["revoked"] == changed["details"]["assigned"] == PARTITIONS // 2
    assert {m["from"] for m in changed["details"]["moved"]} == {expired["member_id"]}
    left = [e for e in events if e["event"] == "member_left"]
    assert len(left) == 1 and left[0]["cause"] == "left (heartbeat epoch -1)"
    assert names[-1] == "group_emptied"
    logged = group_lines(server, "kip848")
    assert [(e["event"], e["member_id"]) for e in events] == [
        (line["group_event"], line["member_id"]) for line in logged
    ]


def test_no_group_line_per_heartbeat_or_commit(server: ServerProcess) -> None:
    """A steady classic member and a steady consumer-protocol member heartbeating and
    committing for seconds write no group event line (and no other line)."""
    create_topic(server.bootstrap, "t", 2)
    classic = classic_consumer(server, "steady-classic")
    modern = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "steady-848",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    try:
        classic.subscribe(["t"])
        modern.subscribe(["t"])
        poll_until(
            [classic, modern],
            lambda: (
                len(classic.assignment()) == 2
                and len(modern.assignment()) == 2
                and kinds(timeline(server, "steady-848"))[-1] == "rebalance_completed"
            ),
            60,
            "both groups settled",
        )
        lines_before = len(group_lines(server))
        commits = 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for c in (classic, modern):
                c.poll(0.05)
                c.commit(
                    offsets=[TopicPartition("t", 0, commits), TopicPartition("t", 1, commits)],
                    asynchronous=False,
                )
            commits += 1
        assert commits > 10
        assert len(group_lines(server)) == lines_before
    finally:
        classic.close()
        modern.close()


def test_timeline_survives_sigkill_and_restart(server: ServerProcess) -> None:
    """The timelines are rebuilt from the log: after a SIGKILL and a restart, every event
    derived from a record is there again, in order, with the time its batch was written;
    a classic rebalance's start (live only) is not, and a removal's cause is the records'
    own ("replayed from the log: ...")."""
    create_topic(server.bootstrap, "t", PARTITIONS)
    classic = classic_consumer(server, "durable-classic")
    modern = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "durable-848",
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    classic.subscribe(["t"])
    modern.subscribe(["t"])
    poll_until(
        [classic, modern],
        lambda: (
            len(classic.assignment()) == PARTITIONS
            and len(modern.assignment()) == PARTITIONS
            and kinds(timeline(server, "durable-848"))[-1] == "rebalance_completed"
        ),
        60,
        "both groups settled",
    )
    classic.close()
    modern.close()
    wait_until(
        lambda: (
            kinds(timeline(server, "durable-classic"))[-1] == "group_emptied"
            and kinds(timeline(server, "durable-848"))[-1] == "group_emptied"
        ),
        30,
        "both groups emptied",
    )
    before = {g: timeline(server, g) for g in ("durable-classic", "durable-848")}
    lines_before = len(group_lines(server))
    server.kill()
    server.start()
    wait_until(lambda: _loaded(server, "durable-848"), 60, "the shards to load")
    # Replayed events rebuild the timelines; they are not logged again.
    assert len(group_lines(server)) == lines_before
    for group, events in before.items():
        after = timeline(server, group)
        # A classic group's rebalance start is written nowhere (Kafka persists no
        # PreparingRebalance); a consumer group's is its epoch bump.
        live_only = {"rebalance_started"} if group == "durable-classic" else set()
        expected = [
            (e["event"], e["generation_or_epoch"], e["member_id"])
            for e in events
            if e["event"] not in live_only
        ]
        replayed = [(e["event"], e["generation_or_epoch"], e["member_id"]) for e in after]
        assert [r for r in replayed if r[0] != "member_left"] == [
            x for x in expected if x[0] != "member_left"
        ], group
        assert {r[2] for r in replayed if r[0] == "member_left"} == {
            e["member_id"] for e in events if e["event"] == "member_left"
        }
        for e in after:
            if e["event"] == "member_left":
                assert e["cause"].startswith("replayed from the log: ")
        # An event derived from a record when it was written has, replayed, the time of
        # the batch that holds the record: the same moment, give or take the batch's
        # gathering. (A classic member's join or leave is announced live when it happens,
        # and replayed from the record that completes the rebalance.)
        written = {"group_created", "rebalance_completed", "assignment_changed", "group_emptied"}
        live_times = {
            (e["event"], e["generation_or_epoch"]): e["time_ms"]
            for e in events
            if e["event"] in written
        }
        for e in after:
            key = (e["event"], e["generation_or_epoch"])
            if key in live_times:
                assert abs(e["time_ms"] - live_times[key]) < 1000, (key, e["time_ms"])


def _loaded(server: ServerProcess, group: str) -> bool:
    try:
        return bool(timeline(server, group))
    except urllib.error.HTTPError:
        return False

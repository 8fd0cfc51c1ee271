"""Shared by the command line's tests against groupcoord (tests/integration/test_cli.py) and
against Apache Kafka (tests/jvm/test_cli_vs_kafka.py): the CLI run as a user runs it, a
group made by a real client, and describe's output with what differs by nature (member ids,
hosts) normalised."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from groupcoord.coordinator.cli import main
from tests.support import ROOT

CLIENT_ID = "cli-test-client"
RECORDS_PER_PARTITION = 10
# The group's committed offsets once set up: on the subscribed topic by the member itself,
# on the other topic by `groups reset-offsets --execute` before the member joined.
MEMBER_COMMITS = {("orders", 0): 4, ("orders", 1): 7}
ADMIN_COMMITS = {("audit", 0): 3}


@dataclass
class Done:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def cli(bootstrap: str, *args: str) -> Done:
    """`groupcoord ARGS --bootstrap-server BOOTSTRAP`, run in this process (the CLI is
    synchronous and keeps no state between runs; a process per run costs a second or two of
    imports on a loaded machine)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*args, "--bootstrap-server", bootstrap])
        except SystemExit as e:  # argparse: --help, usage errors
            code = e.code if isinstance(e.code, int) else 1
    return Done(code, out.getvalue(), err.getvalue())


def cli_process(bootstrap: str, *args: str) -> Done:
    """`groupcoord ARGS --bootstrap-server BOOTSTRAP`, as a process, as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "groupcoord.coordinator", *args, "--bootstrap-server", bootstrap],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Done(done.returncode, done.stdout, done.stderr)


def produce_topics(bootstrap: str) -> None:
    """orders (3 partitions) and audit (1), each partition holding 10 records."""
    assert cli(bootstrap, "topics", "create", "orders", "--partitions", "3").code == 0
    assert cli(bootstrap, "topics", "create", "audit", "--partitions", "1").code == 0
    producer = Producer({"bootstrap.servers": bootstrap})
    for topic, partitions in (("orders", 3), ("audit", 1)):
        for partition in range(partitions):
            for i in range(RECORDS_PER_PARTITION):
                producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(60) == 0


def join_member(bootstrap: str, group: str, protocol: str) -> Consumer:
    """A member of `group` (group.protocol `protocol`) that owns every partition of orders,
    has read them and committed MEMBER_COMMITS."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": CLIENT_ID,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["orders"])
    deadline = time.monotonic() + 90
    while len(consumer.assignment()) < 3:
        assert time.monotonic() < deadline, "the member never got its partitions"
        consumer.poll(0.5)
    consumer.commit(
        offsets=[TopicPartition(t, p, o) for (t, p), o in MEMBER_COMMITS.items()],
        asynchronous=False,
    )
    return consumer


def describe_rows(out: str) -> list[list[str]]:
    """describe's table, split into cells, member ids and hosts normalised."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines and lines[0][:3] == ["GROUP", "TOPIC", "PARTITION"], out
    header = lines[0]
    member, host = header.index("CONSUMER-ID"), header.index("HOST")
    rows = [header]
    for cells in lines[1:]:
        assert len(cells) == len(header), out
        if cells[member] != "-":
            cells[member] = "<member-id>"
        if cells[host] != "-":
            cells[host] = "<host>"
        rows.append(cells)
    return rows


def expected_rows(group: str, live: bool) -> list[list[str]]:
    """What describe must show for the group set up above."""
    end = str(RECORDS_PER_PARTITION)
    owner = ["<member-id>", "<host>", CLIENT_ID] if live else ["-", "-", "-"]
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
             "CONSUMER-ID", "HOST", "CLIENT-ID"]]  # fmt: skip
    for partition in range(3):
        offset = MEMBER_COMMITS.get(("orders", partition))
        current = "-" if offset is None else str(offset)
        lag = "-" if offset is None else str(RECORDS_PER_PARTITION - offset)
        if live or offset is not None:
            rows.append([group, "orders", str(partition), current, end, lag, *owner])
    offset = ADMIN_COMMITS[("audit", 0)]
    audit = [group, "audit", "0", str(offset), end, str(RECORDS_PER_PARTITION - offset)]
    rows.append([*audit, "-", "-", "-"])
    # Members' partitions come first, then the unowned ones, each by topic and partition.
    return rows if live else [rows[0], *sorted(rows[1:], key=lambda r: (r[1], int(r[2])))]


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, read through the CLI's --json."""
    done = cli(bootstrap, "groups", "describe", group, "--json")
    assert done.code == 0, done.err
    return {
        (row["topic"], row["partition"]): row["current_offset"]
        for row in done.json()["offsets"]
        if row["current_offset"] is not None
    }


def run_scenario(bootstrap: str, group: str, protocol: str) -> dict[str, Any]:
    """The CLI's contract on one server: reset-offsets before the group exists (dry run
    changes nothing, --execute exactly what it printed), describe with a live member
    (offsets, lag, LAG '-' without a commit), reset refused while the member lives, describe
    of the emptied group, --json. Returns the normalised outputs, to compare servers."""
    seen: dict[str, Any] = {}
    reset = ("groups", "reset-offsets", group, "--topic", "audit", "--to-offset", "3")
    dry = cli(bootstrap, *reset)
    assert dry.code == 0, dry.err
    assert "dry run" in dry.err
    seen["reset_dry"] = [line.split() for line in dry.out.splitlines() if line.strip()]
    assert seen["reset_dry"] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        [group, "audit", "0", "3"],
    ]
    assert cli(bootstrap, "groups", "describe", group).code == 1  # nothing was committed
    done = cli(bootstrap, *reset, "--execute")
    assert done.code == 0, done.err
    assert done.out == dry.out  # the printed offsets are what was committed
    assert committed(bootstrap, group) == ADMIN_COMMITS

    member = join_member(bootstrap, group, protocol)
    try:
        live = cli(bootstrap, "groups", "describe", group)
        assert live.code == 0, live.err
        seen["describe_live"] = describe_rows(live.out)
        assert seen["describe_live"] == expected_rows(group, live=True), live.out
        members = cli(bootstrap, "groups", "describe", group, "--members")
        assert members.code == 0, members.err
        seen["describe_members"] = [line.split() for line in members.out.splitlines() if line]
        header, (row,) = seen["describe_members"][0], seen["describe_members"][1:]
        assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert (row[0], row[3:]) == (group, [CLIENT_ID, "3"]), members.out
        row[1:3] = ["<member-id>", "<host>"]
        state = cli(bootstrap, "groups", "describe", group, "--state")
        assert state.code == 0, state.err
        seen["describe_state"] = [line.split() for line in state.out.splitlines() if line]
        assert seen["describe_state"][0] == [
            "GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"
        ]  # fmt: skip
        row = seen["describe_state"][1]
        assert (row[0], row[4:]) == (group, ["Stable", "1"]), state.out
        row[1] = "<coordinator>"
        described = cli(bootstrap, "groups", "describe", group, "--json").json()
        assert described["state"] == "Stable"
        assert described["type"] == protocol
        assert [m["client_id"] for m in described["members"]] == [CLIENT_ID]
        assert described["total_lag"] == 6 + 3 + 7
        seen["describe_json"] = {k: described[k] for k in ("state", "type", "total_lag")}
        # Refused while the group has a live member, as Kafka's tool refuses; nothing changes.
        before = committed(bootstrap, group)
        for extra in ((), ("--execute",)):
            refused = cli(
                bootstrap, "groups", "reset-offsets", group, "--all-topics", "--to-earliest",
                *extra,
            )  # fmt: skip
            assert refused.code == 1, refused.err
            assert "can only be reset if the group" in refused.err
            assert "current state is Stable" in refused.err
        assert committed(bootstrap, group) == before
        seen["delete_refused"] = cli(bootstrap, "groups", "delete", group).code
        assert seen["delete_refused"] == 1
    finally:
        member.close()

    deadline = time.monotonic() + 60
    while True:  # the member's leave reaches the coordinator
        empty = cli(bootstrap, "groups", "describe", group)
        if "has no active members" in empty.err or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert empty.code == 0, empty.err
    assert "has no active members" in empty.err
    seen["describe_empty"] = describe_rows(empty.out)
    assert seen["describe_empty"] == expected_rows(group, live=False), empty.out

    # Now the reset applies: --shift-by on every committed partition, dry run first.
    shift = ("groups", "reset-offsets", group, "--all-topics", "--shift-by", "-5")
    dry = cli(bootstrap, *shift)
    assert dry.code == 0, dry.err
    assert committed(bootstrap, group) == {**MEMBER_COMMITS, **ADMIN_COMMITS}
    done = cli(bootstrap, *shift, "--execute", "--json")
    assert done.code == 0, done.err
    plan = {(o["topic"], o["partition"]): o["new_offset"] for o in done.json()["offsets"]}
    # Clamped to the log start (0), as Kafka clamps.
    assert plan == {("audit", 0): 0, ("orders", 0): 0, ("orders", 1): 2}
    assert committed(bootstrap, group) == plan
    seen["reset_shift"] = [line.split() for line in dry.out.splitlines() if line.strip()]
    return seen

"""The command line against the real server: describe with LAG as kafka-consumer-groups.sh
prints it, reset-offsets (dry run by default, --execute exactly what was printed, refused
while the group has live members), --json, delete, topics, exit codes. The same scenario
runs against Apache Kafka in tests/jvm/test_cli_vs_kafka.py."""

from __future__ import annotations

import json

import pytest

from tests.cli_support import cli, cli_process, join_member, produce_topics, run_scenario
from tests.support import ServerProcess, free_port


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_describe_and_reset_offsets(server: ServerProcess, protocol: str) -> None:
    produce_topics(server.bootstrap)
    run_scenario(server.bootstrap, f"cli-{protocol}", protocol)


def test_list_delete_topics_and_exit_codes(server: ServerProcess) -> None:
    b = server.bootstrap
    produce_topics(b)
    assert cli(b, "groups", "reset-offsets", "g1", "--all-topics", "--to-latest").code == 0
    # Nothing committed by a dry run: the group does not exist.
    assert cli(b, "groups", "describe", "g1").code == 1
    done = cli(b, "groups", "reset-offsets", "g1", "--topic", "orders:1,2", "--to-latest",
               "--execute")  # fmt: skip
    assert done.code == 0, done.err
    listed = cli(b, "groups", "list", "--json").json()
    assert {"group": "g1", "type": "classic", "state": "Empty", "protocol_type": ""} in listed
    assert cli(b, "groups", "list", "--state", "stable", "--json").json() == []
    assert [g["group"] for g in cli(b, "groups", "list", "--type", "classic", "--json").json()] == [
        "g1"
    ]
    table = cli(b, "groups", "list")
    assert table.out.split() == ["GROUP", "TYPE", "STATE", "g1", "classic", "Empty"]

    # delete-offsets, then delete.
    done = cli(b, "groups", "delete-offsets", "g1", "--topic", "orders:1")
    assert done.code == 0, done.err
    assert "Successful" in done.out
    assert cli(b, "groups", "describe", "g1", "--json").json()["offsets"][0]["partition"] == 2
    done = cli(b, "groups", "delete", "g1")
    assert (done.code, done.out.strip()) == (
        0,
        "Deletion of requested consumer groups ('g1') was successful.",
    )
    done = cli(b, "groups", "delete", "g1")
    assert done.code == 1 and "GROUP_ID_NOT_FOUND" in done.err

    # topics
    # The group made __consumer_offsets exist: listed as Kafka lists it, unless excluded.
    assert cli(b, "topics", "list", "--json").json() == ["__consumer_offsets", "audit", "orders"]
    assert cli(b, "topics", "list", "--exclude-internal", "--json").json() == ["audit", "orders"]
    done = cli(b, "topics", "alter-config", "audit", "--set", "retention.ms=60000")
    assert done.code == 0, done.err
    described = cli(b, "topics", "describe", "audit", "--json").json()
    assert described[0]["configs"] == {"retention.ms": "60000"}
    assert described[0]["partition_count"] == 1
    assert cli(b, "topics", "create", "audit").code == 1  # TOPIC_ALREADY_EXISTS
    assert cli(b, "topics", "delete", "audit").code == 0
    assert cli(b, "topics", "list", "--exclude-internal").out.split() == ["orders"]
    assert cli(b, "topics", "describe", "audit").code == 1

    # Exit codes of the command a user runs: ok 0, Kafka error 1, usage 2, unreachable 3.
    done = cli_process(b, "groups", "describe", "g1", "--json")
    assert done.code == 1 and "does not exist" in done.err  # deleted above
    done = cli_process(b, "topics", "describe", "orders", "--json")
    assert done.code == 0 and json.loads(done.out)[0]["partition_count"] == 3
    assert cli_process(b, "groups", "reset-offsets", "g1", "--all-topics").code == 2
    assert cli(b, "groups", "describe").code == 2
    assert cli(b, "groups", "list", "--state", "sleepy").code == 2
    unreachable = cli_process(f"127.0.0.1:{free_port()}", "groups", "list")
    assert unreachable.code == 3 and "cannot connect" in unreachable.err


def test_timeline_of_a_group_that_rebalanced(server: ServerProcess) -> None:
    """`groups timeline` reads the server's timeline over HTTP: a member joining and then
    leaving shows as joined, rebalance completed and left, newest last; an unknown group is
    a Kafka-style error (exit 1)."""
    b = server.bootstrap
    http = f"127.0.0.1:{server.metrics_port}"
    produce_topics(b)
    member = join_member(b, "cli-timeline", "classic")
    member.close()  # a LeaveGroup: the group empties
    events = cli(b, "groups", "timeline", "cli-timeline", "--http", http, "--json").json()
    kinds = [e["event"] for e in events["events"]]
    assert events["group"] == "cli-timeline"
    for kind in ("member_joined", "rebalance_completed", "member_left"):
        assert kind in kinds, kinds
    assert kinds.index("member_joined") < kinds.index("member_left")
    table = cli(b, "groups", "timeline", "cli-timeline", "--http", http)
    assert table.code == 0 and "member_left" in table.out
    missing = cli(b, "groups", "timeline", "no-such-group", "--http", http)
    assert missing.code == 1 and missing.err

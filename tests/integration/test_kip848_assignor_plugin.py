"""An assignor of your own, installed as a plugin: the test package tests/assignor_plugin/ is
installed with pip into a temporary directory of its own (nothing global changes), which the
server's PYTHONPATH includes; the server lists its entry point `smallest` in
group_consumer_assignors, and KIP-848 consumers select it with `group.remote.assignor`.

The plugin gives every partition of a topic to the subscriber with the smallest member id,
so its targets are recognisable; a control file switches it to failing or to busy work
(until a deadline or until the file changes) while the server runs. Shown: confluent-kafka
consumers get its assignment; while it computes, the server answers other requests
(ApiVersions, another group's heartbeats, the group's own), none of them waiting for the
computation, and the group stays on its previous target; a failing one fails
no heartbeat, leaves the members on their previous assignment, is logged with the group and
assignor names, and is retried until it succeeds; an assignor that is not installed stops
the server at start-up, saying so."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.integration.group_support import GroupLog, produce, wait_until
from tests.integration.test_clients import create_topic
from tests.integration.test_kip848_confluent import ConsumerMember, describe_group
from tests.integration.test_kip848_raw import RawMember, describe
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving

PLUGIN_SOURCE = Path(__file__).resolve().parent.parent / "assignor_plugin"
ASSIGNORS = "uniform,range,smallest"
# Rounds of requests (ApiVersions, another group's heartbeat, the group's own) answered
# while a slow plugin computes.
WHILE_COMPUTING_ROUNDS = 30


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test plugin, installed by pip (offline: it builds itself, build_backend.py)."""
    target = tmp_path_factory.mktemp("assignor-plugin")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(PLUGIN_SOURCE),
        ],
        check=True,
        timeout=120,
    )
    return target


@pytest.fixture
def control(tmp_path: Path, plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The plugin's control file; the servers the test starts see the plugin and the file."""
    path = tmp_path / "assignor-control"
    paths = [str(plugin_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    monkeypatch.setenv("GROUPCOORD_TEST_ASSIGNOR_CONTROL", str(path))
    return path


@pytest.fixture
def server(tmp_path: Path, control: Path) -> Iterator[ServerProcess]:
    with serving(
        tmp_path / "data",
        group_consumer_assignors=ASSIGNORS,
        group_consumer_heartbeat_interval_ms=500,
        group_consumer_session_timeout_ms=30000,
        group_consumer_assignment_interval_ms=0,
    ) as proc:
        yield proc


def calls(control: Path) -> list[str]:
    """What the plugin noted: `start <members>`, then `done` or `failed`, per call."""
    path = Path(f"{control}.calls")
    return path.read_text().splitlines() if path.exists() else []


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def api_versions(client: RawClient) -> Any:
    m = sys.modules[request_class(18, 3).__module__]
    resp = client.request(
        18, 3, m.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    assert resp.error_code == 0
    return resp


def settle_raw(members: list[RawMember], what: str, condition: Any) -> None:
    deadline = time.monotonic() + 20
    while True:
        for m in members:
            assert m.ack().error_code == 0
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def smallest_first(members: list[RawMember]) -> list[RawMember]:
    return sorted(members, key=lambda m: m.member_id)


# -- a. real consumers select the plugin ------------------------------------------------------


def test_consumers_selecting_the_plugin_get_its_assignment(server: ServerProcess) -> None:
    bootstrap = server.bootstrap
    topic = group = "plugin-smallest"
    create_topic(bootstrap, topic, 6)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    log = GroupLog()
    members = [
        ConsumerMember(f"c{i}", bootstrap, group, topic, log, assignor="smallest") for i in range(3)
    ]
    for m in members:
        m.start()
    try:

        def plugin_layout() -> bool:
            description = describe_group(admin, group)
            if len(description.members) != 3:
                return False
            smallest = min(description.members, key=lambda d: d.member_id)
            owners = {m.member: m.owned for m in members}
            return (
                description.partition_assignor == "smallest"
                and owners[smallest.client_id] == set(range(6))
                and all(not ps for name, ps in owners.items() if name != smallest.client_id)
            )

        wait_until(plugin_layout, 30, "the plugin's assignment: all to the smallest id")
        expected = produce(bootstrap, topic, 6, 5, "plugin")
        wait_until(lambda: set(expected) <= set(log.values()), 30, "every message consumed")
        assert all(c.owned for c in log.consumed)  # each by its partition's owner
        assert [e for _, e in log.errors if e.fatal()] == []
    finally:
        for m in members:
            m.stop()


# -- b. a slow plugin stalls nothing ------------------------------------------------------------


def test_a_slow_plugin_stalls_neither_the_server_nor_its_group(
    server: ServerProcess, control: Path
) -> None:
    bootstrap = server.bootstrap
    create_topic(bootstrap, "slow", 4)
    create_topic(bootstrap, "other", 4)
    first = RawMember(bootstrap, "slow-group", ["slow"], assignor="smallest")
    other = RawMember(bootstrap, "other-group", ["other"])
    second = RawMember(bootstrap, "slow-group", ["slow"], assignor="smallest")
    witness = RawClient(bootstrap)
    try:
        first.join()
        settle_raw([first], "the first target", lambda: first.count() == 4)
        other.join()
        settle_raw([other], "the other group", lambda: other.count() == 4)
        # Busy until told to stop (at most 120 s): whatever is answered before that was
        # answered while it computed, however slow the machine.
        control.write_text("slow 120")
        assert second.join().error_code == 0  # starts the computation
        wait_until(lambda: calls(control).count("start 2") == 1, 10, "the computation")

        # While it computes: requests of any kind are answered, none waiting for it (it
        # ends only when the test says so, after them), and the group works on its
        # previous target (the first member keeps its partitions). Latencies are printed,
        # not asserted: a loaded machine may miss any wall-clock bound; a loop or a GIL
        # the computation held would answer none of these until it ended: never.
        latencies: dict[str, list[float]] = {"ApiVersions": [], "other": [], "own": []}
        for _ in range(WHILE_COMPUTING_ROUNDS):
            latencies["ApiVersions"].append(timed(lambda: api_versions(witness))[0])
            elapsed, resp = timed(other.ack)
            assert resp.error_code == 0
            latencies["other"].append(elapsed)
            elapsed, resp = timed(first.ack)
            assert resp.error_code == 0
            latencies["own"].append(elapsed)
            assert calls(control)[-1] == "start 2", "the computation ended before the test said so"
            time.sleep(0.02)
        worst = {kind: max(values) for kind, values in latencies.items()}
        print(f"worst latencies during the computation: {worst}")
        assert first.count() == 4 and second.count() == 0
        with RawClient(bootstrap) as c:
            during = describe(c, "slow-group")
        assert during.group_state == "Assigning"
        assert during.assignment_epoch < during.group_epoch
        assert calls(control)[-1] == "start 2"

        control.write_text("")  # the computation stops and returns its target
        wait_until(lambda: calls(control)[-1] == "done", 30, "the computation to end")
        # Then its target is installed: everything to the smallest member id.
        smallest, largest = smallest_first([first, second])
        settle_raw(
            [first, second],
            "the plugin's new target",
            lambda: smallest.count() == 4 and largest.count() == 0,
        )
    finally:
        for m in (first, second, other):
            m.close()
        witness.close()


# -- c. a failing plugin keeps the group on its target -----------------------------------------


def test_a_failing_plugin_keeps_the_previous_target_is_logged_and_retried(
    server: ServerProcess, control: Path
) -> None:
    bootstrap = server.bootstrap
    create_topic(bootstrap, "failing", 4)
    a = RawMember(bootstrap, "failing-group", ["failing"], assignor="smallest")
    b = RawMember(bootstrap, "failing-group", ["failing"], assignor="smallest")
    smallest, largest = smallest_first([a, b])
    try:
        a.join()
        b.join()
        settle_raw([a, b], "the first target", lambda: smallest.count() == 4)
        with RawClient(bootstrap) as c:
            before = describe(c, "failing-group")
        held = (smallest.epoch, {t: set(ps) for t, ps in smallest.assigned.items()})

        control.write_text("fail")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions("failing", 6)])["failing"].result(10)

        # The next heartbeats see the topic grow: the epoch moves, the plugin fails. No
        # heartbeat fails; the members stay where they were.
        def failed_and_logged() -> bool:
            assert a.ack().error_code == 0 and b.ack().error_code == 0
            return "failed" in calls(control) and "told to fail" in server.log_tail(200)

        wait_until(failed_and_logged, 10, "the plugin to fail and the error to be logged")
        for _ in range(5):
            assert a.ack().error_code == 0 and b.ack().error_code == 0
            time.sleep(0.1)
        assert (smallest.epoch, smallest.assigned) == held and largest.count() == 0
        with RawClient(bootstrap) as c:
            during = describe(c, "failing-group")
        assert during.group_epoch == before.group_epoch + 1
        assert during.assignment_epoch == before.assignment_epoch
        errors = [line for line in server.log_tail(200).splitlines() if "told to fail" in line]
        assert '"event": "offloaded computation failed"' in errors[0]
        assert '"level": "error"' in errors[0]
        assert (
            f"Failed to compute a new target assignment for epoch {during.group_epoch} of "
            "group 'failing-group' with assignor 'smallest'"
        ) in errors[0]

        # It is tried again later; once the plugin works, its target comes.
        control.write_text("")
        settle_raw(
            [a, b],
            "the retried target with the new partitions",
            lambda: smallest.partitions() == set(range(6)) and largest.count() == 0,
        )
        assert calls(control).count("failed") >= 1
    finally:
        a.close()
        b.close()


# -- d. an assignor that is not installed ------------------------------------------------------


def test_an_assignor_not_installed_stops_the_server_at_start_up(
    tmp_path: Path, control: Path
) -> None:
    proc = ServerProcess(
        tmp_path / "data", ["--set", "group_consumer_assignors=uniform,smallest,nosuch"]
    )
    with pytest.raises(RuntimeError) as raised:
        proc.start(timeout_s=30)
    assert proc.proc is not None and proc.proc.returncode == 2
    assert (
        "groupcoord: group_consumer_assignors: no assignor 'nosuch': the built-in ones are "
        "range, uniform, and no installed distribution declares 'nosuch' in the entry-point "
        "group 'groupcoord.assignors' (declared there: smallest)"
    ) in str(raised.value)

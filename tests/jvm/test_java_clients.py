"""The Java client (kafka-clients 4.x) against groupcoord, and against Apache Kafka 4.x in the
same test with the same assertions.

Each scenario is a small Java program of tests/jvm/java/ (compiled once, see
java_programs.py) run in its own JVM with a hard timeout; it prints JSON lines (every
listener call, every record consumed, every commit, the admin answers) and the checks here
read them. Both brokers run with the same group settings (GROUP_SETTINGS); everything else
is each one's default.

- classic groups, eager range and cooperative-sticky; and group.protocol=consumer with the
  uniform and range server assignors: members consume while one leaves and one joins;
  nothing consumed twice or lost, every record consumed by its partition's owner then;
- static members restarted in turn within the session timeout: no rebalance;
- a static leader's restart (KIP-814): its assignor does not run again;
- AdminClient's group operations, and lag from committed offsets and ListOffsets.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jvm.artifacts import JvmArtifactsMissing, classpath
from tests.jvm.differential import on_both
from tests.jvm.java_programs import ProgramRun, compiled, run_program
from tests.jvm.kafka_broker import kafka_broker
from tests.support import serving

pytestmark = [pytest.mark.jvm]

# Kafka's name -> (groupcoord's setting, value): short timers, the same on both brokers.
# Consumer-protocol members take their heartbeat interval and session from the broker.
GROUP_SETTINGS = {
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", 1000),
    "group.consumer.heartbeat.interval.ms": ("group_consumer_heartbeat_interval_ms", 1000),
    "group.consumer.min.heartbeat.interval.ms": ("group_consumer_min_heartbeat_interval_ms", 500),
    "group.consumer.session.timeout.ms": ("group_consumer_session_timeout_ms", 10000),
    "group.consumer.min.session.timeout.ms": ("group_consumer_min_session_timeout_ms", 6000),
}
PROGRAM_TIMEOUT_S = 120.0
RANGE = "org.apache.kafka.clients.consumer.RangeAssignor"
COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


def _need(module: str) -> None:
    try:
        classpath(module)
    except JvmArtifactsMissing as exc:
        pytest.fail(f"JVM artifacts unavailable: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def classes() -> Path:
    _need("clients")
    return compiled()


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Both brokers, started once for the module: name -> bootstrap address."""
    _need("broker")
    ours = {name: value for name, value in GROUP_SETTINGS.values()}
    kafkas = {kafka: value for kafka, (_, value) in GROUP_SETTINGS.items()}
    data = tmp_path_factory.mktemp("groupcoord") / "data"
    with (
        serving(data, **ours) as server,
        kafka_broker(tmp_path_factory.mktemp("kafka"), kafkas) as kafka,
    ):
        yield {"groupcoord": server.bootstrap, "kafka": kafka.bootstrap}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _ints(offsets: dict[str, int]) -> dict[int, int]:
    return {int(p): o for p, o in offsets.items()}


def check_owned_and_exactly_once(run: ProgramRun) -> None:
    """Partitions pass between members only through a revoke (or a loss, only at teardown);
    every record is consumed by the member owning its partition at the time, exactly once;
    everything below the end offsets is consumed and committed."""
    owner: dict[int, str] = {}
    seen: Counter[tuple[int, int]] = Counter()
    teardown = False
    for ev in run.events:
        kind, member = ev["e"], ev.get("m")
        if kind == "teardown":
            teardown = True
        elif kind == "assign":
            for p in ev["ps"]:
                assert p not in owner, f"{run.label}: {p} assigned to {member}, {owner[p]} owns it"
                owner[p] = member
        elif kind in ("revoke", "lost"):
            assert kind == "revoke" or teardown, f"{run.label}: {member} lost {ev['ps']}"
            for p in ev["ps"]:
                assert owner.get(p) == member, f"{run.label}: {member} gave up {p} it did not own"
                del owner[p]
        elif kind == "rec":
            p = ev["p"]
            assert owner.get(p) == member, (
                f"{run.label}: {member} consumed {p}@{ev['o']} owned by {owner.get(p)}"
            )
            seen[(p, ev["o"])] += 1
    ends = _ints(run.one("ends")["offsets"])
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    twice = sorted(r for r, n in seen.items() if n > 1)
    missing = sorted(expected - set(seen))
    assert not twice, f"{run.label}: consumed more than once: {twice[:20]}"
    assert not missing, f"{run.label}: never consumed: {missing[:20]} of {len(expected)}"
    assert set(seen) == expected, f"{run.label}: consumed past the end offsets {ends}"
    assert sum(ends.values()) > 0
    assert _ints(run.one("committed")["offsets"]) == ends, f"{run.label}: committed != ends"


# -- a and d: members leave and join while consuming -----------------------------------------

CHURN = [
    pytest.param("classic", RANGE, id="classic-eager-range"),
    pytest.param("classic", COOPERATIVE, id="classic-cooperative-sticky"),
    pytest.param("consumer", "uniform", id="consumer-uniform"),
    pytest.param("consumer", "range", id="consumer-range"),
]


@pytest.mark.parametrize(("protocol", "assignor"), CHURN)
def test_members_leave_and_join_while_consuming(
    classes: Path, targets: dict[str, str], tmp_path: Path, protocol: str, assignor: str
) -> None:
    """c1, c2, c3 converge; c1 leaves; c4 joins; with records produced throughout."""

    def scenario(target: str, bootstrap: str) -> None:
        topic, group = _name("churn-t"), _name("churn-g")
        run = run_program(
            classes,
            "Churn",
            [bootstrap, topic, group, protocol, assignor],
            tmp_path,
            f"churn-{target}",
            PROGRAM_TIMEOUT_S,
        )
        run.assert_completed()
        phases = [e["name"] for e in run.of("phase")]
        for phase in ("three members", "c1 left", "c4 joined", "all consumed"):
            assert phase in phases, f"{run.label}: never reached {phase!r}"
        consumers = {e["m"] for e in run.of("rec")}
        assert consumers == {"c1", "c2", "c3", "c4"}, f"{run.label}: consumed by {consumers}"
        check_owned_and_exactly_once(run)

    on_both(targets, scenario)


# -- b and c: static members restart without a rebalance --------------------------------------


def check_no_rebalance(run: ProgramRun, restarts: int) -> dict[str, Any]:
    """After "stable": listener calls only on the member being restarted (its close, and its
    new incarnation's assignment of the partitions it had, in the same generation); no
    assignor run; every member ends in the stable generation. Returns the "stable" line."""
    events = run.events
    start = events.index(run.one("stable"))
    stable = events[start]
    generation, owners = stable["gen"], stable["owners"]
    restarting = None
    restarted = []
    for ev in events[start + 1 :]:
        kind, member = ev["e"], ev.get("m")
        if kind == "teardown":
            break
        if kind == "restart":
            restarting = member
        elif kind == "restarted":
            assert member == restarting and ev["gen"] == generation, f"{run.label}: {ev}"
            restarted.append(member)
            restarting = None
        elif kind == "assignor_run":
            raise AssertionError(f"{run.label}: an assignor ran again after 'stable': {ev}")
        elif kind in ("assign", "revoke", "lost"):
            assert member == restarting, (
                f"{run.label}: {member}'s listener saw {kind} {ev['ps']} while "
                f"{restarting} restarted (a rebalance)"
            )
            if kind == "assign":
                assert ev["ps"] == owners[member] and ev["gen"] == generation, (
                    f"{run.label}: {member} came back with {ev}, had {owners[member]} "
                    f"in generation {generation}"
                )
    assert len(restarted) == restarts, f"{run.label}: restarted {restarted}"
    finals = {e["m"]: e["gen"] for e in events[start:] if e["e"] == "final"}
    assert set(finals.values()) == {generation}, f"{run.label}: generations {finals}"
    return stable


def _static_run(
    classes: Path, tmp_path: Path, target: str, bootstrap: str, assignor: str, mode: str
) -> ProgramRun:
    run = run_program(
        classes,
        "StaticRestart",
        [bootstrap, _name("static-t"), _name("static-g"), assignor, mode],
        tmp_path,
        f"static-{mode}-{target}",
        PROGRAM_TIMEOUT_S,
    )
    run.assert_completed()
    check_owned_and_exactly_once(run)
    return run


def test_static_rolling_restart_without_rebalance(
    classes: Path, targets: dict[str, str], tmp_path: Path
) -> None:
    """s1, s2, s3 (eager range) each closed and started again, in turn, within the session."""

    def scenario(target: str, bootstrap: str) -> None:
        run = _static_run(classes, tmp_path, target, bootstrap, "range", "rolling")
        check_no_rebalance(run, restarts=3)

    on_both(targets, scenario)


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_static_leader_restart_does_not_reassign(
    classes: Path, targets: dict[str, str], tmp_path: Path, assignor: str
) -> None:
    """KIP-814: the leader restarted twice; JoinGroup v9 tells it to skip the assignment, so
    its (counting) assignor never runs again and nobody else sees a rebalance."""

    def scenario(target: str, bootstrap: str) -> None:
        run = _static_run(classes, tmp_path, target, bootstrap, assignor, "leader")
        stable = check_no_rebalance(run, restarts=2)
        runs = run.of("assignor_run")
        assert runs and stable["leader"] == runs[-1]["m"], f"{run.label}: {runs}"
        assert [e["m"] for e in run.of("restart")] == [stable["leader"]] * 2

    on_both(targets, scenario)


# -- e: AdminClient ----------------------------------------------------------------------------

_STABLE_CLASSIC = {"type": "Classic", "state": "Stable", "protocol": "consumer", "simple": False}
_STABLE_CONSUMER = {"type": "Consumer", "state": "Stable", "protocol": "consumer", "simple": False}
_EMPTY = {"type": "Classic", "state": "Empty", "protocol": "", "simple": True}


def _without_protocol(listing: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in listing.items() if k != "protocol"}


EXPECTED_LISTS = {
    "all": {"static": _STABLE_CLASSIC, "consumer": _STABLE_CONSUMER, "empty": _EMPTY},
    "consumer-groups": {"static": _STABLE_CLASSIC, "consumer": _STABLE_CONSUMER, "empty": _EMPTY},
    "classic": {"static": _STABLE_CLASSIC, "empty": _EMPTY},
    "consumer": {"consumer": _STABLE_CONSUMER},
    "stable": {"static": _STABLE_CLASSIC, "consumer": _STABLE_CONSUMER},
    "empty": {"empty": _EMPTY},
    # listConsumerGroups (ListConsumerGroupsOptions) lists no protocol.
    "stable-classic": {"static": _without_protocol(_STABLE_CLASSIC)},
    "empty-or-stable-consumer": {"consumer": _without_protocol(_STABLE_CONSUMER)},
    "after delete": {"consumer": _STABLE_CONSUMER, "empty": _EMPTY},
    "all deleted": {},
}
# A classic member has no epochs, target assignment or "upgraded" flag to describe.
_CLASSIC_MEMBER = {"has_member_id": True, "epoch": None, "target": None, "upgraded": None}


def _described(state: str, kind: str, assignor: str, simple: bool) -> dict[str, Any]:
    head = {"state": state, "type": kind, "assignor": assignor, "simple": simple}
    return head | {"coordinator": 0}


def check_described(run: ProgramRun) -> None:
    """describeConsumerGroups of the three groups while the static and consumer-protocol
    members are active."""
    label = run.label
    active = run.one("describe", name="active")["groups"]
    static, consumer, empty = active["static"], active["consumer"], active["empty"]
    head = ("state", "type", "assignor", "simple", "coordinator")
    assert {k: static[k] for k in head} == _described("Stable", "Classic", "range", False)
    assert static["group_epoch"] is None and static["target_epoch"] is None, label
    members = {
        m: {k: v for k, v in d.items() if k != "assigned"} for m, d in static["members"].items()
    }
    assert members == {
        "s1": {"instance": "s1"} | _CLASSIC_MEMBER,
        "s2": {"instance": "s2"} | _CLASSIC_MEMBER,
    }, label
    assert sorted(p for d in static["members"].values() for p in d["assigned"]) == [0, 1, 2]

    assert {k: consumer[k] for k in head} == _described("Stable", "Consumer", "uniform", False)
    assert set(consumer["members"]) == {"k1"}, label
    k1 = consumer["members"]["k1"]
    assert consumer["group_epoch"] == consumer["target_epoch"] == k1["epoch"] >= 1, label
    assert k1 == {
        "instance": None,
        "assigned": [0, 1, 2],
        "has_member_id": True,
        "epoch": k1["epoch"],
        "target": [0, 1, 2],
        "upgraded": True,  # KIP-1099's flag: the member speaks the consumer protocol
    }, label

    assert {k: empty[k] for k in head} == _described("Empty", "Classic", "", True)
    assert empty["members"] == {} and empty["group_epoch"] is None, label


def check_admin(run: ProgramRun) -> None:
    label = run.label
    assert run.one("alter_offsets", group="empty")["result"] == "ok"
    assert _ints(run.one("ends")["offsets"]) == {0: 15, 1: 12, 2: 10}
    # Lag through AdminClient: committed offsets against ListOffsets(latest).
    static_lag = run.one("lag", group="static")
    assert _ints(static_lag["committed"]) == {0: 10, 1: 10, 2: 10}, label
    assert _ints(static_lag["lag"]) == {0: 5, 1: 2, 2: 0}, label
    empty_lag = run.one("lag", group="empty")
    assert _ints(empty_lag["committed"]) == {0: 3, 1: 4}, label
    assert _ints(empty_lag["lag"]) == {0: 12, 1: 8}, label

    lists = {e["name"]: e["groups"] for e in run.of("list")}
    assert lists == EXPECTED_LISTS, f"{label}: listings {lists}"
    check_described(run)
    assert run.one("describe_unknown")["result"] == "GroupIdNotFoundException"
    assert run.one("offsets", group="nosuch")["committed"] == {}
    assert run.one("delete_offsets", group="empty")["result"] == "ok"
    consumer_delete = run.one("delete_offsets", group="consumer")["result"]
    assert consumer_delete == "GroupSubscribedToTopicException", label
    assert _ints(run.one("offsets", group="empty")["committed"]) == {1: 4}, label

    # Closed static members stay until removed; then the group is Empty.
    closed = run.one("describe", name="static closed")["groups"]["static"]
    assert closed["state"] == "Stable" and set(closed["members"]) == {"s1", "s2"}, label
    removal = run.one("remove_members", group="static")["result"]
    assert removal == {"s1": "ok", "s2": "ok", "nobody": "UnknownMemberIdException"}, label
    removed = run.one("describe", name="static removed")["groups"]["static"]
    assert removed["state"] == "Empty" and removed["members"] == {}, label

    # Offsets of an empty group can be altered, of a group with members not.
    assert run.one("alter_offsets", group="static")["result"] == "ok"
    assert run.one("alter_offsets", group="consumer")["result"] == "UnknownMemberIdException"
    assert _ints(run.one("offsets", group="static")["committed"]) == {0: 15, 1: 12, 2: 1}
    assert _ints(run.one("offsets", group="consumer")["committed"]) == {0: 10, 1: 10, 2: 10}

    deletes = [e["result"] for e in run.of("delete")]
    assert deletes == [
        {
            "static": "ok",
            "consumer": "GroupNotEmptyException",
            "nosuch": "GroupIdNotFoundException",
        },
        {"consumer": "ok", "empty": "ok"},
    ], label


def test_admin_group_operations(classes: Path, targets: dict[str, str], tmp_path: Path) -> None:
    """List (state and type filters), describe, remove static members, lag, alter and list
    offsets, delete."""

    def scenario(target: str, bootstrap: str) -> None:
        run = run_program(
            classes,
            "AdminOps",
            [bootstrap, _name("adm")],
            tmp_path,
            f"admin-{target}",
            PROGRAM_TIMEOUT_S,
        )
        run.assert_completed()
        check_admin(run)

    on_both(targets, scenario)


def test_admin_delete_records(classes: Path, targets: dict[str, str], tmp_path: Path) -> None:
    """AdminClient.deleteRecords: low watermarks, never backwards, refused past the high
    watermark; ListOffsets EARLIEST and a new consumer (earliest) start at the new start."""

    def scenario(target: str, bootstrap: str) -> None:
        run = run_program(
            classes,
            "DeleteRecordsOps",
            [bootstrap, _name("dr")],
            tmp_path,
            f"delete-records-{target}",
            PROGRAM_TIMEOUT_S,
        )
        run.assert_completed()
        results = {e["name"]: _ints(e["result"]) for e in run.of("delete")}
        assert results == {
            "first": {0: 4, 1: 10},
            "backwards": {0: 4},
            "past the end": {0: "OffsetOutOfRangeException"},
        }, target
        assert _ints(run.one("earliest")["offsets"]) == {0: 4, 1: 10}, target
        first = run.one("first")
        assert (first["offset"], first["value"]) == (4, "v4"), target

    on_both(targets, scenario)


# -- the checks themselves --------------------------------------------------------------------


def _synthetic(tmp_path: Path, events: list[dict[str, Any]]) -> ProgramRun:
    (tmp_path / "x.err").write_text("")
    return ProgramRun("synthetic", events, 0, tmp_path / "x.err")


_GOOD = [
    {"e": "assign", "m": "c1", "ps": [0], "gen": 1},
    {"e": "rec", "m": "c1", "p": 0, "o": 0},
    {"e": "revoke", "m": "c1", "ps": [0], "gen": 1},
    {"e": "assign", "m": "c2", "ps": [0], "gen": 2},
    {"e": "rec", "m": "c2", "p": 0, "o": 1},
    {"e": "ends", "offsets": {"0": 2}},
    {"e": "committed", "offsets": {"0": 2}},
]


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda ev: ev.insert(2, {"e": "rec", "m": "c1", "p": 0, "o": 0}), "more than once"),
        (lambda ev: ev.pop(4), "never consumed"),
        (lambda ev: ev.pop(2), "c1 owns it"),  # assigned to c2 before c1 revoked it
        (lambda ev: ev.__setitem__(4, {"e": "rec", "m": "c1", "p": 0, "o": 1}), "owned by c2"),
        (lambda ev: ev.__setitem__(2, {"e": "lost", "m": "c1", "ps": [0]}), "c1 lost"),
        (lambda ev: ev.__setitem__(6, {"e": "committed", "offsets": {"0": 1}}), "committed"),
    ],
)
def test_ownership_check_catches(
    tmp_path: Path, change: Callable[[list[dict[str, Any]]], None], complaint: str
) -> None:
    check_owned_and_exactly_once(_synthetic(tmp_path, list(_GOOD)))
    events = [dict(e) for e in _GOOD]
    change(events)
    with pytest.raises(AssertionError, match=complaint):
        check_owned_and_exactly_once(_synthetic(tmp_path, events))


_STABLE = [
    {"e": "assignor_run", "m": "s1", "n": 1},
    {"e": "assign", "m": "s1", "ps": [0], "gen": 1},
    {"e": "assign", "m": "s2", "ps": [1], "gen": 1},
    {"e": "stable", "gen": 1, "leader": "s1", "owners": {"s1": [0], "s2": [1]}},
    {"e": "restart", "m": "s1"},
    {"e": "revoke", "m": "s1", "ps": [0], "gen": 1},
    {"e": "assign", "m": "s1", "ps": [0], "gen": 1},
    {"e": "restarted", "m": "s1", "gen": 1},
    {"e": "teardown"},
    {"e": "final", "m": "s1", "gen": 1},
    {"e": "final", "m": "s2", "gen": 1},
]


@pytest.mark.parametrize(
    ("index", "replacement", "complaint"),
    [
        (6, {"e": "assignor_run", "m": "s1", "n": 2}, "assignor ran again"),
        (5, {"e": "revoke", "m": "s2", "ps": [1], "gen": 1}, "a rebalance"),
        (6, {"e": "assign", "m": "s1", "ps": [0], "gen": 2}, "came back"),
        (10, {"e": "final", "m": "s2", "gen": 2}, "generations"),
    ],
)
def test_no_rebalance_check_catches(
    tmp_path: Path, index: int, replacement: dict[str, Any], complaint: str
) -> None:
    check_no_rebalance(_synthetic(tmp_path, list(_STABLE)), restarts=1)
    events = list(_STABLE)
    events[index] = replacement
    with pytest.raises(AssertionError, match=complaint):
        check_no_rebalance(_synthetic(tmp_path, events), restarts=1)

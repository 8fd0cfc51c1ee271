"""Assignors of your own (plugins): loading them from entry points at start-up
(coordinator/assignor_plugins.py), and how the shard runs them: always off the loop, on
read-only inputs, their result checked, a failure keeping the group on its previous target
and retried with backoff (consumer/offload.py). Shard tests on the ManualTimer (an offload
computes at once and finishes as a 0-delay timer); LoopTimer's plugin threads and its log of
a failed computation on a real event loop."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Mapping
from importlib.metadata import EntryPoint
from typing import Any

import pytest
from structlog.testing import capture_logs

from groupcoord.coordinator import assignor_plugins
from groupcoord.coordinator.assignor_plugins import assignor_names, load_assignor_plugins
from groupcoord.coordinator.config import ConfigError
from groupcoord.coordinator.groups.assignors import (
    ENTRY_POINT_GROUP,
    GroupSpec,
    InvalidAssignment,
    PartitionAssignorError,
    SubscriptionType,
    TopicDescriber,
    UniformAssignor,
)
from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.consumer.offload import TargetAssignmentFailed
from groupcoord.coordinator.groups.result import Result
from groupcoord.coordinator.groups.shard import GroupShard
from groupcoord.coordinator.groups.testing import ManualTimer, SequentialIds
from groupcoord.coordinator.runtime.timers import LoopTimer
from groupcoord.protocol.errors import ErrorCode
from tests.unit.consumer_support import GROUP, Client, Harness, settle

# -- plugins the tests load and run ---------------------------------------------------------


class SmallestTakesAll:
    """Every partition of a topic to its subscriber with the smallest member id; `error`
    makes it raise, `result` makes it return that instead; `specs` keeps what it was given
    and `threads` where it ran."""

    name = "smallest"

    def __init__(self) -> None:
        self.error: Exception | None = None
        self.result: Any = None
        self.specs: list[GroupSpec] = []
        self.names: list[str | None] = []
        self.threads: list[str] = []

    def assign(self, group: GroupSpec, topics: TopicDescriber) -> Any:
        self.specs.append(group)
        self.threads.append(threading.current_thread().name)
        if self.error is not None:
            raise self.error
        if self.result is not None:
            return self.result
        out: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
        for member_id in group.member_ids:
            for topic_id in group.member_subscription(member_id).subscribed_topic_ids:
                self.names.append(topics.topic_name(topic_id))
                if not any(topic_id in held for held in out.values()):
                    out.setdefault(member_id, {})[topic_id] = frozenset(
                        range(topics.num_partitions(topic_id))
                    )
        return out


def make_smallest() -> SmallestTakesAll:
    return SmallestTakesAll()


SMALLEST = SmallestTakesAll()


class Misnamed(SmallestTakesAll):
    name = "other"


def fake_entry_points(monkeypatch: pytest.MonkeyPatch, **points: str) -> None:
    """Entry points of the assignor group: name -> 'module:attribute'."""
    declared = [EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in points.items()]

    def entry_points(group: str) -> list[EntryPoint]:
        assert group == ENTRY_POINT_GROUP
        return declared

    monkeypatch.setattr(assignor_plugins, "entry_points", entry_points)


HERE = __name__


# -- loading ---------------------------------------------------------------------------------


@pytest.mark.parametrize("attribute", ["SmallestTakesAll", "make_smallest", "SMALLEST"])
def test_an_entry_point_names_a_class_a_factory_or_the_assignor(
    monkeypatch: pytest.MonkeyPatch, attribute: str
) -> None:
    fake_entry_points(monkeypatch, smallest=f"{HERE}:{attribute}")
    (loaded,) = load_assignor_plugins(assignor_names(" uniform, smallest ,range"))
    assert isinstance(loaded, SmallestTakesAll) and loaded.name == "smallest"
    if attribute == "SMALLEST":
        assert loaded is SMALLEST


def test_built_in_names_are_not_looked_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # A plugin named like a built-in one is never loaded: the names are reserved.
    fake_entry_points(monkeypatch, uniform=f"{HERE}:Misnamed")
    assert load_assignor_plugins(["uniform", "range"]) == ()


@pytest.mark.parametrize(
    ("points", "message"),
    [
        (
            {"other": f"{HERE}:Misnamed"},
            "no assignor 'smallest': the built-in ones are range, uniform, and no installed "
            "distribution declares 'smallest' in the entry-point group 'groupcoord.assignors' "
            "(declared there: other)",
        ),
        ({"smallest": f"{HERE}:Misnamed"}, "is named 'other': the entry point's name must be"),
        ({"smallest": f"{HERE}:HERE"}, "gives a str, not an assignor"),
        ({"smallest": "no_such_module_anywhere:X"}, "cannot be loaded: ModuleNotFoundError"),
        ({"smallest": f"{HERE}:fails_to_build"}, "cannot be loaded: RuntimeError('no licence')"),
    ],
)
def test_a_missing_or_broken_plugin_is_a_config_error_saying_which_and_why(
    monkeypatch: pytest.MonkeyPatch, points: dict[str, str], message: str
) -> None:
    fake_entry_points(monkeypatch, **points)
    with pytest.raises(ConfigError) as raised:
        load_assignor_plugins(["uniform", "smallest"])
    assert str(raised.value).startswith("group_consumer_assignors: ")
    assert message in str(raised.value)


def fails_to_build() -> None:
    raise RuntimeError("no licence")


def test_two_distributions_declaring_one_name_differently_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    declared = [
        EntryPoint("smallest", f"{HERE}:SmallestTakesAll", ENTRY_POINT_GROUP),
        EntryPoint("smallest", f"{HERE}:make_smallest", ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(assignor_plugins, "entry_points", lambda group: declared)
    with pytest.raises(ConfigError, match="declared more than once"):
        load_assignor_plugins(["smallest"])


def test_the_shard_refuses_a_configured_name_without_an_assignor() -> None:
    config = GroupConfig(consumer_assignors=("uniform", "smallest"))
    with pytest.raises(ValueError, match="smallest"):
        GroupShard(0, config, ManualTimer(), SequentialIds())


# -- running them ----------------------------------------------------------------------------


def plugged(plugin: SmallestTakesAll | None = None, **config: Any) -> Harness:
    """A shard whose assignors are uniform, range and the plugin `smallest`."""
    config.setdefault("consumer_assignment_interval_ms", 0)
    return Harness(
        {"foo": 4, "bar": 2},
        consumer_assignors=("uniform", "range", "smallest"),
        consumer_assignor_plugins=(plugin or SmallestTakesAll(),),
        **config,
    )


def plugin_of(h: Harness) -> SmallestTakesAll:
    plugin = h.shard.consumer.assignors["smallest"]
    assert isinstance(plugin, SmallestTakesAll)
    return plugin


def owned(client: Client) -> dict[uuid.UUID, list[int]]:
    return client.owned_dict()


def test_a_new_group_gets_its_plugins_target_right_after_its_first_heartbeat() -> None:
    h = plugged()
    a = Client(h, "b-member")
    first = a.join(["foo"], server_assignor="smallest")
    # The plugin does not run in the heartbeat: the member gets the initial target (epoch 1,
    # nothing); the computation starts from the assignment timer once the group is live.
    assert first.error_code == 0 and first.member_epoch == 1 and first.assignment == []
    assert plugin_of(h).specs == [] and h.group().group_epoch == 2
    h.sleep(0)
    assert h.timer.offloaded_plugins == 1 and h.group().assignment_epoch == 2
    assert a.ack().member_epoch == 2
    assert owned(a) == {h.topic_id("foo"): [0, 1, 2, 3]}
    assert plugin_of(h).names == ["foo"]  # the describer names the topics
    h.assert_replayed()


def test_a_plugins_target_is_computed_off_the_loop_and_recognisable() -> None:
    h = plugged()
    b, a, c = Client(h, "b"), Client(h, "a"), Client(h, "c")
    b.join(["foo", "bar"], server_assignor="smallest")
    h.sleep(0)
    a.join(["foo"], server_assignor="smallest")  # starts a computation for {a, b}
    assert h.group().assigning_epoch == h.group().group_epoch
    c.join(["bar"], server_assignor="smallest")  # one at a time: c's waits
    assert h.timer.offloaded_plugins == 2
    settle_plugged(h, a, b, c)
    foo, bar = h.topic_id("foo"), h.topic_id("bar")
    # a is the smallest subscriber of foo, b of bar (c subscribes to bar only).
    assert (owned(a), owned(b), owned(c)) == ({foo: [0, 1, 2, 3]}, {bar: [0, 1]}, {})
    assert h.timer.offloaded_plugins == 3 and plugin_of(h).threads
    # The hints: the subscription type and the previous target (b held everything).
    spec = plugin_of(h).specs[1]  # for {a, b}, b holding everything before
    assert spec.subscription_type is SubscriptionType.HETEROGENEOUS
    assert dict(spec.member_assignment("b")) == {foo: frozenset(range(4)), bar: frozenset({0, 1})}
    h.assert_replayed()


def test_a_plugin_runs_off_the_loop_even_where_offload_is_switched_off() -> None:
    h = plugged()
    h.shard.group_configs = _Configs({"consumer.assignor.offload.enable": "false"})
    a = Client(h, "a")
    a.join(["foo"], server_assignor="smallest")
    h.sleep(0)
    assert h.timer.offloaded_plugins == 1


def test_a_failing_plugin_keeps_the_previous_target_fails_no_heartbeat_and_is_retried() -> None:
    h = plugged(consumer_reconciling_heartbeat_interval_ms=250)
    a = Client(h, "a")
    a.join(["foo"], server_assignor="smallest")
    h.sleep(0)
    settle(h, a)
    foo = h.topic_id("foo")
    assert owned(a) == {foo: [0, 1, 2, 3]}
    epoch = h.group().assignment_epoch
    plugin = plugin_of(h)
    plugin.error = PartitionAssignorError("cannot today")

    b = Client(h, "b")
    joined = b.join(["foo"], server_assignor="smallest")
    assert joined.error_code == 0 and joined.member_epoch == epoch
    assert h.sleep(0).records == []  # computed, failed: nothing written
    group = h.group()
    assert group.assignment_epoch == epoch and group.group_epoch == epoch + 1
    assert group.assigning_epoch is None and group.assignment_failures == 1
    (failure,) = h.timer.failures
    assert isinstance(failure, TargetAssignmentFailed)
    assert str(failure) == (
        f"Failed to compute a new target assignment for epoch {epoch + 1} of group {GROUP!r} "
        f"with assignor 'smallest': PartitionAssignorError('cannot today'). The group keeps "
        f"its target of epoch {epoch}; next attempt in 1000 ms."
    )
    assert isinstance(failure.__cause__, PartitionAssignorError)
    # The members keep their assignment and heartbeat without errors; no heartbeat starts a
    # computation before the retry is due.
    calls = len(plugin.specs)
    for _ in range(3):
        assert a.ack().error_code == 0 and b.ack().error_code == 0
        # Nothing newer comes before the retry: the members heartbeat at the normal pace.
        assert a.last.heartbeat_interval_ms == b.last.heartbeat_interval_ms == 5000
    assert owned(a) == {foo: [0, 1, 2, 3]} and owned(b) == {}
    assert len(plugin.specs) == calls
    assert h.timer.deadline("assignment-" + GROUP) == h.now + 1000

    h.sleep(1000)  # the retry fails too: the next waits twice as long
    assert len(plugin.specs) == calls + 1 and h.group().assignment_failures == 2
    assert h.timer.deadline("assignment-" + GROUP) == h.now + 2000
    plugin.error = None
    h.sleep(2000)
    assert h.group().assignment_epoch == epoch + 1 and h.group().assignment_failures == 0
    assert h.group().assignment_retry_ms == 0
    settle_plugged(h, a, b)
    assert owned(a) == {foo: [0, 1, 2, 3]} and owned(b) == {}
    h.assert_replayed()


def test_the_retry_backoff_doubles_up_to_a_minute() -> None:
    h = plugged(consumer_session_timeout_ms=600_000)  # the member outlives the wait
    a = Client(h, "a")
    plugin_of(h).error = RuntimeError("always")
    a.join(["foo"], server_assignor="smallest")
    delays = []
    for _ in range(9):
        h.sleep(0) if not delays else h.sleep(delays[-1])
        delays.append(h.timer.deadline("assignment-" + GROUP) - h.now)  # type: ignore[operator]
    assert delays == [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000]
    assert a.poll().error_code == 0 and a.epoch == 1  # still on the initial target


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ([], "returned a list, not a mapping"),
        ({"nobody": {}}, "assigned partitions to 'nobody', not a member"),
        ({"a": [1]}, "gave member 'a' a list, not a mapping"),
        ({"a": {"BAR": {0}}}, "which does not subscribe to it"),
        ({"a": {"FOO": 3}}, "not a collection of partitions"),
        ({"a": {"FOO": {4}}}, "assigned partition 4 of topic"),
        ({"a": {"FOO": {-1}}}, "assigned partition -1 of topic"),
        ({"a": {"FOO": {"0"}}}, "assigned partition '0' of topic"),
        ({"a": {"FOO": {0}}, "b": {"FOO": {0, 1}}}, "assigned partition 0 of topic"),
    ],
)
def test_an_invalid_result_is_refused_like_a_failure(result: Any, message: str) -> None:
    h = plugged()
    a, b = Client(h, "a"), Client(h, "b")
    a.join(["foo"], server_assignor="smallest")
    h.sleep(0)  # the new group's first target: a takes all
    ids = {"FOO": h.topic_id("foo"), "BAR": h.topic_id("bar")}
    plugin_of(h).result = _with_topic_ids(result, ids)
    b.join(["foo"], server_assignor="smallest")
    h.sleep(0)
    (failure,) = h.timer.failures
    assert isinstance(failure.__cause__, InvalidAssignment)
    assert message in str(failure.__cause__)
    assert h.group().assignment_epoch == 2 and h.group().assignment_failures == 1


def test_other_collections_are_accepted_and_members_left_out_get_nothing() -> None:
    h = plugged()
    a, b = Client(h, "a"), Client(h, "b")
    foo = h.topic_id("foo")
    a.join(["foo"], server_assignor="smallest")
    h.sleep(0)
    plugin_of(h).result = {"b": {foo: [3, 1]}, "a": {foo: range(0)}}
    b.join(["foo"], server_assignor="smallest")
    settle_plugged(h, a, b)
    assert (owned(a), owned(b)) == ({}, {foo: [1, 3]})
    h.assert_replayed()


def test_a_plugin_cannot_change_the_groups_state_through_its_inputs() -> None:
    h = plugged()
    a, b = Client(h, "a"), Client(h, "b")
    a.join(["foo"], server_assignor="smallest")
    h.sleep(0)
    settle(h, a)
    target_before = {m: dict(t) for m, t in h.group().target.items()}

    class Vandal(SmallestTakesAll):
        def assign(self, group: GroupSpec, topics: TopicDescriber) -> Any:
            group.assignment["a"].clear()  # type: ignore[attr-defined]
            return {}

    h.shard.consumer.assignors["smallest"] = Vandal()
    b.join(["foo"], server_assignor="smallest")
    h.sleep(0)
    (failure,) = h.timer.failures
    assert isinstance(failure.__cause__, AttributeError)  # a mappingproxy has no clear()
    assert {m: dict(t) for m, t in h.group().target.items()} == target_before


def test_built_in_assignors_keep_failing_the_heartbeat_as_in_kafka() -> None:
    """A built-in name stays on the loop (here replaced by a failing scripted one): the
    heartbeat gets UNKNOWN_SERVER_ERROR, as in Kafka (S41)."""
    h = plugged()
    h.script("range").error = "boom"
    response = Client(h, "a").join(["foo"], server_assignor="range")
    assert response.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert h.timer.offloaded == 0


def test_members_choosing_a_built_in_assignor_after_a_plugin_get_it_inline() -> None:
    h = plugged()
    a = Client(h, "a")
    a.join(["foo"], server_assignor="smallest")
    h.sleep(0)
    settle(h, a)
    assert a.ack(server_assignor="uniform").member_epoch == 3  # computed in the heartbeat
    assert h.timer.offloaded_plugins == 1 and isinstance(
        h.shard.consumer.assignors["uniform"], UniformAssignor
    )


# -- the runtime's side ----------------------------------------------------------------------


async def test_loop_timer_runs_plugins_in_their_own_threads_and_logs_failures() -> None:
    finished: asyncio.Queue[Any] = asyncio.Queue()
    timer = LoopTimer(lambda callback, _late_s: callback(5))

    def finish(value: Any, now_ms: int) -> Result:
        finished.put_nowait(value)
        return Result()

    timer.offload("plugin", lambda: threading.current_thread().name, finish, plugin=True)
    name = await asyncio.wait_for(finished.get(), 10)
    assert name.startswith("plugin-") and threading.current_thread().name != name

    def fail() -> None:
        raise TargetAssignmentFailed("Failed ... group 'g' with assignor 'smallest' ...")

    with capture_logs() as logs:
        timer.offload("assignment-g", fail, finish, plugin=True)
        value = await asyncio.wait_for(finished.get(), 10)
    assert isinstance(value, TargetAssignmentFailed)
    (entry,) = logs
    assert entry["event"] == "offloaded computation failed"
    assert entry["log_level"] == "error" and entry["key"] == "assignment-g"
    assert "group 'g' with assignor 'smallest'" in entry["error"]
    assert entry["exc_info"] is value


# -- helpers ---------------------------------------------------------------------------------


def settle_plugged(h: Harness, *clients: Client) -> None:
    """settle(), letting the offloaded computations finish (the runtime's finish events)."""
    for _ in range(5):
        h.sleep(0)
        try:
            settle(h, *clients, rounds=2)
            return
        except AssertionError:
            continue
    settle(h, *clients)


class _Configs:
    def __init__(self, overrides: dict[str, str]) -> None:
        self._overrides = overrides

    def overrides(self, group_id: str) -> dict[str, str]:
        return self._overrides


def _with_topic_ids(value: Any, ids: Mapping[str, uuid.UUID]) -> Any:
    """`value` with the topic names of `ids` replaced by the ids (in mapping keys)."""
    if isinstance(value, dict):
        return {
            ids.get(k, k) if isinstance(k, str) else k: _with_topic_ids(v, ids)
            for k, v in value.items()
        }
    return value

"""Consumer groups (KIP-848) on a pure GroupShard under random schedules (hypothesis).

A handful of consumers (some static) drive one group through the shard, as real clients
would: they join with random subscriptions among three topics (by names, or by a regular
expression, which a topic created later may also match), heartbeat acknowledging the
assignment of their last response (what a client owns after revoking what it lost), or
without TopicPartitions, leave (-1), leave temporarily (-2, static) and come back under a
new member id, lose responses (the next heartbeat is then a full one, at the epoch the
client still knows), and rejoin with epoch 0 when fenced. Time jumps past session
timeouts, rebalance timeouts and the assignment interval; topics grow, one is created.
Checked after every
step:

* no partition is held (assigned or pending revocation) by two members, and the group's
  owner index is exactly what the members hold (replay itself raises DoubleOwnership);
* a member id's epoch never goes down while it stays in the group (a static member's -2
  aside), the group epoch never goes down and the assignment epoch never passes it;
* every held partition exists, and its assignment epoch is between 0 and the member epoch;
* a member is assigned partitions of the topics it subscribes to only (those of a topic it
  dropped are pending revocation at most);
* a client in sync with its member owns exactly the member's assigned partitions (the
  Assignment field is sent whenever they change);
* a heartbeat answered with an error wrote nothing;
* the live group equals the group a replay of the log rebuilds;
and at the end, once every consumer is back and keeps acknowledging with nothing else
changing (no regex resolution on its way either: a regex new to the group moves no epoch
until it is resolved, so the group may be Stable for a moment before it), the group is
Stable: every member STABLE at the group epoch holding exactly its
target, every subscribed partition held once, by a subscriber, and (uniform assignor, same
subscription everywhere) member sizes differ by at most one.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.groups.consumer.group import ConsumerGroup, ConsumerGroupState
from groupcoord.coordinator.groups.consumer.member import MemberState
from groupcoord.protocol.errors import ErrorCode
from tests.unit.consumer_support import GROUP, Harness

TOPICS = {"t0": 4, "t1": 3, "t2": 2}
NAMES = sorted(TOPICS)
CREATED = ("t3", 2)  # the topic the "create" operation adds
SESSION_MS = 45_000
REBALANCE_MS = 8_000
SLOTS = 4
STATIC_SLOTS = {2, 3}

# A subscription: a tuple of topic names, or a regular expression (str).
Subscription = tuple[str, ...] | str
SUBSCRIPTIONS: list[Subscription] = [
    *(
        names
        for mask in range(1, 1 << len(NAMES))
        if (names := tuple(n for i, n in enumerate(NAMES) if mask >> i & 1))
    ),
    "t[0-9]",
    "t[13]",
]

TP = tuple[uuid.UUID, int]


@dataclass
class Consumer:
    slot: int
    subscription: Subscription
    instance_id: str | None
    generation: int = 0
    member_id: str = ""
    active: bool = False  # believes it is in the group
    left_static: bool = False  # sent -2: comes back under a new member id
    epoch: int = 0
    owned: list[tuple[uuid.UUID, list[int]]] = field(default_factory=list)
    needs_full: bool = False  # lost a response: the next heartbeat is a full one

    def __post_init__(self) -> None:
        self.member_id = f"c{self.slot}-0"

    def owned_set(self) -> set[TP]:
        return {(t, p) for t, ps in self.owned for p in ps}


class Run:
    def __init__(self, interval_ms: int, assignor: str, subscriptions: list[Subscription]) -> None:
        self.h = Harness(
            dict(TOPICS),
            consumer_assignment_interval_ms=interval_ms,
            consumer_session_timeout_ms=SESSION_MS,
        )
        self.interval_ms = interval_ms
        self.assignor = assignor
        self.consumers = [
            Consumer(i, subscriptions[i], f"instance-{i}" if i in STATIC_SLOTS else None)
            for i in range(SLOTS)
        ]
        self.epochs: dict[str, int] = {}
        self.group_epoch = 0
        self.assignment_epoch = 0

    # -- the clients ---------------------------------------------------------------------

    def send(self, c: Consumer, lost: bool = False, **fields: Any) -> Any:
        if c.instance_id is not None:
            fields.setdefault("instance_id", c.instance_id)
        before = len(self.h.log)
        response = self.h.heartbeat(member_id=c.member_id, **fields)
        if response.error_code is not ErrorCode.NONE:
            assert len(self.h.log) == before, "a failed heartbeat wrote records"
        if lost:
            c.needs_full = True
            return None
        if response.error_code is ErrorCode.NONE:
            c.epoch = response.member_epoch
            if response.assignment is not None:
                c.owned = [(t, list(ps)) for t, ps in response.assignment]
                c.needs_full = False
        else:
            # Fenced or refused: abandon everything and rejoin later (epoch 0).
            c.active = False
            c.owned = []
        return response

    def join(self, c: Consumer, lost: bool = False) -> None:
        if c.left_static:
            c.generation += 1
            c.member_id = f"c{c.slot}-{c.generation}"
            c.left_static = False
        c.active = True
        c.epoch = 0
        c.owned = []
        self.send(
            c,
            lost,
            member_epoch=0,
            rebalance_timeout_ms=REBALANCE_MS,
            server_assignor=self.assignor,
            topic_partitions=[],
            **subscription_fields(c.subscription),
        )

    def ack(
        self, c: Consumer, lost: bool = False, subscription: Subscription | None = None
    ) -> None:
        fields: dict[str, Any] = {"member_epoch": c.epoch, "topic_partitions": c.owned}
        if subscription is not None:
            c.subscription = subscription
            fields.update(subscription_fields(subscription))
        if c.needs_full:
            fields.update(rebalance_timeout_ms=REBALANCE_MS, **subscription_fields(c.subscription))
        self.send(c, lost, **fields)

    def poll(self, c: Consumer, lost: bool = False) -> None:
        if c.needs_full:
            self.ack(c, lost)
        else:
            self.send(c, lost, member_epoch=c.epoch)

    def leave(self, c: Consumer, epoch: int) -> None:
        self.send(c, member_epoch=epoch)
        c.active = False
        c.owned = []
        c.needs_full = False
        if epoch == -2:
            c.left_static = True

    # -- operations ----------------------------------------------------------------------

    def step(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        h = self.h
        if kind == "grow":
            name = NAMES[op[1]]
            tid = h.topic_id(name)
            h.topics.add(name, h.topics.num_partitions(tid) + op[2])
            return
        if kind == "create":
            if h.topics.topic_id(CREATED[0]) is None:
                h.topics.add(*CREATED)
            return
        if kind == "sleep":
            h.sleep(
                {
                    "short": 200,
                    "interval": max(self.interval_ms, 1),
                    "rebalance": REBALANCE_MS + 1,
                    "session": SESSION_MS + 1,
                }[op[1]]
            )
            return
        c = self.consumers[op[1]]
        lost = op[2]
        if not c.active:
            if kind in ("join", "ack", "poll"):
                self.join(c, lost)
            return
        if kind == "join":
            self.join(c, lost)  # a rejoin at epoch 0 (client restarted its reconciliation)
        elif kind == "ack":
            self.ack(c, lost, SUBSCRIPTIONS[op[3]] if op[3] is not None else None)
        elif kind == "poll":
            self.poll(c, lost)
        elif kind == "leave":
            self.leave(c, -1)
        elif kind == "static_leave":
            self.leave(c, -2 if c.instance_id is not None else -1)

    # -- invariants ----------------------------------------------------------------------

    def group(self) -> ConsumerGroup | None:
        return self.h.shard.consumer_group(GROUP)

    def check(self) -> None:
        self.h.assert_replayed()
        group = self.group()
        if group is None:
            return
        # Epochs.
        assert group.group_epoch >= self.group_epoch
        assert group.assignment_epoch >= self.assignment_epoch
        assert group.assignment_epoch <= group.group_epoch
        self.group_epoch, self.assignment_epoch = group.group_epoch, group.assignment_epoch
        for member_id in list(self.epochs):
            if member_id not in group.metadata:
                del self.epochs[member_id]  # removed: a rejoin starts afresh
        holders: dict[TP, str] = {}
        image = self.h.topics
        for meta, member in group.iter_members():
            member_id = member.member_id
            epoch = member.member_epoch
            last = self.epochs.get(member_id)
            if last is not None and last != -2 and epoch != -2:
                assert epoch >= last, (member_id, last, epoch)
            self.epochs[member_id] = epoch
            # Ownership.
            for source in (member.assigned_partitions, member.partitions_pending_revocation):
                for topic, epochs in source.items():
                    for p, assignment_epoch in epochs.items():
                        assert (topic, p) not in holders, (topic, p, holders[(topic, p)])
                        holders[(topic, p)] = member_id
                        assert 0 <= p < image.num_partitions(topic)
                        if epoch >= 0:
                            assert 0 <= assignment_epoch <= epoch
                        else:
                            assert assignment_epoch == 0
            if epoch == -2:
                assert not member.partitions_pending_revocation
            # Partitions of a topic the member no longer subscribes to are only ever pending
            # revocation (no topic is deleted here).
            assert set(member.assigned_partitions) <= subscribed_ids(
                group, meta, image, self.h.timer
            ), (
                member_id,
                meta,
            )
        indexed = {(t, p): m for t, ps in group.owners.items() for p, m in ps.items()}
        assert indexed == holders
        # Clients in sync with their members.
        for c in self.consumers:
            current = group.member(c.member_id)
            if not c.active or c.needs_full or current is None or current.member_epoch < 0:
                continue
            assigned = {(t, p) for t, ps in current.assigned_partitions.items() for p in ps}
            assert c.owned_set() == assigned, (c.member_id, c.owned_set(), assigned)
            assert c.epoch == current.member_epoch

    # -- convergence ---------------------------------------------------------------------

    def converge(self) -> None:
        for c in self.consumers:
            if not c.active:
                self.join(c)
        for _ in range(12):
            # A regex resolution may wait up to 10 s after the previous one.
            due_ms = self.h.timer.deadline(f"regex-{GROUP}")
            self.h.sleep(max(self.interval_ms, 1, (due_ms or 0) - self.h.now))
            for c in self.consumers:
                if c.active:
                    self.ack(c)
                if not c.active:
                    self.join(c)
                self.check()
            group = self.group()
            assert group is not None
            # As in Kafka, a regex that is new to the group moves no epoch until it is
            # resolved: the group may be Stable with that resolution on its way, which will
            # bump the epoch. Converged means Stable with nothing pending.
            if group.state() is ConsumerGroupState.STABLE and not self.h.timer.is_scheduled(
                f"regex-{GROUP}"
            ):
                break
        group = self.group()
        assert group is not None
        assert not self.h.timer.is_scheduled(f"regex-{GROUP}")
        assert group.state() is ConsumerGroupState.STABLE, group.state()
        assert group.assignment_epoch == group.group_epoch
        assert set(group.metadata) == {c.member_id for c in self.consumers}
        image = self.h.topics
        held: dict[TP, str] = {}
        sizes = []
        for meta, member in group.iter_members():
            assert member.state is MemberState.STABLE
            assert member.member_epoch == group.assignment_epoch
            assert not member.partitions_pending_revocation
            assigned = {t: frozenset(ps) for t, ps in member.assigned_partitions.items()}
            assert assigned == dict(group.target.get(member.member_id, {}))
            subscribed = subscribed_ids(group, meta, image, self.h.timer)
            for topic, parts in assigned.items():
                assert topic in subscribed
                for p in parts:
                    held[(topic, p)] = member.member_id
            sizes.append(sum(len(ps) for ps in assigned.values()))
        everything = {
            (tid, p)
            for c in self.consumers
            for name in matching(c.subscription, image.topic_names())
            if (tid := image.topic_id(name)) is not None
            for p in range(image.num_partitions(tid))
        }
        assert set(held) == everything
        same = all(c.subscription == self.consumers[0].subscription for c in self.consumers)
        if self.assignor == "uniform" and same:
            assert max(sizes) - min(sizes) <= 1, sizes


def subscription_fields(subscription: Subscription) -> dict[str, Any]:
    """A heartbeat's subscription: names (clearing any regex) or a regex (and no names)."""
    if isinstance(subscription, str):
        return {"subscribed_topic_names": [], "subscribed_topic_regex": subscription}
    return {"subscribed_topic_names": list(subscription), "subscribed_topic_regex": ""}


def matching(subscription: Subscription, names: Any) -> list[str]:
    if isinstance(subscription, str):
        return [n for n in names if re.fullmatch(subscription, n)]
    return list(subscription)


def subscribed_ids(group: ConsumerGroup, meta: Any, image: Any, timer: Any) -> set[uuid.UUID]:
    """The member's topics as the group knows them: names, and its regex's resolution."""
    names = set(meta.subscribed_topic_names)
    if meta.subscribed_topic_regex:
        resolved = group.resolved_regexes.get(meta.subscribed_topic_regex)
        if resolved is None:  # matches nothing until its resolution, which is on its way
            assert timer.is_scheduled(f"regex-{group.group_id}"), meta.subscribed_topic_regex
        else:
            names.update(resolved.topics)
    return {tid for n in names if (tid := image.topic_id(n)) is not None}


slot = st.integers(0, SLOTS - 1)
lost = st.sampled_from([False, False, False, True])
ops = st.one_of(
    st.tuples(st.just("join"), slot, lost),
    st.tuples(
        st.just("ack"),
        slot,
        lost,
        st.one_of(st.none(), st.integers(0, len(SUBSCRIPTIONS) - 1)),
    ),
    st.tuples(st.just("ack"), slot, lost, st.none()),
    st.tuples(st.just("ack"), slot, lost, st.none()),
    st.tuples(st.just("poll"), slot, lost),
    st.tuples(st.just("leave"), slot, st.just(False)),
    st.tuples(st.just("static_leave"), slot, st.just(False)),
    st.tuples(st.just("sleep"), st.sampled_from(["short", "interval", "rebalance", "session"])),
    st.tuples(st.just("grow"), st.integers(0, len(NAMES) - 1), st.integers(1, 3)),
    st.tuples(st.just("create")),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Every member expires; the regex member's rejoin brings its regex back, unresolved: the
# group is Stable for a moment with the resolution on its way (as in Kafka).
@example(
    interval_ms=0,
    assignor="uniform",
    homogeneous=False,
    subscriptions=[0, 0, 0, 7],
    steps=[("join", 0, False)] * 9
    + [
        ("join", 3, False),
        ("leave", 0, False),
        ("leave", 0, False),
        ("leave", 0, False),
        ("sleep", "session"),
        ("join", 0, True),
    ],
)
@given(
    interval_ms=st.sampled_from([0, 1000]),
    assignor=st.sampled_from(["uniform", "uniform", "range"]),
    homogeneous=st.booleans(),
    subscriptions=st.lists(st.integers(0, len(SUBSCRIPTIONS) - 1), min_size=SLOTS, max_size=SLOTS),
    steps=st.lists(ops, min_size=15, max_size=60),
)
def test_consumer_group_is_safe_replayable_and_converges(
    interval_ms: int,
    assignor: str,
    homogeneous: bool,
    subscriptions: list[int],
    steps: list[tuple[Any, ...]],
) -> None:
    if homogeneous:
        subscriptions = [subscriptions[0]] * SLOTS
    run = Run(interval_ms, assignor, [SUBSCRIPTIONS[i] for i in subscriptions])
    for op in steps:
        if homogeneous and op[0] == "ack" and op[3] is not None:
            op = (*op[:3], None)  # keep the subscriptions homogeneous
        run.step(op)
        run.check()
    run.converge()

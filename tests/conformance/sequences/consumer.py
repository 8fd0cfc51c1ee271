"""KIP-848 consumer groups: ConsumerGroupHeartbeat (join, steady state, leave, static leave
with epoch -2, unknown member, fenced epoch, invalid requests), ConsumerGroupDescribe, and how
the classic APIs see a consumer group."""

from __future__ import annotations

from tests.conformance.ops import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    TOPIC,
    TOPIC2,
    UNKNOWN_TOPIC,
    commit,
    consumer_heartbeat,
    describe,
    fetch_offsets,
    list_groups,
    owned_from,
    topic_ids,
)
from tests.conformance.runner import Session, sequence


def _member(s: Session, name: str = "a") -> str:
    """A client-chosen member id (v1): the same on both servers."""
    return f"{s.slug}-{name}"[-36:]


def _joined(s: Session, group: str, conn: str = "a", topics: list[str] | None = None) -> tuple:
    """A member that joined and acknowledged its assignment: (member id, epoch, owned)."""
    ids = topic_ids(s)
    member = _member(s, conn)
    first = consumer_heartbeat(
        s, conn, group, member, 0, topics=topics or [TOPIC], label=f"join {conn}"
    )
    owned = owned_from(first, ids)
    ack = consumer_heartbeat(
        s, conn, group, member, first.member_epoch, owned=owned, topic_ids=ids, label="ack"
    )
    return member, ack.member_epoch, owned


def _describe(s: Session, groups: list[str], label: str = "consumer group describe") -> None:
    s.call(
        "d",
        CONSUMER_GROUP_DESCRIBE,
        0,
        label,
        group_ids=groups,
        include_authorized_operations=False,
    )


@sequence("consumer/v0-join-server-generated-member-id")
def _(s: Session) -> None:
    group = s.group()
    joined = consumer_heartbeat(s, "a", group, "", 0, version=0, topics=[TOPIC], label="join")
    consumer_heartbeat(s, "a", group, joined.member_id, -1, version=0, label="leave")


@sequence("consumer/v1-join-ack-steady-leave")
def _(s: Session) -> None:
    group = s.group()
    member, epoch, owned = _joined(s, group)
    consumer_heartbeat(s, "a", group, member, epoch, label="steady heartbeat")
    consumer_heartbeat(s, "a", group, member, -1, label="leave")
    consumer_heartbeat(s, "a", group, member, epoch, label="heartbeat after leaving")


@sequence("consumer/v1-join-two-topics")
def _(s: Session) -> None:
    group = s.group()
    member, epoch, _owned = _joined(s, group, topics=[TOPIC, TOPIC2])
    consumer_heartbeat(s, "a", group, member, epoch, label="steady heartbeat")


@sequence("consumer/v1-subscribe-to-unknown-topic")
def _(s: Session) -> None:
    group = s.group()
    member = _member(s)
    joined = consumer_heartbeat(s, "a", group, member, 0, topics=[UNKNOWN_TOPIC], label="join")
    consumer_heartbeat(s, "a", group, member, joined.member_epoch, label="heartbeat")


@sequence("consumer/v1-unknown-member")
def _(s: Session) -> None:
    group = s.group()
    consumer_heartbeat(s, "a", group, "no-such-member", 3, label="unknown member, new group")
    _joined(s, group)
    consumer_heartbeat(s, "b", group, "no-such-member", 3, label="unknown member")


@sequence("consumer/v1-fenced-epoch")
def _(s: Session) -> None:
    group = s.group()
    member, epoch, _owned = _joined(s, group)
    consumer_heartbeat(s, "a", group, member, epoch + 1, label="epoch from the future")
    consumer_heartbeat(s, "a", group, member, epoch, label="after being fenced")


@sequence("consumer/v1-invalid-requests")
def _(s: Session) -> None:
    group = s.group()
    member = _member(s)
    consumer_heartbeat(s, "a", group, member, 0, topics=None, label="join: no subscription")
    s.call(
        "a",
        CONSUMER_GROUP_HEARTBEAT,
        1,
        "join: owned partitions null",
        group_id=group,
        member_id=member,
        member_epoch=0,
        rebalance_timeout=30_000,
        subscribed_topic_names=[TOPIC],
        topic_partitions=None,
    )
    consumer_heartbeat(s, "a", group, "", 0, topics=[TOPIC], label="join: empty member id")
    consumer_heartbeat(s, "a", "", member, 0, topics=[TOPIC], label="join: empty group id")
    consumer_heartbeat(
        s, "a", group, member, 0, topics=[TOPIC], rebalance_ms=-1, label="join: no timeout"
    )
    consumer_heartbeat(
        s, "a", group, member, 0, topics=[TOPIC], assignor="no-such", label="unknown assignor"
    )
    consumer_heartbeat(s, "a", group, member, -3, topics=[TOPIC], label="epoch -3")


@sequence("consumer/v1-server-assignors")
def _(s: Session) -> None:
    for assignor in ("uniform", "range"):
        group = s.group(assignor)
        member = _member(s, assignor)
        consumer_heartbeat(
            s, "a", group, member, 0, topics=[TOPIC, TOPIC2], assignor=assignor, label=assignor
        )


@sequence("consumer/v1-static-member-leave-and-return")
def _(s: Session) -> None:
    """A static member leaves with epoch -2 (keeping its place), then a new instance with the
    same instance id rejoins and gets the same partitions back."""
    group = s.group()
    ids = topic_ids(s)
    member = _member(s, "a")
    first = consumer_heartbeat(
        s, "a", group, member, 0, topics=[TOPIC], instance_id="i1", label="join static"
    )
    owned = owned_from(first, ids)
    consumer_heartbeat(
        s,
        "a",
        group,
        member,
        first.member_epoch,
        instance_id="i1",
        owned=owned,
        topic_ids=ids,
        label="ack",
    )
    consumer_heartbeat(s, "a", group, member, -2, instance_id="i1", label="static leave")
    _describe(s, [group], "describe after static leave")
    member2 = _member(s, "a2")
    consumer_heartbeat(
        s, "a2", group, member2, 0, topics=[TOPIC], instance_id="i1", label="new instance joins"
    )
    consumer_heartbeat(s, "a", group, member, 1, instance_id="i1", label="old instance: fenced?")
    _describe(s, [group], "describe after return")


@sequence("consumer/v1-static-instance-in-use")
def _(s: Session) -> None:
    group = s.group()
    consumer_heartbeat(s, "a", group, _member(s, "a"), 0, topics=[TOPIC], instance_id="i1")
    consumer_heartbeat(
        s, "b", group, _member(s, "b"), 0, topics=[TOPIC], instance_id="i1", label="same instance"
    )


@sequence("consumer/describe-consumer-classic-and-unknown-groups")
def _(s: Session) -> None:
    consumer, classic, unknown = s.group("consumer"), s.group("classic"), s.group("unknown")
    _joined(s, consumer)
    commit(s, "a", classic, {(TOPIC, 0): 1})
    for version in (0, 1):
        s.call(
            "d",
            CONSUMER_GROUP_DESCRIBE,
            version,
            f"consumer group describe v{version}",
            group_ids=[consumer, classic, unknown],
            include_authorized_operations=False,
        )


@sequence("consumer/classic-apis-on-a-consumer-group")
def _(s: Session) -> None:
    group = s.group()
    member, epoch, _owned = _joined(s, group)
    for version in (0, 5, 6):
        describe(s, "c", [group], version=version, label=f"describe groups v{version}")
    list_groups(s, "c", version=5, label="list groups")
    list_groups(s, "c", version=5, types=["consumer"], label="list consumer groups")
    list_groups(s, "c", version=4, states=["Stable"], label="list stable groups")


@sequence("consumer/offset-commit-with-member-epoch")
def _(s: Session) -> None:
    group = s.group()
    member, epoch, _owned = _joined(s, group)
    commit(s, "a", group, {(TOPIC, 0): 5}, generation=epoch, member_id=member, label="epoch")
    commit(
        s,
        "a",
        group,
        {(TOPIC, 0): 6},
        generation=epoch + 1,
        member_id=member,
        label="newer epoch",
    )
    commit(
        s,
        "a",
        group,
        {(TOPIC, 0): 6},
        generation=epoch - 1,
        member_id=member,
        label="older epoch",
    )
    commit(
        s,
        "a",
        group,
        {(TOPIC, 0): 7},
        generation=epoch,
        member_id="no-such-member",
        label="unknown member",
    )
    commit(s, "a", group, {(TOPIC, 0): 8}, label="generation -1, no member")
    fetch_offsets(s, "a", group, {TOPIC: [0]}, version=8)
    commit(
        s,
        "a",
        group,
        {(TOPIC, 0): 9},
        generation=epoch,
        member_id=member,
        version=8,
        label="v8 with epoch",
    )


@sequence("consumer/offset-fetch-v9-member-epoch")
def _(s: Session) -> None:
    group = s.group()
    member, epoch, _owned = _joined(s, group)
    commit(s, "a", group, {(TOPIC, 0): 5}, generation=epoch, member_id=member)
    for label, member_id, member_epoch in (
        ("right epoch", member, epoch),
        ("stale epoch", member, epoch - 1),
        ("unknown member", "no-such-member", epoch),
    ):
        s.call(
            "a",
            9,
            9,
            label,
            groups=[
                {
                    "group_id": group,
                    "member_id": member_id,
                    "member_epoch": member_epoch,
                    "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                }
            ],
            require_stable=False,
        )


@sequence("consumer/regex-subscription")
def _(s: Session) -> None:
    """A regex beside a literal topic: Kafka resolves new regexes asynchronously (the first
    assignment holds the literal topics only)."""
    group = s.group()
    member = _member(s)
    first = consumer_heartbeat(
        s, "a", group, member, 0, topics=[TOPIC], regex="cf-u.*", label="join with a regex"
    )
    s.sleep(2.0)
    consumer_heartbeat(s, "a", group, member, first.member_epoch, label="heartbeat after 2 s")


@sequence("consumer/regex-empty-means-none")
def _(s: Session) -> None:
    group = s.group()
    consumer_heartbeat(s, "a", group, _member(s), 0, topics=[TOPIC], regex="", label="join")


@sequence("consumer/regex-invalid")
def _(s: Session) -> None:
    group = s.group()
    consumer_heartbeat(s, "a", group, _member(s), 0, topics=None, regex="cf-(", label="join")


@sequence("consumer/regex-resolved-later-acknowledged")
def _(s: Session) -> None:
    """Issue 17 item 7b step by step: the literal topic first, the regex's topic a heartbeat
    after its asynchronous resolution, then acknowledged; the group described."""
    group = s.group()
    ids = topic_ids(s)
    a = _member(s, "a")
    first = consumer_heartbeat(
        s, "a", group, a, 0, topics=[TOPIC], regex="cf-u.*", label="a joins: cf-t, regex"
    )
    s.sleep(2.0)
    second = consumer_heartbeat(
        s,
        "a",
        group,
        a,
        first.member_epoch,
        owned=owned_from(first, ids),
        topic_ids=ids,
        label="a 2 s on: the regex's topic arrives",
    )
    consumer_heartbeat(
        s,
        "a",
        group,
        a,
        second.member_epoch,
        owned=owned_from(second, ids),
        topic_ids=ids,
        label="a acknowledges",
    )
    _describe(s, [group])


@sequence("consumer/regex-only-then-names")
def _(s: Session) -> None:
    """A member subscribed by a new regex alone gets nothing until the regex is resolved;
    dropping the regex for the same topics by name moves the epoch at once."""
    group = s.group()
    ids = topic_ids(s)
    a = _member(s)
    first = consumer_heartbeat(
        s, "a", group, a, 0, topics=[], regex="cf-[tu]", label="join with a regex only"
    )
    s.sleep(2.0)
    second = consumer_heartbeat(
        s, "a", group, a, first.member_epoch, owned={}, topic_ids=ids, label="2 s on"
    )
    s.sleep(1.5)  # past the assignment interval
    consumer_heartbeat(
        s,
        "a",
        group,
        a,
        second.member_epoch,
        regex="",
        topics=[TOPIC, TOPIC2],
        owned=owned_from(second, ids),
        topic_ids=ids,
        label="the same topics by name",
    )
    _describe(s, [group])

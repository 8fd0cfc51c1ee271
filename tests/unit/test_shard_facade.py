"""GroupShard as a facade (groups/shard.py): its replay refuses record types it does not
know, and its reads answer both kinds of groups through the reply, as the gateway's events
use them."""

from __future__ import annotations

from typing import Any

import pytest

from groupcoord.coordinator.groups.config import GroupConfig
from groupcoord.coordinator.groups.consumer.messages import HeartbeatRequest
from groupcoord.coordinator.groups.shard import GroupShard
from groupcoord.coordinator.groups.testing import ManualTimer, SequentialIds
from groupcoord.coordinator.groups.topics import StaticTopicImage
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import GroupMetadataKey, UnknownRecordType


def _shard() -> GroupShard:
    topics = StaticTopicImage()
    topics.add("t", 2)
    return GroupShard(
        0, GroupConfig(consumer_assignment_interval_ms=0), ManualTimer(), SequentialIds(), topics
    )


def _apply(shard: GroupShard, result: Any) -> list[Any]:
    """Replay a Result's records as the runtime does; its replies' answers."""
    for key, value in result.records:
        shard.replay(key, value, 0)
    return [response for _, response in result.replies]


def test_replay_refuses_a_record_type_it_does_not_know() -> None:
    shard = _shard()
    with pytest.raises(UnknownRecordType):
        shard.replay(object(), None, 0)
    shard.replay(GroupMetadataKey("gone"), None, 0)  # a known type: a tombstone, no-op


def test_reads_answer_both_kinds_of_groups_through_the_reply() -> None:
    shard = _shard()
    shard.get_or_create_classic_group("classic", 0)
    join = HeartbeatRequest(
        "consumer",
        "m1",
        0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )
    (joined,) = _apply(shard, shard.consumer_group_heartbeat(join, lambda r: None, 0))
    assert joined.error_code == ErrorCode.NONE

    (listed,) = _apply(shard, shard.list_groups([], [], lambda r: None))
    assert sorted((g.group_id, g.group_type) for g in listed) == [
        ("classic", "classic"),
        ("consumer", "consumer"),
    ]
    (described,) = _apply(shard, shard.describe_groups(["classic", "consumer"], 5, lambda r: None))
    assert [(d.group_id, d.group_state) for d in described] == [
        ("classic", "Empty"),
        ("consumer", "Dead"),  # a consumer group is not a classic group
    ]
    (consumer,) = _apply(shard, shard.consumer_group_describe(["consumer"], lambda r: None))
    assert [m.member_id for m in consumer[0].members] == ["m1"]


def test_steady_heartbeat_checks_and_answers_at_once_or_declines() -> None:
    shard = _shard()
    join = HeartbeatRequest(
        "g",
        "m1",
        0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )
    (joined,) = _apply(shard, shard.consumer_group_heartbeat(join, lambda r: None, 0))
    epoch = joined.member_epoch
    owned = HeartbeatRequest("g", "m1", epoch, topic_partitions=joined.assignment)
    _apply(shard, shard.consumer_group_heartbeat(owned, lambda r: None, 0))
    steady = shard.steady_consumer_group_heartbeat("g", "m1", epoch, None, "", "")
    assert steady is not None and (steady.member_epoch, steady.error_code) == (epoch, 0)
    # Fenced, unknown or another client: declined, nothing changed.
    assert shard.steady_consumer_group_heartbeat("g", "m1", epoch + 1, None, "", "") is None
    assert shard.steady_consumer_group_heartbeat("g", "nobody", epoch, None, "", "") is None
    assert shard.steady_consumer_group_heartbeat("g", "m1", epoch, None, "other", "") is None

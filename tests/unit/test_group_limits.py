"""What one client may make the group coordinator hold (issue 16, item 10), on a pure shard:
the protocol metadata of a classic member (JoinGroup) and the subscription of a
consumer-protocol member (ConsumerGroupHeartbeat) are bounded by
group_member_metadata_bytes_max, a leader's SyncGroup assignments by
group_member_assignment_bytes_max (refused with UNKNOWN_SERVER_ERROR, Kafka's answer when a
group record is too large for its log, and nothing written), and the number of groups by
groups_max (GROUP_MAX_SIZE_REACHED for a request that would create one more)."""

from __future__ import annotations

from groupcoord.coordinator.groups.classic.group import GroupState
from groupcoord.coordinator.groups.classic.messages import JoinGroupResponse, SyncGroupResponse
from groupcoord.coordinator.groups.config import SERVER_SETTINGS
from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.records import GroupMetadataKey
from tests.unit import consumer_support as cs
from tests.unit.test_classic_groups import DELAY
from tests.unit.test_classic_groups import Harness as ClassicHarness
from tests.unit.test_offsets import commit_request

LIMIT = 1_000


def test_the_limits_are_server_settings_with_bounded_defaults() -> None:
    assert SERVER_SETTINGS["group_member_metadata_bytes_max"].default == 1_048_576
    assert SERVER_SETTINGS["group_member_assignment_bytes_max"].default == 1_048_576
    assert SERVER_SETTINGS["groups_max"].default == 100_000


def test_join_group_with_oversized_metadata_is_refused_and_writes_nothing() -> None:
    h = ClassicHarness(member_metadata_max_bytes=LIMIT)
    # Several protocols count together: each fits, both do not.
    half = [("range", b"r" * 600), ("roundrobin", b"x" * 600)]
    for protocols in ([("range", b"r" * (LIMIT + 1))], half):
        refused = h.join(protocols=protocols)
        assert refused.response == JoinGroupResponse(ErrorCode.UNKNOWN_SERVER_ERROR, member_id="")
        assert not h.last.records and not h.last.applied_records
    assert h.shard.classic_group("group-id") is None and h.log == []
    # At the limit: the normal two-step join.
    ok = h.join(protocols=[("range", b"r" * LIMIT)])
    assert ok.response.error_code is ErrorCode.MEMBER_ID_REQUIRED


def test_join_group_of_a_known_member_growing_its_metadata_is_refused() -> None:
    h = ClassicHarness(member_metadata_max_bytes=LIMIT)
    (member_id,) = h.make_stable(None)
    before = list(h.log)
    refused = h.join(member_id, protocols=[("range", b"r" * (LIMIT + 1))])
    assert refused.response.error_code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert h.log == before and h.group().state is GroupState.STABLE


def test_sync_group_with_an_oversized_assignment_writes_nothing_and_rebalances() -> None:
    h = ClassicHarness(member_assignment_max_bytes=LIMIT)
    leader, leader_join = h.join_dynamic()
    follower, follower_join = h.join_dynamic()
    h.sleep(2 * DELAY)
    assert leader_join.response.leader == leader
    parked = h.sync(follower, 1)
    assert not parked.answered
    written = len(h.log)
    sync = h.sync(leader, 1, {leader: b"a", follower: b"b" * (LIMIT + 1)})
    assert sync.response == SyncGroupResponse(ErrorCode.UNKNOWN_SERVER_ERROR, assignment=b"")
    assert parked.response == SyncGroupResponse(ErrorCode.UNKNOWN_SERVER_ERROR, assignment=b"")
    assert len(h.log) == written  # no GroupMetadata record with the assignments
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert follower_join.answered


def test_consumer_heartbeat_with_an_oversized_subscription_is_refused() -> None:
    h = cs.Harness(topics={"foo": 3}, member_metadata_max_bytes=LIMIT)
    names = [f"topic-{i:04d}" for i in range(LIMIT // 10 + 1)]  # 10 bytes each
    response = h.join("m1", names)
    assert response.error_code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert "group_member_metadata_bytes_max" in (response.error_message or "")
    assert h.shard.consumer_group(cs.GROUP) is None and h.log == []
    regex = h.join("m1", None, subscribed_topic_regex="f" * (LIMIT + 1))
    assert regex.error_code is ErrorCode.UNKNOWN_SERVER_ERROR
    # A member in the group cannot grow it either.
    assert h.join("m1", ["foo"]).error_code is ErrorCode.NONE
    before = list(h.log)
    grown = h.heartbeat(member_id="m1", member_epoch=1, subscribed_topic_names=names)
    assert grown.error_code is ErrorCode.UNKNOWN_SERVER_ERROR
    assert h.log == before
    assert h.group().metadata["m1"].subscribed_topic_names == ("foo",)


def test_groups_max_refuses_new_groups_of_every_kind_but_not_existing_ones() -> None:
    h = cs.Harness(topics={"foo": 3}, max_groups=2)
    ok, _ = h.commit(commit_request("g1"))
    assert ok.topics[0].partitions[0].error is ErrorCode.NONE
    assert h.join("m1", ["foo"], group_id="g2").error_code is ErrorCode.NONE
    assert h.shard.group_count() == 2
    before = list(h.log)
    # OffsetCommit creating a simple group (generation -1).
    refused, result = h.commit(commit_request("g3"))
    assert refused.topics[0].partitions[0].error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert result.records == []
    # ConsumerGroupHeartbeat creating a consumer group.
    joined = h.join("m2", ["foo"], group_id="g4")
    assert joined.error_code is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert "groups_max" in (joined.error_message or "")
    # JoinGroup creating a classic group.
    classic = ClassicHarness(max_groups=0).join()
    assert classic.response == JoinGroupResponse(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id="")
    assert h.log == before and h.shard.group_count() == 2
    # Existing groups go on: a commit to g1, a second member of g2.
    again, _ = h.commit(commit_request("g1"))
    assert again.topics[0].partitions[0].error is ErrorCode.NONE
    assert h.join("m3", ["foo"], group_id="g2").error_code is ErrorCode.NONE


def test_groups_max_counts_the_whole_server() -> None:
    """The shard asks the runtime for the server's total (every shard's groups)."""
    h = cs.Harness(topics={"foo": 3}, max_groups=5)
    elsewhere = 4
    h.shard._groups_total = lambda: h.shard.group_count() + elsewhere
    assert h.commit(commit_request("g1"))[0].topics[0].partitions[0].error is ErrorCode.NONE
    refused, _ = h.commit(commit_request("g2"))
    assert refused.topics[0].partitions[0].error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert [k.group for k, _ in h.log if isinstance(k, GroupMetadataKey)] == []

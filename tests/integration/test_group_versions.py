"""Every served version of every group API, driven with a raw client: each request is
answered at its own version with the right outcome."""

from __future__ import annotations

import datetime
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from groupcoord.coordinator.server.dispatch import APIS
from groupcoord.protocol.api import ApiKey, build
from tests.integration.raw_groups import commit, fetch_offsets, subscription
from tests.integration.test_clients import create_topic
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def _versions(key: ApiKey) -> range:
    _, low, high = APIS[key]
    return range(low, high + 1)


@pytest.fixture(scope="module")
def versions_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(
        tmp_path_factory.mktemp("gv") / "data", group_initial_rebalance_delay_ms=0
    ) as proc:
        create_topic(proc.bootstrap, "gv-topic", 2)
        yield proc


def _join(client: RawClient, group: str, version: int, member_id: str = "") -> Any:
    m = _m(11, version)
    return client.request(
        11,
        version,
        build(
            m.JoinGroupRequest,
            group_id=group,
            session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10),
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            reason=None,
            protocols=(
                build(
                    m.JoinGroupRequestProtocol, name="range", metadata=subscription(["gv-topic"])
                ),
            ),
        ),
    )


@pytest.mark.parametrize("version", _versions(ApiKey.JOIN_GROUP))
def test_join_sync_heartbeat_leave_at_every_version(
    versions_server: ServerProcess, version: int
) -> None:
    group = f"gv-join-{version}"
    with RawClient(versions_server.bootstrap) as client:
        joined = _join(client, group, version)
        if version >= 4:
            assert joined.error_code == 79  # MEMBER_ID_REQUIRED
            joined = _join(client, group, version, joined.member_id)
        assert joined.error_code == 0 and joined.generation_id == 1
        assert joined.leader == joined.member_id and len(joined.members) == 1
        member, generation = joined.member_id, joined.generation_id
        sync_version = min(version, 5)
        ms = _m(14, sync_version)
        synced = client.request(
            14,
            sync_version,
            build(
                ms.SyncGroupRequest,
                group_id=group,
                generation_id=generation,
                member_id=member,
                group_instance_id=None,
                protocol_type="consumer",
                protocol_name="range",
                assignments=(
                    build(ms.SyncGroupRequestAssignment, member_id=member, assignment=b"A"),
                ),
            ),
        )
        assert synced.error_code == 0 and synced.assignment == b"A"
        hb_version = min(version, 4)
        mh = _m(12, hb_version)
        beat = client.request(
            12,
            hb_version,
            build(
                mh.HeartbeatRequest,
                group_id=group,
                generation_id=generation,
                member_id=member,
                group_instance_id=None,
            ),
        )
        assert beat.error_code == 0
        bad = client.request(
            12,
            hb_version,
            build(
                mh.HeartbeatRequest,
                group_id=group,
                generation_id=generation + 1,
                member_id=member,
                group_instance_id=None,
            ),
        )
        assert bad.error_code == 22  # ILLEGAL_GENERATION
        leave_version = min(version, 5)
        ml = _m(13, leave_version)
        left = client.request(
            13,
            leave_version,
            build(
                ml.LeaveGroupRequest,
                group_id=group,
                member_id=member,
                members=(
                    build(
                        ml.MemberIdentity, member_id=member, group_instance_id=None, reason="done"
                    ),
                )
                if leave_version >= 3
                else (),
            ),
        )
        assert left.error_code == 0
        if leave_version >= 3:
            assert [(x.member_id, x.error_code) for x in left.members] == [(member, 0)]


@pytest.mark.parametrize("version", _versions(ApiKey.OFFSET_COMMIT))
def test_offset_commit_and_fetch_at_every_version(
    versions_server: ServerProcess, version: int
) -> None:
    group = f"gv-offsets-{version}"
    with RawClient(versions_server.bootstrap) as client:
        mc = _m(8, version)
        committed = client.request(
            8,
            version,
            build(
                mc.OffsetCommitRequest,
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                retention_time=datetime.timedelta(milliseconds=-1),
                topics=(
                    build(
                        mc.OffsetCommitRequestTopic,
                        name="gv-topic",
                        partitions=(
                            build(
                                mc.OffsetCommitRequestPartition,
                                partition_index=1,
                                committed_offset=100 + version,
                                committed_leader_epoch=-1,
                                committed_metadata="m",
                            ),
                        ),
                    ),
                ),
            ),
        )
        assert [p.error_code for t in committed.topics for p in t.partitions] == [0]
    for fetch_version in _versions(ApiKey.OFFSET_FETCH):
        with RawClient(versions_server.bootstrap) as client:
            mf = _m(9, fetch_version)
            topic = build(_topic_cls(mf), name="gv-topic", partition_indexes=(1, 0))
            if fetch_version >= 8:
                resp = client.request(
                    9,
                    fetch_version,
                    build(
                        mf.OffsetFetchRequest,
                        require_stable=False,
                        groups=(
                            build(
                                mf.OffsetFetchRequestGroup,
                                group_id=group,
                                member_id=None,
                                member_epoch=-1,
                                topics=(topic,),
                            ),
                        ),
                    ),
                )
                topics = resp.groups[0].topics
            else:
                resp = client.request(
                    9,
                    fetch_version,
                    build(
                        mf.OffsetFetchRequest, group_id=group, topics=(topic,), require_stable=False
                    ),
                )
                topics = resp.topics
            got = {
                p.partition_index: (p.committed_offset, p.metadata) for p in topics[0].partitions
            }
            assert got == {1: (100 + version, "m"), 0: (-1, "")}, (version, fetch_version)


def _topic_cls(module: Any) -> Any:
    return getattr(module, "OffsetFetchRequestTopics", None) or module.OffsetFetchRequestTopic


@pytest.mark.parametrize("version", _versions(ApiKey.DESCRIBE_GROUPS))
def test_describe_groups_at_every_version(versions_server: ServerProcess, version: int) -> None:
    with RawClient(versions_server.bootstrap) as client:
        md = _m(15, version)
        resp = client.request(
            15,
            version,
            build(
                md.DescribeGroupsRequest,
                groups=("gv-offsets-9", "gv-missing"),
                include_authorized_operations=False,
            ),
        )
        found, missing = resp.groups
        assert found.group_state == "Empty" and found.error_code == 0
        assert missing.group_state == "Dead"
        assert missing.error_code == (69 if version >= 6 else 0)
        if version >= 3:
            assert found.authorized_operations == -(2**31)
            asked = client.request(
                15,
                version,
                build(
                    md.DescribeGroupsRequest,
                    groups=("gv-offsets-9",),
                    include_authorized_operations=True,
                ),
            )
            # Kafka without an authorizer: READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS and
            # ALTER_CONFIGS (bits 3, 6, 8, 10, 11).
            assert asked.groups[0].authorized_operations == 3400


@pytest.mark.parametrize("version", _versions(ApiKey.LIST_GROUPS))
def test_list_groups_at_every_version(versions_server: ServerProcess, version: int) -> None:
    with RawClient(versions_server.bootstrap) as client:
        ml = _m(16, version)
        resp = client.request(
            16,
            version,
            build(ml.ListGroupsRequest, states_filter=("EMPTY",), types_filter=("Classic",)),
        )
        assert resp.error_code == 0
        listed = {g.group_id for g in resp.groups}
        assert "gv-offsets-9" in listed
        if version >= 4:
            assert all(g.group_state == "Empty" for g in resp.groups)


@pytest.mark.parametrize("version", _versions(ApiKey.DELETE_GROUPS))
def test_delete_groups_and_offset_delete_at_every_version(
    versions_server: ServerProcess, version: int
) -> None:
    group = f"gv-delete-{version}"
    with RawClient(versions_server.bootstrap) as client:
        mc = _m(8, 9)
        client.request(
            8,
            9,
            build(
                mc.OffsetCommitRequest,
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=(
                    build(
                        mc.OffsetCommitRequestTopic,
                        name="gv-topic",
                        partitions=(
                            build(
                                mc.OffsetCommitRequestPartition,
                                partition_index=0,
                                committed_offset=5,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            ),
                        ),
                    ),
                ),
            ),
        )
        mo = _m(47, 0)
        deleted = client.request(
            47,
            0,
            build(
                mo.OffsetDeleteRequest,
                group_id=group,
                topics=(
                    build(
                        mo.OffsetDeleteRequestTopic,
                        name="gv-topic",
                        partitions=(build(mo.OffsetDeleteRequestPartition, partition_index=0),),
                    ),
                ),
            ),
        )
        assert deleted.error_code == 0
        assert deleted.topics[0].partitions[0].error_code == 0
        md = _m(42, version)
        resp = client.request(
            42, version, build(md.DeleteGroupsRequest, groups_names=(group, "gv-never"))
        )
        assert [(r.group_id, r.error_code) for r in resp.results] == [(group, 0), ("gv-never", 69)]


@pytest.mark.parametrize("version", _versions(ApiKey.CONSUMER_GROUP_DESCRIBE))
def test_consumer_group_describe_of_a_classic_group(
    versions_server: ServerProcess, version: int
) -> None:
    with RawClient(versions_server.bootstrap) as client:
        mc = _m(69, version)
        resp = client.request(
            69,
            version,
            build(
                mc.ConsumerGroupDescribeRequest,
                group_ids=("gv-offsets-9", ""),
                include_authorized_operations=False,
            ),
        )
        classic, empty = resp.groups
        assert classic.error_code == 69  # GROUP_ID_NOT_FOUND: clients use DescribeGroups
        assert empty.error_code == 24  # INVALID_GROUP_ID
        # As Kafka: an error's epochs are the response's defaults.
        assert [(g.group_epoch, g.assignment_epoch) for g in resp.groups] == [(0, 0), (0, 0)]


def test_offset_commit_v2_to_v4_retention_time_is_honoured(tmp_path: Any) -> None:
    """S128 over the wire: OffsetCommit v2-v4 carry RetentionTimeMs; a commit asking for
    300 ms expires once that has passed (the expiry check runs every 100 ms here), one
    with -1 keeps the broker's retention (7 days), and v5 has no such field."""
    with serving(tmp_path / "data", offsets_retention_check_interval_ms=100) as server:
        create_topic(server.bootstrap, "kept", 1)
        with RawClient(server.bootstrap) as client:
            for version in (2, 3, 4):
                resp = commit(
                    client, f"short-{version}", {("kept", 0): 5}, version=version, retention_ms=300
                )
                assert resp.topics[0].partitions[0].error_code == 0
            commit(client, "default", {("kept", 0): 6}, version=2, retention_ms=-1)
            commit(client, "v5", {("kept", 0): 7}, version=5, retention_ms=300)
            time.sleep(1.5)
            for version in (2, 3, 4):
                assert fetch_offsets(client, f"short-{version}", {"kept": [0]}) == {("kept", 0): -1}
            assert fetch_offsets(client, "default", {"kept": [0]}) == {("kept", 0): 6}
            assert fetch_offsets(client, "v5", {"kept": [0]}) == {("kept", 0): 7}


def test_describe_groups_of_a_consumer_group_is_dead(versions_server: ServerProcess) -> None:
    """Kafka's DescribeGroups only describes classic groups: a KIP-848 consumer group is
    "Dead" (GROUP_ID_NOT_FOUND from v6), client-compat 9; ConsumerGroupDescribe describes it."""
    group = "gv-consumer"
    with RawClient(versions_server.bootstrap) as client:
        mh = _m(68, 1)
        joined = client.request(
            68,
            1,
            build(
                mh.ConsumerGroupHeartbeatRequest,
                group_id=group,
                member_id="gv-consumer-member-1",
                member_epoch=0,
                rebalance_timeout=datetime.timedelta(milliseconds=5000),
                subscribed_topic_names=("gv-topic",),
                topic_partitions=(),
            ),
        )
        assert joined.error_code == 0 and joined.member_epoch > 0
        for version in _versions(ApiKey.DESCRIBE_GROUPS):
            md = _m(15, version)
            described = client.request(
                15,
                version,
                build(
                    md.DescribeGroupsRequest, groups=(group,), include_authorized_operations=False
                ),
            ).groups[0]
            assert (described.group_state, described.members) == ("Dead", ()), version
            assert described.error_code == (69 if version >= 6 else 0), version
        mc = _m(69, 0)
        consumer = client.request(
            69,
            0,
            build(
                mc.ConsumerGroupDescribeRequest,
                group_ids=(group,),
                include_authorized_operations=False,
            ),
        ).groups[0]
        assert consumer.error_code == 0
        assert [m.member_id for m in consumer.members] == ["gv-consumer-member-1"]

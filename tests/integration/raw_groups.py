"""Classic-protocol requests sent with the raw client (exact versions, e.g. JoinGroup v9)."""

from __future__ import annotations

import datetime
import struct
import sys
from typing import Any

from groupcoord.protocol.api import build
from tests.rawclient import RawClient, request_class


def _m(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def join(
    client: RawClient,
    group: str,
    member_id: str = "",
    instance_id: str | None = None,
    version: int = 9,
    session_timeout_ms: int = 10_000,
    rebalance_timeout_ms: int = 10_000,
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
) -> Any:
    m = _m(11, version)
    protocols = protocols or [("range", subscription(["t"]))]
    return client.request(
        11,
        version,
        build(
            m.JoinGroupRequest,
            group_id=group,
            session_timeout=datetime.timedelta(milliseconds=session_timeout_ms),
            rebalance_timeout=datetime.timedelta(milliseconds=rebalance_timeout_ms),
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=tuple(
                build(m.JoinGroupRequestProtocol, name=n, metadata=md) for n, md in protocols
            ),
            reason=None,
        ),
    )


def sync(
    client: RawClient,
    group: str,
    generation: int,
    member_id: str,
    assignments: dict[str, bytes] | None = None,
    instance_id: str | None = None,
    version: int = 5,
) -> Any:
    m = _m(14, version)
    return client.request(
        14,
        version,
        build(
            m.SyncGroupRequest,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=tuple(
                build(m.SyncGroupRequestAssignment, member_id=k, assignment=v)
                for k, v in (assignments or {}).items()
            ),
        ),
    )


def heartbeat(
    client: RawClient,
    group: str,
    generation: int,
    member_id: str,
    instance_id: str | None = None,
    version: int = 4,
) -> Any:
    m = _m(12, version)
    return client.request(
        12,
        version,
        build(
            m.HeartbeatRequest,
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
        ),
    )


def join_until_member(client: RawClient, group: str, **kwargs: Any) -> Any:
    """JoinGroup, answering MEMBER_ID_REQUIRED (79) with the id handed out."""
    resp = join(client, group, **kwargs)
    if resp.error_code == 79:
        kwargs["member_id"] = resp.member_id
        resp = join(client, group, **kwargs)
    return resp


def commit(
    client: RawClient,
    group: str,
    offsets: dict[tuple[str, int], int],
    generation: int = -1,
    member_id: str = "",
    version: int = 9,
    retention_ms: int = -1,
) -> Any:
    """OffsetCommit; `retention_ms` is v2-v4's RetentionTimeMs (-1: the broker's)."""
    m = _m(8, version)
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            build(
                m.OffsetCommitRequestPartition,
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata="",
            )
        )
    return client.request(
        8,
        version,
        build(
            m.OffsetCommitRequest,
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id=None,
            retention_time=datetime.timedelta(milliseconds=retention_ms),
            topics=tuple(
                build(m.OffsetCommitRequestTopic, name=t, partitions=tuple(ps))
                for t, ps in topics.items()
            ),
        ),
    )


def fetch_offsets(
    client: RawClient, group: str, partitions: dict[str, list[int]], version: int = 8
) -> dict[tuple[str, int], int]:
    m = _m(9, version)
    resp = client.request(
        9,
        version,
        build(
            m.OffsetFetchRequest,
            groups=(
                build(
                    m.OffsetFetchRequestGroup,
                    group_id=group,
                    member_id=None,
                    member_epoch=-1,
                    topics=tuple(
                        build(m.OffsetFetchRequestTopics, name=t, partition_indexes=tuple(ps))
                        for t, ps in partitions.items()
                    ),
                ),
            ),
            require_stable=False,
        ),
    )
    group_resp = resp.groups[0]
    assert group_resp.error_code == 0, group_resp
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in group_resp.topics
        for p in t.partitions
    }

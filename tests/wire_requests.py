"""Request builders of the recorded wire session (tests/wire_session.py): one function per
group API, taking the version and the fields that matter, building the entity of that
version (fields the version lacks are dropped, as `protocol.api.build` does)."""

from __future__ import annotations

import datetime
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from tests.wire_session import Session, entity, request

# API keys
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP = 8, 9, 10, 11
HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 12, 13, 14, 15, 16
API_VERSIONS, CREATE_TOPICS, DESCRIBE_CONFIGS, DELETE_GROUPS = 18, 19, 32, 42
INCREMENTAL_ALTER_CONFIGS, OFFSET_DELETE, DESCRIBE_CLUSTER = 44, 47, 60
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69

RESOURCE_GROUP = 32
SET, DELETE = 0, 1
# Classic session and rebalance timeouts, consumer-group rebalance timeout: never reached.
SESSION_MS = 600_000
CG_REBALANCE_MS = 600_000

PartitionCommit = tuple[int, int, str | None]  # partition, offset, metadata


def millis(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def subscription(topics: Sequence[str], user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    if user_data is None:
        return out + struct.pack(">i", -1)
    return out + struct.pack(">i", len(user_data)) + user_data


def assignment(partitions: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: version, topic partitions, user data (null)."""
    out = struct.pack(">hi", 0, len(partitions))
    for t, ps in partitions.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def commit(
    version: int,
    group: str,
    topics: dict[str, list[PartitionCommit]],
    generation: int = -1,
    member: str = "",
    instance: str | None = None,
    retention_ms: int = -1,
) -> Any:
    k, v = OFFSET_COMMIT, version
    return request(
        k,
        v,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=instance,
        retention_time=millis(retention_ms),
        topics=tuple(
            entity(
                k,
                v,
                "OffsetCommitRequestTopic",
                name=name,
                partitions=tuple(
                    entity(
                        k,
                        v,
                        "OffsetCommitRequestPartition",
                        partition_index=p,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata=metadata,
                    )
                    for p, offset, metadata in ps
                ),
            )
            for name, ps in topics.items()
        ),
    )


def fetch(
    version: int,
    groups: list[tuple[str, dict[str, list[int]] | None]],
    require_stable: bool = False,
    member: str | None = None,
    epoch: int = -1,
) -> Any:
    """OffsetFetch of (group, topics or None for all) pairs; before v8 one group only."""
    k, v = OFFSET_FETCH, version

    def topics(wanted: dict[str, list[int]] | None) -> Any:
        if wanted is None:
            return None
        return tuple(
            entity(
                k,
                v,
                "OffsetFetchRequestTopics",
                "OffsetFetchRequestTopic",
                name=name,
                partition_indexes=tuple(ps),
            )
            for name, ps in wanted.items()
        )

    if version < 8:
        ((group, wanted),) = groups
        return request(k, v, group_id=group, topics=topics(wanted), require_stable=require_stable)
    return request(
        k,
        v,
        require_stable=require_stable,
        groups=tuple(
            entity(
                k,
                v,
                "OffsetFetchRequestGroup",
                group_id=group,
                member_id=member,
                member_epoch=epoch,
                topics=topics(wanted),
            )
            for group, wanted in groups
        ),
    )


def offset_delete(group: str, topics: dict[str, list[int]]) -> Any:
    k = OFFSET_DELETE
    return request(
        k,
        0,
        group_id=group,
        topics=tuple(
            entity(
                k,
                0,
                "OffsetDeleteRequestTopic",
                name=name,
                partitions=tuple(
                    entity(k, 0, "OffsetDeleteRequestPartition", partition_index=p) for p in ps
                ),
            )
            for name, ps in topics.items()
        ),
    )


def join(
    version: int,
    group: str,
    member: str = "",
    instance: str | None = None,
    topics: Sequence[str] = ("wire-a",),
    session_ms: int = SESSION_MS,
    protocol_type: str = "consumer",
    reason: str | None = None,
) -> Any:
    k, v = JOIN_GROUP, version
    return request(
        k,
        v,
        group_id=group,
        session_timeout=millis(session_ms),
        rebalance_timeout=millis(SESSION_MS),
        member_id=member,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocols=tuple(
            entity(k, v, "JoinGroupRequestProtocol", name=name, metadata=metadata)
            for name, metadata in (
                ("range", subscription(topics)),
                ("roundrobin", subscription(topics, b"rr")),
            )
        ),
        reason=reason,
    )


def sync(
    version: int,
    group: str,
    generation: int,
    member: str,
    assignments: dict[str, bytes] | None = None,
    instance: str | None = None,
    protocol_type: str | None = "consumer",
) -> Any:
    k, v = SYNC_GROUP, version
    return request(
        k,
        v,
        group_id=group,
        generation_id=generation,
        member_id=member,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocol_name="range",
        assignments=tuple(
            entity(k, v, "SyncGroupRequestAssignment", member_id=m, assignment=a)
            for m, a in (assignments or {}).items()
        ),
    )


def heartbeat(
    version: int, group: str, generation: int, member: str, instance: str | None = None
) -> Any:
    return request(
        HEARTBEAT,
        version,
        group_id=group,
        generation_id=generation,
        member_id=member,
        group_instance_id=instance,
    )


def leave(
    version: int,
    group: str,
    member: str = "",
    members: Iterable[tuple[str, str | None, str | None]] = (),
) -> Any:
    """LeaveGroup: `member` before v3, else `members` as (member id, instance id, reason)."""
    k, v = LEAVE_GROUP, version
    return request(
        k,
        v,
        group_id=group,
        member_id=member,
        members=tuple(
            entity(k, v, "MemberIdentity", member_id=m, group_instance_id=i, reason=r)
            for m, i, r in members
        ),
    )


def describe_groups(version: int, groups: Sequence[str], include_ops: bool = False) -> Any:
    return request(
        DESCRIBE_GROUPS,
        version,
        groups=tuple(groups),
        include_authorized_operations=include_ops,
    )


def list_groups(version: int, states: Sequence[str] = (), types: Sequence[str] = ()) -> Any:
    return request(LIST_GROUPS, version, states_filter=tuple(states), types_filter=tuple(types))


def delete_groups(version: int, groups: Sequence[str]) -> Any:
    return request(DELETE_GROUPS, version, groups_names=tuple(groups))


def cg_heartbeat(
    s: Session,
    version: int,
    group: str,
    member: str,
    epoch: int,
    *,
    topics: Sequence[str] | None = None,
    regex: str | None = None,
    owned: dict[str, list[int]] | None = None,
    instance: str | None = None,
    rebalance_ms: int = -1,
    assignor: str | None = None,
) -> Any:
    """ConsumerGroupHeartbeat; `owned` by topic name (sent as the real topic ids). With only
    group, member and epoch it has the steady shape the fast path reads."""
    k, v = CONSUMER_GROUP_HEARTBEAT, version
    return request(
        k,
        v,
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        instance_id=instance,
        rack_id=None,
        rebalance_timeout=millis(rebalance_ms),
        subscribed_topic_names=None if topics is None else tuple(topics),
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=None
        if owned is None
        else tuple(
            entity(
                k,
                v,
                "TopicPartitions",
                topic_id=s.topic_ids[name],
                partitions=tuple(sorted(ps)),
            )
            for name, ps in owned.items()
            if ps
        ),
    )


def cg_join(s: Session, version: int, group: str, member: str, topic: str, **kw: Any) -> Any:
    """The first ConsumerGroupHeartbeat of a member: epoch 0, full subscription."""
    return cg_heartbeat(
        s,
        version,
        group,
        member,
        0,
        topics=(topic,),
        owned={},
        rebalance_ms=CG_REBALANCE_MS,
        **kw,
    )


def cg_describe(version: int, groups: Sequence[str], include_ops: bool = False) -> Any:
    return request(
        CONSUMER_GROUP_DESCRIBE,
        version,
        group_ids=tuple(groups),
        include_authorized_operations=include_ops,
    )


def describe_configs(
    version: int, resources: Sequence[tuple[str, Sequence[str] | None]], docs: bool = False
) -> Any:
    """DescribeConfigs of GROUP resources (name, keys or None for all), with synonyms."""
    k, v = DESCRIBE_CONFIGS, version
    return request(
        k,
        v,
        include_synonyms=True,
        include_documentation=docs,
        resources=tuple(
            entity(
                k,
                v,
                "DescribeConfigsResource",
                resource_type=RESOURCE_GROUP,
                resource_name=name,
                configuration_keys=None if keys is None else tuple(keys),
            )
            for name, keys in resources
        ),
    )


def alter_configs(
    version: int,
    group: str,
    configs: Sequence[tuple[str, int, str | None]],
    validate_only: bool = False,
) -> Any:
    k, v = INCREMENTAL_ALTER_CONFIGS, version
    return request(
        k,
        v,
        validate_only=validate_only,
        resources=(
            entity(
                k,
                v,
                "AlterConfigsResource",
                resource_type=RESOURCE_GROUP,
                resource_name=group,
                configs=tuple(
                    entity(k, v, "AlterableConfig", name=n, config_operation=op, value=value)
                    for n, op, value in configs
                ),
            ),
        ),
    )


def group_state(s: Session, group: str) -> str:
    """The group's state, read by an unrecorded DescribeGroups on connection "c"."""
    described = s.quiet("c", describe_groups(5, (group,)))
    return str(described.groups[0].group_state)


def assigned(s: Session, response: Any) -> dict[str, list[int]]:
    """A ConsumerGroupHeartbeat response's assignment by topic name."""
    names = {topic_id: name for name, topic_id in s.topic_ids.items()}
    return {
        names[tp.topic_id]: sorted(tp.partitions) for tp in response.assignment.topic_partitions
    }

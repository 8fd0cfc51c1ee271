"""Request builders for sequences: one line per request, Kafka's field names, defaults that
a Java consumer would send. Each returns the decoded response, or with `wait=False` a future
(for requests that park, such as a JoinGroup waiting for the rebalance)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from tests.conformance.runner import Session
from tests.integration.raw_groups import subscription

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69

# Topics every conformance server has (created by the fixture on both).
TOPIC = "cf-t"
TOPIC_PARTITIONS = 3
TOPIC2 = "cf-u"
TOPIC2_PARTITIONS = 1
TOPICS = {TOPIC: TOPIC_PARTITIONS, TOPIC2: TOPIC2_PARTITIONS}
UNKNOWN_TOPIC = "cf-no-such-topic"

SUBSCRIPTION = subscription([TOPIC])


def assignment(partitions: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0 bytes (what a leader sends for a member)."""
    out = (0).to_bytes(2, "big") + len(partitions).to_bytes(4, "big")
    for topic, parts in partitions.items():
        out += len(topic).to_bytes(2, "big") + topic.encode()
        out += len(parts).to_bytes(4, "big")
        for p in parts:
            out += p.to_bytes(4, "big")
    return out + (-1).to_bytes(4, "big", signed=True)


def join(
    s: Session,
    conn: str,
    group: str,
    member_id: str = "",
    *,
    version: int = 9,
    instance_id: str | None = None,
    session_ms: int = 10_000,
    rebalance_ms: int = 10_000,
    protocol_type: str = "consumer",
    protocols: tuple[tuple[str, bytes], ...] = (("range", SUBSCRIPTION),),
    reason: str | None = None,
    label: str = "join",
    wait: bool = True,
) -> Any:
    fields: dict[str, Any] = {
        "group_id": group,
        "session_timeout": session_ms,
        "rebalance_timeout": rebalance_ms,
        "member_id": member_id,
        "group_instance_id": instance_id,
        "protocol_type": protocol_type,
        "protocols": [{"name": n, "metadata": md} for n, md in protocols],
        "reason": reason,
    }
    future = s.send(conn, JOIN_GROUP, version, label, **fields)
    return future if not wait else _result(future)


def sync(
    s: Session,
    conn: str,
    group: str,
    generation: int,
    member_id: str,
    assignments: dict[str, bytes] | None = None,
    *,
    version: int = 5,
    instance_id: str | None = None,
    protocol_type: str | None = "consumer",
    protocol_name: str | None = "range",
    label: str = "sync",
    wait: bool = True,
) -> Any:
    future = s.send(
        conn,
        SYNC_GROUP,
        version,
        label,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=[{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
    )
    return future if not wait else _result(future)


def heartbeat(
    s: Session,
    conn: str,
    group: str,
    generation: int,
    member_id: str,
    *,
    version: int = 4,
    instance_id: str | None = None,
    label: str = "heartbeat",
) -> Any:
    return s.call(
        conn,
        HEARTBEAT,
        version,
        label,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
    )


def leave(
    s: Session,
    conn: str,
    group: str,
    members: list[tuple[str, str | None]],
    *,
    version: int = 5,
    label: str = "leave",
) -> Any:
    """LeaveGroup: v0-v2 send the first member's id alone, v3+ the (member id, instance id)
    list."""
    return s.call(
        conn,
        LEAVE_GROUP,
        version,
        label,
        group_id=group,
        member_id=members[0][0] if members else "",
        members=[{"member_id": m, "group_instance_id": i, "reason": None} for m, i in members],
    )


def describe(
    s: Session, conn: str, groups: list[str], *, version: int = 5, label: str = "describe"
) -> Any:
    return s.call(
        conn, DESCRIBE_GROUPS, version, label, groups=groups, include_authorized_operations=False
    )


def list_groups(
    s: Session,
    conn: str,
    *,
    version: int = 5,
    states: list[str] = (),  # type: ignore[assignment]
    types: list[str] = (),  # type: ignore[assignment]
    label: str = "list",
) -> Any:
    return s.call(
        conn, LIST_GROUPS, version, label, states_filter=list(states), types_filter=list(types)
    )


def commit(
    s: Session,
    conn: str,
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
    version: int = 9,
    metadata: str | None = "",
    label: str = "commit",
) -> Any:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "commit_timestamp": -1,
                "committed_metadata": metadata,
            }
        )
    return s.call(
        conn,
        OFFSET_COMMIT,
        version,
        label,
        group_id=group,
        generation_id_or_member_epoch=generation,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        retention_time=-1,
        topics=[{"name": t, "partitions": ps} for t, ps in topics.items()],
    )


def fetch_offsets(
    s: Session,
    conn: str,
    group: str,
    partitions: dict[str, list[int]] | None,
    *,
    version: int = 8,
    require_stable: bool = False,
    label: str = "fetch offsets",
) -> Any:
    """OffsetFetch for one group (v8+ through the groups array); `partitions=None` asks for
    every committed offset of the group."""
    topics = (
        None
        if partitions is None
        else [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]
    )
    return s.call(
        conn,
        OFFSET_FETCH,
        version,
        label,
        group_id=group,
        topics=topics,
        groups=[{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}],
        require_stable=require_stable,
    )


def _result(future: Future[Any]) -> Any:
    from tests.conformance.runner import REQUEST_TIMEOUT_S

    return future.result(REQUEST_TIMEOUT_S + 5)


def consumer_heartbeat(
    s: Session,
    conn: str,
    group: str,
    member_id: str,
    epoch: int,
    *,
    version: int = 1,
    topics: list[str] | None = None,
    regex: str | None = None,
    instance_id: str | None = None,
    rebalance_ms: int = 30_000,
    assignor: str | None = None,
    owned: dict[str, list[int]] | None = None,
    topic_ids: dict[str, str] | None = None,
    label: str = "consumer heartbeat",
) -> Any:
    """ConsumerGroupHeartbeat; `owned` names the partitions the member reports owning (by
    topic name, turned into ids with `topic_ids`); joining (epoch 0) reports none."""
    # A (re-)joining member reports owning nothing: an empty list, as the Java client sends
    # (null is refused).
    owned_field: list[dict[str, Any]] | None = [] if epoch == 0 else None
    if owned is not None:
        assert topic_ids is not None
        owned_field = [
            {"topic_id": topic_ids[t], "partitions": ps} for t, ps in sorted(owned.items())
        ]
    return s.call(
        conn,
        CONSUMER_GROUP_HEARTBEAT,
        version,
        label,
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance_id,
        rack_id=None,
        rebalance_timeout=rebalance_ms,
        subscribed_topic_names=topics,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=owned_field,
    )


def topic_ids(s: Session) -> dict[str, str]:
    """Topic name -> id on this session's server (Metadata, not recorded as a step)."""
    from tests.conformance.runner import topic_names

    return {name: topic_id for topic_id, name in topic_names(s.bootstrap).items()}


def owned_from(response: Any, ids: dict[str, str]) -> dict[str, list[int]]:
    """The partitions a ConsumerGroupHeartbeat response assigns, by topic name."""
    names = {v: k for k, v in ids.items()}
    if response.assignment is None:
        return {}
    return {
        names[str(tp.topic_id)]: sorted(tp.partitions)
        for tp in response.assignment.topic_partitions
    }

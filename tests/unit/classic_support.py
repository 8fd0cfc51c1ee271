"""What the classic-protocol shard tests share (test_classic_groups, test_consumer_migration):
the classic requests as a client sends them (replies are captured by
shard_context.Capture)."""

from __future__ import annotations

from groupcoord.coordinator.groups.classic.messages import (
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveMember,
    SyncGroupRequest,
)

CLIENT = "client"
HOST = "/127.0.0.1"
SESSION = 10_000  # the classic members' session timeout
REBALANCE = 5_000  # the classic members' rebalance timeout


def join_request(
    group_id: str,
    member_id: str,
    protocols: list[tuple[str, bytes]],
    *,
    protocol_type: str = "consumer",
    instance: str | None = None,
    session: int = SESSION,
    rebalance: int = REBALANCE,
    version: int = 9,
    client_id: str = CLIENT,
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group_id,
        member_id=member_id,
        protocol_type=protocol_type,
        protocols=protocols,
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        group_instance_id=instance,
        client_id=client_id,
        client_host=HOST,
        api_version=version,
    )


def sync_request(
    group_id: str,
    member_id: str,
    generation: int,
    assignments: dict[str, bytes] | None,
    *,
    instance: str | None = None,
    protocol_type: str | None = "consumer",
    protocol_name: str | None = "range",
    version: int = 5,
) -> SyncGroupRequest:
    return SyncGroupRequest(
        group_id=group_id,
        member_id=member_id,
        generation_id=generation,
        assignments=list((assignments or {}).items()),
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        api_version=version,
    )


def leave_request(
    group_id: str, members: tuple[tuple[str, str | None], ...], version: int
) -> LeaveGroupRequest:
    return LeaveGroupRequest(group_id, [LeaveMember(m, i) for m, i in members], version)

"""The classic group protocol's APIs: JoinGroup v0-v9, SyncGroup v0-v5, Heartbeat v0-v4 and
LeaveGroup v0-v5, from kio requests of every served version to the shard's messages, run
through the gateway, and the shard's answers back to kio responses of the request's version.

Each returns the response at once when the shard answered synchronously, else a Pending
of it (the gateway's form: a JoinGroup stays pending until its join phase completes).
"""

from __future__ import annotations

from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime import group_messages as gm
from ..topics.access import GROUP, READ, allowed
from .context import GroupContext
from .encoded_responses import ms


def handle_join_group(ctx: GroupContext, request: Request) -> Any:
    """JoinGroup v0-v9: parks until the join phase completes (or answers at once: member id
    required, static rejoin, unchanged follower). Emits GroupMetadata records where Kafka
    writes them. Errors: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, UNKNOWN_MEMBER_ID,
    MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL,
    GROUP_MAX_SIZE_REACHED, REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR (classic/manager.py has the decision order); GROUP_AUTHORIZATION_FAILED
    without READ on the group, checked first (Kafka's)."""
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.JOIN_GROUP, version)
    session_timeout_ms = ms(body.session_timeout)
    join = gm.JoinGroupRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        protocol_type=body.protocol_type,
        protocols=[(p.name, p.metadata) for p in body.protocols],
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=ms(body.rebalance_timeout) if version >= 1 else -1,
        group_instance_id=getattr(body, "group_instance_id", None),
        reason=getattr(body, "reason", None),
        client_id=request.header.client_id or "",
        client_host=ctx.client_host,
        api_version=version,
    )

    def respond(r: gm.JoinGroupResponse) -> Any:
        protocol_name = r.protocol_name if version >= 7 else (r.protocol_name or "")
        return build(
            m.JoinGroupResponse,
            error_code=r.error_code,
            generation_id=r.generation_id,
            protocol_type=r.protocol_type,
            protocol_name=protocol_name,
            leader=r.leader,
            skip_assignment=r.skip_assignment,
            member_id=r.member_id,
            members=tuple(
                build(
                    m.JoinGroupResponseMember,
                    member_id=x.member_id,
                    group_instance_id=x.group_instance_id,
                    metadata=x.metadata,
                )
                for x in r.members
            ),
        )

    def failed(error: ErrorCode) -> Any:
        return respond(gm.JoinGroupResponse(error_code=error, member_id=body.member_id))

    if ctx.authorizer.enabled and not allowed(ctx, ApiKey.JOIN_GROUP, READ, GROUP, body.group_id):
        # Kafka's JoinGroupRequest.getErrorResponse: no member id echoed.
        return respond(gm.JoinGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
    return ctx.groups.join_group(join, ctx.read_at, respond, failed)


def handle_sync_group(ctx: GroupContext, request: Request) -> Any:
    """SyncGroup v0-v5: the leader's assignment is persisted (GroupMetadata) and every
    parked member answered once it is durable. Errors: INVALID_GROUP_ID, UNKNOWN_MEMBER_ID,
    FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
    REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR."""
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.SYNC_GROUP, version)
    sync = gm.SyncGroupRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        generation_id=body.generation_id,
        assignments=[(a.member_id, a.assignment) for a in body.assignments],
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        api_version=version,
    )

    def respond(r: gm.SyncGroupResponse) -> Any:
        return build(
            m.SyncGroupResponse,
            error_code=r.error_code,
            protocol_type=r.protocol_type,
            protocol_name=r.protocol_name,
            assignment=r.assignment,
        )

    def failed(error: ErrorCode) -> Any:
        return respond(gm.SyncGroupResponse(error_code=error))

    if not body.group_id:
        return failed(ErrorCode.INVALID_GROUP_ID)
    if version >= 5 and (sync.protocol_type is None or sync.protocol_name is None):
        return failed(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if ctx.authorizer.enabled and not allowed(ctx, ApiKey.SYNC_GROUP, READ, GROUP, body.group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return ctx.groups.sync_group(sync, ctx.read_at, respond, failed)


def handle_heartbeat(ctx: GroupContext, request: Request) -> Any:
    """Heartbeat v0-v4: refreshes the member's session; writes nothing. Errors:
    INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
    REBALANCE_IN_PROGRESS, NOT_COORDINATOR, GROUP_AUTHORIZATION_FAILED (no READ on the
    group). While the shard loads the answer is NONE, as
    Kafka's ("blindly respond": the member is not fenced for the coordinator's restart)."""
    body = request.body
    m = response_types(ApiKey.HEARTBEAT, request.api_version)
    beat = gm.ClassicHeartbeatRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        generation_id=body.generation_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        api_version=request.api_version,
    )

    def failed(error: ErrorCode) -> Any:
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            error = ErrorCode.NONE
        return build(m.HeartbeatResponse, error_code=error)

    if ctx.authorizer.enabled and not allowed(ctx, ApiKey.HEARTBEAT, READ, GROUP, body.group_id):
        return build(m.HeartbeatResponse, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return ctx.groups.heartbeat(
        beat, ctx.read_at, lambda r: build(m.HeartbeatResponse, error_code=r.error_code), failed
    )


def handle_leave_group(ctx: GroupContext, request: Request) -> Any:
    """LeaveGroup v0-v5 (v3+: a batch, per-member errors echoing MemberId and
    GroupInstanceId). Errors: INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
    COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR;
    GROUP_AUTHORIZATION_FAILED (top level) without READ on the group."""
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.LEAVE_GROUP, version)
    if version >= 3:
        leave = gm.LeaveGroupRequest(
            body.group_id,
            [
                gm.LeaveMember(x.member_id, x.group_instance_id, getattr(x, "reason", None))
                for x in body.members
            ],
            version,
        )
    else:
        leave = gm.LeaveGroupRequest.single(body.group_id, body.member_id, version)

    def respond(r: gm.LeaveGroupResponse) -> Any:
        return build(
            m.LeaveGroupResponse,
            error_code=r.error_code,
            members=tuple(
                build(
                    m.MemberResponse,
                    member_id=x.member_id,
                    group_instance_id=x.group_instance_id,
                    error_code=x.error_code,
                )
                for x in r.members
            ),
        )

    def failed(error: ErrorCode) -> Any:
        return respond(gm.LeaveGroupResponse(error_code=error))

    if ctx.authorizer.enabled and not allowed(ctx, ApiKey.LEAVE_GROUP, READ, GROUP, body.group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return ctx.groups.leave_group(leave, ctx.read_at, respond, failed)

"""The group APIs over every kind of group: DescribeGroups v0-v6, ListGroups v0-v5 and
DeleteGroups v0-v2, from kio requests through the gateway to kio responses of the request's
version. Reads are events of the groups' shards, as ConsumerGroupDescribe's: each is
answered once the writes before it are durable, and fails with them."""

from __future__ import annotations

from typing import Any

from groupcoord.protocol.acl_operations import GROUP_OPERATIONS_ALL
from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime import group_messages as gm
from .context import GroupContext

_OPERATIONS_OMITTED = -(2**31)


def handle_describe_groups(ctx: GroupContext, request: Request) -> Any:
    """DescribeGroups v0-v6: reads the groups' state; writes nothing. A missing group, or a
    consumer (KIP-848) group, is "Dead" (GROUP_ID_NOT_FOUND from v6). Per group:
    COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR while its shard is not active,
    NOT_COORDINATOR when a write before the read failed."""
    version = request.api_version
    m = response_types(ApiKey.DESCRIBE_GROUPS, version)
    include_ops = getattr(request.body, "include_authorized_operations", False)
    group_ids = list(request.body.groups)

    def described_group(group_id: str, described: gm.DescribedGroup | ErrorCode) -> Any:
        if isinstance(described, ErrorCode):
            return build(
                m.DescribedGroup,
                group_id=group_id,
                error_code=described,
                group_state="",
                protocol_type="",
                protocol_data="",
                members=(),
                authorized_operations=_OPERATIONS_OMITTED,
            )
        return build(
            m.DescribedGroup,
            group_id=described.group_id,
            error_code=described.error_code,
            error_message=described.error_message,
            group_state=described.group_state,
            protocol_type=described.protocol_type,
            protocol_data=described.protocol_data,
            members=tuple(
                build(
                    m.DescribedGroupMember,
                    member_id=x.member_id,
                    group_instance_id=x.group_instance_id,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    member_metadata=x.member_metadata,
                    member_assignment=x.member_assignment,
                )
                for x in described.members
            ),
            # No authorizer: everything a group supports is allowed, as Kafka reports it.
            authorized_operations=GROUP_OPERATIONS_ALL
            if include_ops
            else described.authorized_operations,
        )

    def respond(described: dict[str, gm.DescribedGroup | ErrorCode]) -> Any:
        return build(
            m.DescribeGroupsResponse,
            groups=tuple(described_group(g, described[g]) for g in group_ids),
        )

    return ctx.groups.describe_groups(group_ids, version, ctx.read_at, respond)


def handle_list_groups(ctx: GroupContext, request: Request) -> Any:
    """ListGroups v0-v5: every group of every active shard with its real state and type;
    states and types filters matched case-insensitively. A failed shard is skipped (Kafka
    swallows NOT_COORDINATOR per partition); while any shard still loads the answer is
    COORDINATOR_LOAD_IN_PROGRESS with no groups (Kafka fails the whole listing with it, and
    clients retry)."""
    version = request.api_version
    m = response_types(ApiKey.LIST_GROUPS, version)
    states = list(getattr(request.body, "states_filter", ()) or ())
    types = list(getattr(request.body, "types_filter", ()) or ())

    def respond(listed: list[gm.ListedGroup]) -> Any:
        return build(
            m.ListGroupsResponse,
            error_code=ErrorCode.NONE,
            groups=tuple(
                build(
                    m.ListedGroup,
                    group_id=g.group_id,
                    protocol_type=g.protocol_type,
                    group_state=g.group_state,
                    group_type=g.group_type,
                )
                for g in listed
            ),
        )

    def failed(error: ErrorCode) -> Any:
        return build(m.ListGroupsResponse, error_code=error, groups=())

    return ctx.groups.list_groups(states, types, ctx.read_at, respond, failed)


def handle_delete_groups(ctx: GroupContext, request: Request) -> Any:
    """DeleteGroups v0-v2. Emits offset tombstones and a group tombstone per deleted group.
    Per group: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR, INVALID_GROUP_ID (null id)."""
    m = response_types(ApiKey.DELETE_GROUPS, request.api_version)
    names = list(request.body.groups_names)

    def respond(errors: dict[str, ErrorCode]) -> Any:
        return build(
            m.DeleteGroupsResponse,
            results=tuple(
                build(m.DeletableGroupResult, group_id=g, error_code=errors[g])
                for g in dict.fromkeys(names)
            ),
        )

    return ctx.groups.delete_groups(names, ctx.read_at, respond)

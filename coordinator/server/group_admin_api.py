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
from ..security.acl_model import CLUSTER_NAME
from ..topics.access import (
    CLUSTER,
    DELETE,
    DESCRIBE,
    GROUP,
    allowed,
    operations_bitfield,
    visible,
)
from .context import GroupContext

_OPERATIONS_OMITTED = -(2**31)


def handle_describe_groups(ctx: GroupContext, request: Request) -> Any:
    """DescribeGroups v0-v6: reads the groups' state; writes nothing. A missing group, or a
    consumer (KIP-848) group, is "Dead" (GROUP_ID_NOT_FOUND from v6). Per group:
    COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR while its shard is not active,
    NOT_COORDINATOR when a write before the read failed; GROUP_AUTHORIZATION_FAILED without
    DESCRIBE on the group (that group not read)."""
    version = request.api_version
    m = response_types(ApiKey.DESCRIBE_GROUPS, version)
    include_ops = getattr(request.body, "include_authorized_operations", False)
    group_ids = list(request.body.groups)
    # Kafka's: groups the principal may not DESCRIBE are answered here, never read.
    refused: set[str] = set()
    if ctx.authorizer.enabled:
        refused = {
            g
            for g in dict.fromkeys(group_ids)
            if not allowed(ctx, ApiKey.DESCRIBE_GROUPS, DESCRIBE, GROUP, g)
        }

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
            authorized_operations=operations_bitfield(
                ctx, GROUP, described.group_id, GROUP_OPERATIONS_ALL
            )
            if include_ops
            else described.authorized_operations,
        )

    def respond(described: dict[str, gm.DescribedGroup | ErrorCode]) -> Any:
        return build(
            m.DescribeGroupsResponse,
            groups=tuple(
                described_group(
                    g, ErrorCode.GROUP_AUTHORIZATION_FAILED if g in refused else described[g]
                )
                for g in group_ids
            ),
        )

    if refused:
        wanted = [g for g in group_ids if g not in refused]
        if not wanted:
            return respond({})
        return ctx.groups.describe_groups(wanted, version, ctx.read_at, respond)
    return ctx.groups.describe_groups(group_ids, version, ctx.read_at, respond)


def handle_list_groups(ctx: GroupContext, request: Request) -> Any:
    """ListGroups v0-v5: every group of every active shard with its real state and type;
    states and types filters matched case-insensitively. A failed shard is skipped (Kafka
    swallows NOT_COORDINATOR per partition); while any shard still loads the answer is
    COORDINATOR_LOAD_IN_PROGRESS with no groups (Kafka fails the whole listing with it, and
    clients retry). With an authorizer, only the groups the principal may DESCRIBE are
    listed (all of them with DESCRIBE on the cluster), as Kafka's."""
    version = request.api_version
    m = response_types(ApiKey.LIST_GROUPS, version)
    states = list(getattr(request.body, "states_filter", ()) or ())
    types = list(getattr(request.body, "types_filter", ()) or ())

    # Kafka's: DESCRIBE on the cluster lists every group, else only the groups the
    # principal may DESCRIBE; the others are left out silently, never refused.
    hide = ctx.authorizer.enabled and not visible(ctx, DESCRIBE, CLUSTER, CLUSTER_NAME)

    def respond(listed: list[gm.ListedGroup]) -> Any:
        if hide:
            listed = [g for g in listed if visible(ctx, DESCRIBE, GROUP, g.group_id)]
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
    NOT_COORDINATOR, INVALID_GROUP_ID (null id), GROUP_AUTHORIZATION_FAILED without DELETE
    on the group (that group untouched)."""
    m = response_types(ApiKey.DELETE_GROUPS, request.api_version)
    names = list(request.body.groups_names)

    refused: set[str] = set()
    if ctx.authorizer.enabled:
        refused = {
            g
            for g in dict.fromkeys(names)
            if not allowed(ctx, ApiKey.DELETE_GROUPS, DELETE, GROUP, g)
        }

    def respond(errors: dict[str, ErrorCode]) -> Any:
        return build(
            m.DeleteGroupsResponse,
            results=tuple(
                build(
                    m.DeletableGroupResult,
                    group_id=g,
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED if g in refused else errors[g],
                )
                for g in dict.fromkeys(names)
            ),
        )

    if refused:
        wanted = [g for g in names if g not in refused]
        if not wanted:
            return respond({})
        return ctx.groups.delete_groups(wanted, ctx.read_at, respond)
    return ctx.groups.delete_groups(names, ctx.read_at, respond)

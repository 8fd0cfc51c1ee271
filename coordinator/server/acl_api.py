"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31), as Kafka's AclApis and
AclControlManager answer them (v1-3).

Theory of operation. The ACLs live in the StandardAuthorizer (security/standard_authorizer.py)
and their log (security/acl_store.py, `ctx.security.acls`; None when no authorizer is
configured: every API answers SECURITY_DISABLED then, as Kafka without
authorizer.class.name). Creations and deletions are persisted before the authorizer
applies them and before the answer. Gates: ALTER on the cluster for Create/Delete,
DESCRIBE on it for Describe (CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import StorageError

from ..observability.logging import get_logger
from ..security.acl_binding import AclBinding, AclBindingFilter, valid_cidr
from ..security.acl_model import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from ..topics.access import allowed_cluster
from .context import GroupContext

log = get_logger("groupcoord.acls")

# Kafka's MAX_RECORDS_PER_USER_OP: what one request may create or delete.
ACL_CHANGES_PER_REQUEST_MAX = 10_000
_SECURITY_DISABLED_MESSAGE = "No Authorizer is configured."


def _code(enum: Any, value: int) -> Any:
    """Kafka's decoding of a wire code: unknown values read as UNKNOWN."""
    try:
        return enum(value)
    except ValueError:
        return enum.UNKNOWN


def _filter(f: Any, name: str | None, pattern: int) -> AclBindingFilter:
    return AclBindingFilter(
        _code(ResourceType, f.resource_type_filter),
        name,
        _code(PatternType, pattern),
        f.principal_filter,
        f.host_filter,
        _code(AclOperation, f.operation),
        _code(AclPermissionType, f.permission_type),
    )


def handle_describe_acls(ctx: GroupContext, request: Request) -> Any:
    """Emits the ACLs matching the filter, grouped by resource pattern. Errors (top level):
    SECURITY_DISABLED (no authorizer), CLUSTER_AUTHORIZATION_FAILED (no DESCRIBE on the
    cluster), INVALID_REQUEST (a filter with an unknown code)."""
    m = response_types(ApiKey.DESCRIBE_ACLS, request.api_version)
    store = ctx.security.acls if ctx.security is not None else None

    def error(code: ErrorCode, message: str | None) -> Any:
        return build(m.DescribeAclsResponse, error_code=code, error_message=message, resources=())

    if store is None:
        return error(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    if not allowed_cluster(ctx, ApiKey.DESCRIBE_ACLS, AclOperation.DESCRIBE):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    body = request.body
    acl_filter = _filter(body, body.resource_name_filter, body.pattern_type_filter)
    invalid = acl_filter.invalid()
    if invalid is not None:
        return error(ErrorCode.INVALID_REQUEST, invalid)
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in store.authorizer.acls(acl_filter):
        key = (int(acl.resource_type), acl.resource_name, int(acl.pattern_type))
        grouped.setdefault(key, []).append(acl)
    resources = tuple(
        build(
            m.DescribeAclsResource,
            resource_type=rtype,
            resource_name=name,
            pattern_type=pattern,
            acls=tuple(
                build(
                    m.AclDescription,
                    principal=a.principal,
                    host=a.host,
                    operation=int(a.operation),
                    permission_type=int(a.permission_type),
                )
                for a in acls
            ),
        )
        for (rtype, name, pattern), acls in sorted(grouped.items())
    )
    return build(
        m.DescribeAclsResponse, error_code=ErrorCode.NONE, error_message=None, resources=resources
    )


def _creation_error(c: Any) -> str | None:
    """Why Kafka refuses a creation (INVALID_REQUEST), checked in Kafka's order (AclApis,
    then AclControlManager.validateNewAcl), or None."""
    rtype = _code(ResourceType, c.resource_type)
    if rtype == ResourceType.CLUSTER and c.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not c.resource_name:
        return "Invalid empty resource name"
    if rtype == ResourceType.UNKNOWN:
        return "Invalid resourceType UNKNOWN"
    if _code(PatternType, c.resource_pattern_type) == PatternType.UNKNOWN:
        return "Invalid patternType UNKNOWN"
    if _code(AclOperation, c.operation) == AclOperation.UNKNOWN:
        return "Invalid operation UNKNOWN"
    if _code(AclPermissionType, c.permission_type) == AclPermissionType.UNKNOWN:
        return "Invalid permissionType UNKNOWN"
    if ":" not in c.principal:
        return (
            f"Could not parse principal from `{c.principal}` (no colon is present separating "
            "the principal type from the principal name)"
        )
    if not c.host:
        return "Host pattern cannot be null or empty"
    if "/" in c.host and not valid_cidr(c.host):
        return f"Invalid CIDR notation: {c.host}"
    return None


def _not_buildable(c: Any) -> bool:
    """A creation Kafka cannot even turn into an AclBinding (a filter's ANY / MATCH):
    its whole request fails."""
    return (
        c.resource_type == ResourceType.ANY
        or c.resource_pattern_type in (PatternType.ANY, PatternType.MATCH)
        or c.operation == AclOperation.ANY
        or c.permission_type == AclPermissionType.ANY
    )


async def handle_create_acls(ctx: GroupContext, request: Request) -> Any:
    """Creates the ACLs, persisted before the answer (creating one that exists succeeds and
    adds nothing); one result per creation, in order. Errors per creation:
    SECURITY_DISABLED, CLUSTER_AUTHORIZATION_FAILED (no ALTER on the cluster),
    INVALID_REQUEST (Kafka's checks, _creation_error; more than 10,000 new ACLs in one
    request: every result), UNKNOWN_SERVER_ERROR (a creation with a filter's ANY/MATCH
    code: every result; the log cannot be written)."""
    m = response_types(ApiKey.CREATE_ACLS, request.api_version)
    creations = request.body.creations
    store = ctx.security.acls if ctx.security is not None else None

    def every(code: ErrorCode, message: str | None) -> Any:
        result = build(m.AclCreationResult, error_code=code, error_message=message)
        return build(m.CreateAclsResponse, results=tuple(result for _ in creations))

    if store is None:
        return every(ErrorCode.SECURITY_DISABLED, _SECURITY_DISABLED_MESSAGE)
    if not allowed_cluster(ctx, ApiKey.CREATE_ACLS, AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if any(_not_buildable(c) for c in creations):
        return every(ErrorCode.UNKNOWN_SERVER_ERROR, None)
    errors: list[str | None] = []
    added: list[AclBinding] = []
    for c in creations:
        why = _creation_error(c)
        errors.append(why)
        if why is None:
            added.append(
                AclBinding(
                    ResourceType(c.resource_type),
                    c.resource_name,
                    PatternType(c.resource_pattern_type),
                    c.principal,
                    c.host,
                    AclOperation(c.operation),
                    AclPermissionType(c.permission_type),
                )
            )
    fresh = [a for a in dict.fromkeys(added) if a not in store.authorizer]
    if len(fresh) > ACL_CHANGES_PER_REQUEST_MAX:
        return every(
            ErrorCode.INVALID_REQUEST,
            f"Cannot create more than {ACL_CHANGES_PER_REQUEST_MAX} acls in a single operation.",
        )
    failure = await _persist(store, fresh, ())
    results = []
    for why in errors:
        if why is not None:
            results.append(
                build(m.AclCreationResult, error_code=ErrorCode.INVALID_REQUEST, error_message=why)
            )
        elif failure is not None:
            results.append(
                build(m.AclCreationResult, error_code=failure[0], error_message=failure[1])
            )
        else:
            # Kafka's success carries an empty message, not null.
            results.append(build(m.AclCreationResult, error_code=ErrorCode.NONE, error_message=""))
    return build(m.CreateAclsResponse, results=tuple(results))


async def _persist(
    store: Any, added: Sequence[AclBinding], removed: Sequence[AclBinding]
) -> tuple[ErrorCode, str] | None:
    """Persist and apply; the error every affected result carries when that fails."""
    try:
        await store.change(added, removed)
    except ValueError as e:  # past ACLS_MAX
        return ErrorCode.POLICY_VIOLATION, str(e)
    except (OSError, StorageError) as e:
        log.error("the ACL log cannot be written", error=str(e))
        return ErrorCode.UNKNOWN_SERVER_ERROR, "the ACL log cannot be written"
    return None


async def handle_delete_acls(ctx: GroupContext, request: Request) -> Any:
    """Deletes every ACL matching each filter, all of them persisted at once before the
    answer; one result per filter listing the ACLs it deleted (an ACL matching two
    filters is listed under both, as Kafka). Errors per filter: SECURITY_DISABLED,
    CLUSTER_AUTHORIZATION_FAILED (no ALTER on the cluster), INVALID_REQUEST (an unknown
    code in the filter; more than 10,000 ACLs deleted by the request: every filter),
    UNKNOWN_SERVER_ERROR (the log cannot be written)."""
    m = response_types(ApiKey.DELETE_ACLS, request.api_version)
    filters = request.body.filters
    store = ctx.security.acls if ctx.security is not None else None

    def every(code: ErrorCode, message: str | None) -> Any:
        result = build(
            m.DeleteAclsFilterResult, error_code=code, error_message=message, matching_acls=()
        )
        return build(m.DeleteAclsResponse, filter_results=tuple(result for _ in filters))

    if store is None:
        return every(ErrorCode.SECURITY_DISABLED, _SECURITY_DISABLED_MESSAGE)
    if not allowed_cluster(ctx, ApiKey.DELETE_ACLS, AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    matched: list[tuple[str | None, list[AclBinding]]] = []
    removed: dict[AclBinding, None] = {}
    for f in filters:
        acl_filter = _filter(f, f.resource_name_filter, f.pattern_type_filter)
        invalid = acl_filter.invalid()
        if invalid is not None:
            matched.append((invalid, []))
            continue
        acls = store.authorizer.acls(acl_filter)
        matched.append((None, acls))
        removed.update(dict.fromkeys(acls))
    if len(removed) > ACL_CHANGES_PER_REQUEST_MAX:
        return every(
            ErrorCode.INVALID_REQUEST,
            f"Cannot remove more than {ACL_CHANGES_PER_REQUEST_MAX} acls in a single delete "
            "operation.",
        )
    failure = await _persist(store, (), list(removed))
    results = []
    for invalid, acls in matched:
        if invalid is not None:
            code, message = ErrorCode.INVALID_REQUEST, invalid
        elif failure is not None:
            code, message = failure
            acls = []
        else:
            code, message = ErrorCode.NONE, None
        results.append(
            build(
                m.DeleteAclsFilterResult,
                error_code=code,
                error_message=message,
                matching_acls=tuple(
                    build(
                        m.DeleteAclsMatchingAcl,
                        error_code=ErrorCode.NONE,
                        error_message=None,
                        resource_type=int(a.resource_type),
                        resource_name=a.resource_name,
                        pattern_type=int(a.pattern_type),
                        principal=a.principal,
                        host=a.host,
                        operation=int(a.operation),
                        permission_type=int(a.permission_type),
                    )
                    for a in acls
                ),
            )
        )
    return build(m.DeleteAclsResponse, filter_results=tuple(results))

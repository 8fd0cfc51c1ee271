"""The handlers' authorization checks: Kafka's AuthHelper over `HandlerContext.authorized`.

Theory of operation. Every handler of the dispatch table checks what Kafka's KafkaApis checks
for its API (reference kafka-security.md section 6) through `allowed`, which asks the
server's authorizer and, on a denial, counts it (groupcoord_authorization_denials, by API
and resource type) and logs it (security/denials.py, rate-limited). `visible` is Kafka's
check with logIfDenied=false: the silent probes (CREATE or DESCRIBE on the cluster) and the
filters that hide what a principal may not see (Metadata of all topics), neither logged nor
counted. Without an authorizer (`ctx.authorizer.enabled` False) every check passes; the
hot paths test `enabled` before building any check at all.

It lives in topics/ next to the context, as both the data plane's handlers and the group
coordinator's (server/) use it.
"""

from __future__ import annotations

from collections.abc import Iterable

from groupcoord.protocol.api import ApiKey

from ..security.acl_model import CLUSTER_NAME, AclOperation, ResourceType
from ..security.denials import DenialLog
from .context import HandlerContext

# One per process: denials of every server in it share the cap (one log stream).
DENIALS = DenialLog()

READ = AclOperation.READ
WRITE = AclOperation.WRITE
CREATE = AclOperation.CREATE
DELETE = AclOperation.DELETE
ALTER = AclOperation.ALTER
DESCRIBE = AclOperation.DESCRIBE
CLUSTER_ACTION = AclOperation.CLUSTER_ACTION
DESCRIBE_CONFIGS = AclOperation.DESCRIBE_CONFIGS
ALTER_CONFIGS = AclOperation.ALTER_CONFIGS
IDEMPOTENT_WRITE = AclOperation.IDEMPOTENT_WRITE

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID

_OPERATIONS_OMITTED = -(2**31)


def allowed(
    ctx: HandlerContext[object],
    api: ApiKey,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """May the connection's principal perform `operation` on the resource; a denial is
    counted and logged."""
    if ctx.authorized(operation, resource_type, name):
        return True
    ctx.metrics.authorization_denied(api.name, resource_type.name)
    DENIALS.denied(
        api.name,
        ctx.principal,
        ctx.client_address,
        operation,
        resource_type,
        name,
    )
    return False


def visible(
    ctx: HandlerContext[object],
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """The same question, neither counted nor logged (Kafka's logIfDenied=false)."""
    return ctx.authorized(operation, resource_type, name)


def allowed_cluster(ctx: HandlerContext[object], api: ApiKey, operation: AclOperation) -> bool:
    return allowed(ctx, api, operation, CLUSTER, CLUSTER_NAME)


def allowed_names(
    ctx: HandlerContext[object],
    api: ApiKey,
    operation: AclOperation,
    resource_type: ResourceType,
    names: Iterable[str],
) -> set[str]:
    """The distinct names of `names` the principal may `operation` (each checked once)."""
    return {n for n in dict.fromkeys(names) if allowed(ctx, api, operation, resource_type, n)}


def operations_bitfield(
    ctx: HandlerContext[object], resource_type: ResourceType, name: str, supported: int
) -> int:
    """Kafka's authorized-operations field: the bit `1 << code` of each operation in
    `supported` (a bitfield of the resource type's operations) the principal may perform
    on the resource; without an authorizer, `supported` itself. Not logged (Kafka's)."""
    if not ctx.authorizer.enabled:
        return supported
    bits = 0
    for op in AclOperation:
        if supported & (1 << op) and ctx.authorized(op, resource_type, name):
            bits |= 1 << op
    return bits


def cluster_operations_bitfield(ctx: HandlerContext[object], supported: int) -> int:
    """DescribeCluster / Metadata's cluster operations: 0 without DESCRIBE on the cluster
    (Kafka's), else the bitfield."""
    if ctx.authorizer.enabled and not ctx.authorized(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return 0
    return operations_bitfield(ctx, CLUSTER, CLUSTER_NAME, supported)


def authorize_by_resource_type(
    ctx: HandlerContext[object], operation: AclOperation, resource_type: ResourceType
) -> bool:
    """Kafka's Authorizer.authorizeByResourceType: may the principal `operation` at least
    one resource of the type (idempotent InitProducerId: WRITE on any topic). Asks the
    authorizer's own answer when it has one (security/'s StandardAuthorizer), else only
    the wildcard resource."""
    by_type = getattr(ctx.authorizer, "authorize_by_resource_type", None)
    if by_type is not None:
        return bool(by_type(ctx.principal, ctx.client_address, operation, resource_type))
    return ctx.authorized(operation, resource_type, "*")


OPERATIONS_OMITTED = _OPERATIONS_OMITTED

# Kafka's ConfigResource.Type codes, and the ACL resource each is authorized on.
_CONFIG_RESOURCES = {
    2: (TOPIC, 29),  # TOPIC: TOPIC_AUTHORIZATION_FAILED
    32: (GROUP, 30),  # GROUP: GROUP_AUTHORIZATION_FAILED
    4: (CLUSTER, 31),  # BROKER: CLUSTER_AUTHORIZATION_FAILED
    8: (CLUSTER, 31),  # BROKER_LOGGER
    16: (CLUSTER, 31),  # CLIENT_METRICS
}
# Kafka's default messages of those errors (Errors.java), as DescribeConfigs and the
# AlterConfigs APIs answer them.
DENIED_MESSAGES = {
    29: "Topic authorization failed.",
    30: "Group authorization failed.",
    31: "Cluster authorization failed.",
}


def config_resource_denied(
    ctx: HandlerContext[object],
    api: ApiKey,
    operation: AclOperation,
    config_type: int,
    name: str,
) -> int | None:
    """The error code for a config resource (DescribeConfigs, IncrementalAlterConfigs)
    the principal may not `operation` (DESCRIBE_CONFIGS, ALTER_CONFIGS): on the topic, the
    group, or the cluster for the broker's resources; None when allowed or not a type
    authorized here (the handler refuses those)."""
    target = _CONFIG_RESOURCES.get(config_type)
    if target is None or not ctx.authorizer.enabled:
        return None
    resource_type, error = target
    resource_name = CLUSTER_NAME if resource_type is CLUSTER else name
    if allowed(ctx, api, operation, resource_type, resource_name):
        return None
    return error

"""Kafka's ACL vocabulary, and the one question every handler asks an authorizer.

The codes are Kafka's wire codes (org.apache.kafka.common.resource.ResourceType,
acl.AclOperation, acl.AclPermissionType, resource.PatternType), so CreateAcls,
DescribeAcls and DeleteAcls carry them unchanged.

Theory of operation. Each handler checks what Kafka checks for its API through
`HandlerContext.authorized(operation, resource_type, name)`, which asks the server's
`Authorizer` with the connection's principal and host. With no authorizer configured the
server holds `ALLOW_ALL`, whose `enabled` is False, so handlers can skip building per-resource
checks at all on the hot paths (`if ctx.authorizer.enabled: ...`).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The one resource name of the CLUSTER resource type, as Kafka names it.
CLUSTER_NAME = "kafka-cluster"


class Authorizer(Protocol):
    """`enabled`: False when every request is allowed (no authorizer configured), so
    callers may skip their checks. `authorize`: may `principal` ("User:alice") from `host`
    ("127.0.0.1") perform `operation` on the resource; answers as Kafka's
    StandardAuthorizer (DENY wins, super users, implied operations,
    allow.everyone.if.no.acl.found)."""

    enabled: bool

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool: ...


class AllowAll:
    """No authorizer configured: everything is allowed, as Kafka without
    authorizer.class.name."""

    enabled = False

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        return True


ALLOW_ALL = AllowAll()

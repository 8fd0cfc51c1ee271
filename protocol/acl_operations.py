"""Kafka's AclOperation codes, as bits of the responses' "authorized operations" fields, and
what Kafka reports for each resource type when nothing is refused (no authorizer: every
operation the resource type supports, AclEntry.supportedOperations)."""

from __future__ import annotations

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
CREATE_TOKENS, DESCRIBE_TOKENS = 13, 14


def bits(*operations: int) -> int:
    return sum(1 << op for op in operations)


TOPIC_OPERATIONS_ALL = bits(
    READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
)
CLUSTER_OPERATIONS_ALL = bits(
    CREATE,
    ALTER,
    DESCRIBE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
    CREATE_TOKENS,
    DESCRIBE_TOKENS,
)
# 3400: a group's configs (KIP-848 GROUP configs) are described and altered on the group.
GROUP_OPERATIONS_ALL = bits(READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)

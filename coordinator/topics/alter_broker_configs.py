"""IncrementalAlterConfigs on BROKER resources. This server has no dynamic broker configs:
its settings come from its configuration at start-up, and DescribeConfigs reports every
broker config read-only. A change is therefore answered as Kafka answers a change to a
config that cannot be updated dynamically (DynamicBrokerConfig.validateConfigs, which
ConfigAdminManager turns into INVALID_REQUEST, KAFKA-13609)."""

from __future__ import annotations

import re
from typing import Any

from groupcoord.protocol.errors import ErrorCode

from .admin import BROKER_CONFIGS
from .config_ops import OP_APPEND, OP_SUBTRACT, AlterError, apply_ops
from .context import TopicsContext

_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def alter_broker_configs(ctx: TopicsContext, resource: Any, validate_only: bool) -> None:
    """Raises AlterError unless nothing would change: INVALID_REQUEST for a name other than
    "" or this node's id, and for any SET, APPEND or SUBTRACT ("Cannot update these configs
    dynamically"); INVALID_CONFIG for APPEND/SUBTRACT on an unknown or non-list config.
    A DELETE has nothing to delete and succeeds, as in Kafka. Nothing is ever written, so
    validate_only answers the same."""
    name = resource.resource_name
    if name:
        if not _JAVA_INT.fullmatch(name) or not _INT_MIN <= int(name) <= _INT_MAX:
            raise AlterError(
                ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}"
            )
        if int(name) != ctx.node.node_id:
            raise AlterError(
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected {ctx.node.node_id}, but received {name}",
            )
    known = {config.name: config for config in BROKER_CONFIGS}
    for entry in resource.configs:
        if entry.config_operation in (OP_APPEND, OP_SUBTRACT) and entry.name not in known:
            raise AlterError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {entry.name}")
    dynamic = apply_ops(
        {},  # no dynamic broker config is ever stored
        resource.configs,
        lambda config: known[config].kind == "LIST",
        lambda config: known[config].value(ctx),
    )
    if dynamic:
        raise AlterError(
            ErrorCode.INVALID_REQUEST,
            f"Cannot update these configs dynamically: Set({', '.join(sorted(dynamic))}). "
            "This server has no dynamic broker configs: change them in its configuration "
            "(--set NAME=VALUE or GROUPCOORD_* environment variables) and restart it.",
        )

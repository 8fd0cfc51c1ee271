"""IncrementalAlterConfigs (44) for GROUP resources (KIP-848 dynamic group configs).

SET and DELETE apply to a group's overrides (coordinator/groups/dynamic_config.py) and are
persisted before the answer; APPEND and SUBTRACT make no sense for these scalar configs
(INVALID_CONFIG, as Kafka). Other resource types are not alterable here yet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol.api import ApiKey, Request, build, response_types
from protocol.errors import ErrorCode

from ..groups.dynamic_config import InvalidGroupConfig, settings
from .admin import RESOURCE_GROUP

if TYPE_CHECKING:
    from ..server.connection import Connection

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def handle_incremental_alter_configs(conn: Connection, request: Request) -> Any:
    """IncrementalAlterConfigs v0-v1. GROUP: the overrides after the operations must pass
    Kafka's checks (names, bounds, heartbeat below session timeout), else INVALID_CONFIG
    with the reason; an empty group name is INVALID_REQUEST; validate_only writes nothing.
    Other resource types: INVALID_REQUEST."""
    m = response_types(ApiKey.INCREMENTAL_ALTER_CONFIGS, request.api_version)
    store = conn.server.group_configs
    group_config = conn.server.coordinator.runners[0].shard.config
    responses = []
    for resource in request.body.resources:
        error, message = ErrorCode.NONE, None
        name = resource.resource_name
        if resource.resource_type != RESOURCE_GROUP:
            error = ErrorCode.INVALID_REQUEST
            message = f"Altering configs of resource type {resource.resource_type} is not supported"
        elif not name:
            error, message = ErrorCode.INVALID_REQUEST, "Group name can't be empty."
        else:
            overrides = dict(store.overrides(name))
            try:
                for entry in resource.configs:
                    if entry.config_operation == OP_SET:
                        if entry.value is None:
                            raise InvalidGroupConfig(f"Null value for config {entry.name}")
                        overrides[entry.name] = entry.value
                    elif entry.config_operation == OP_DELETE:
                        overrides.pop(entry.name, None)
                    else:
                        raise InvalidGroupConfig(
                            f"Config {entry.name} is not a list: APPEND and SUBTRACT do not apply"
                        )
                settings(group_config, overrides)
            except InvalidGroupConfig as e:
                error, message = ErrorCode.INVALID_CONFIG, str(e)
            else:
                if not request.body.validate_only:
                    store.replace(name, overrides)
        responses.append(
            build(
                m.AlterConfigsResourceResponse,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=name,
            )
        )
    return build(m.IncrementalAlterConfigsResponse, responses=tuple(responses))

"""IncrementalAlterConfigs on GROUP resources (KIP-848 dynamic group configs).

SET and DELETE apply to a group's overrides (coordinator/groups/dynamic_config.py) and are
persisted before the answer; APPEND and SUBTRACT make no sense for these scalar configs
(INVALID_CONFIG, as Kafka)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from groupcoord.protocol.errors import ErrorCode

from ..groups.dynamic_config import InvalidGroupConfig, settings
from .config_ops import OP_DELETE, OP_SET, AlterError

if TYPE_CHECKING:
    from ..server.app import Server


def alter_group_configs(server: Server, resource: Any, validate_only: bool) -> None:
    """The group's overrides after the operations must pass Kafka's checks (names, bounds,
    heartbeat below session timeout), else AlterError(INVALID_CONFIG) with the reason; an
    empty group name is INVALID_REQUEST; validate_only writes nothing."""
    store = server.group_configs
    group_config = server.coordinator.runners[0].shard.config
    name = resource.resource_name
    if not name:
        raise AlterError(ErrorCode.INVALID_REQUEST, "Group name can't be empty.")
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
        raise AlterError(ErrorCode.INVALID_CONFIG, str(e)) from None
    if not validate_only:
        store.replace(name, overrides)

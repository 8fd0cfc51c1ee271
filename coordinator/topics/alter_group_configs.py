"""IncrementalAlterConfigs on GROUP resources (KIP-848 dynamic group configs).

SET and DELETE apply to a group's overrides, which the group coordinator checks and
persists before the answer (group_admin.GroupAdmin); APPEND and SUBTRACT make no sense for
these scalar configs (INVALID_CONFIG, as Kafka)."""

from __future__ import annotations

from typing import Any

from groupcoord.protocol.errors import ErrorCode

from ..group_admin import GroupConfigError
from .config_ops import OP_DELETE, OP_SET, AlterError
from .context import TopicsContext


def alter_group_configs(ctx: TopicsContext, resource: Any, validate_only: bool) -> None:
    """The group's overrides after the operations must pass Kafka's checks (names, bounds,
    heartbeat below session timeout), else AlterError(INVALID_CONFIG) with the reason; an
    empty group name is INVALID_REQUEST; validate_only writes nothing."""
    name = resource.resource_name
    if not name:
        raise AlterError(ErrorCode.INVALID_REQUEST, "Group name can't be empty.")
    groups = ctx.groups
    overrides = dict(groups.group_config_overrides(name))
    try:
        for entry in resource.configs:
            if entry.config_operation == OP_SET:
                if entry.value is None:
                    raise GroupConfigError(f"Null value for config {entry.name}")
                overrides[entry.name] = entry.value
            elif entry.config_operation == OP_DELETE:
                overrides.pop(entry.name, None)
            else:
                raise GroupConfigError(
                    f"Config {entry.name} is not a list: APPEND and SUBTRACT do not apply"
                )
        groups.alter_group_configs(name, overrides, validate_only)
    except GroupConfigError as e:
        raise AlterError(ErrorCode.INVALID_CONFIG, str(e)) from None

"""IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType) and the checks Kafka's
broker runs on a request before any resource is touched (ConfigAdminManager.preprocess).

An operation changes a resource's override set: SET puts a value, DELETE removes the
override (the config falls back to its default), APPEND and SUBTRACT add or remove items of
a LIST-type config's comma-separated value, starting from its default when it has no
override. APPEND or SUBTRACT on any other config is INVALID_CONFIG."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from groupcoord.protocol.errors import ErrorCode

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}


class AlterError(Exception):
    """One resource's answer: its error code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def request_errors(resources: Sequence[Any], checked_types: set[int]) -> dict[int, AlterError]:
    """Kafka's checks before any change, for the resources (by index) of `checked_types`:
    each (type, name) at most once (both copies refused), no config named twice, a value
    for every operation but DELETE, a known operation. All INVALID_REQUEST."""
    seen = Counter(
        (r.resource_type, r.resource_name) for r in resources if r.resource_type in checked_types
    )
    errors: dict[int, AlterError] = {}
    for index, resource in enumerate(resources):
        if resource.resource_type not in checked_types:
            continue
        if seen[(resource.resource_type, resource.resource_name)] > 1:
            error = AlterError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
        elif len({c.name for c in resource.configs}) != len(resource.configs):
            error = AlterError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        elif nulls := [
            c.name for c in resource.configs if c.config_operation != OP_DELETE and c.value is None
        ]:
            error = AlterError(
                ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
            )
        elif unknown := [c for c in resource.configs if c.config_operation not in OP_NAMES]:
            error = AlterError(
                ErrorCode.INVALID_REQUEST,
                f"Unknown operations type {unknown[0].config_operation}",
            )
        else:
            continue
        errors[index] = error
    return errors


def apply_ops(
    current: Mapping[str, str],
    entries: Sequence[Any],
    is_list: Callable[[str], bool],
    default: Callable[[str], str | None],
) -> dict[str, str | None]:
    """The override set after `entries` (name, config_operation, value), in order. Raises
    AlterError(INVALID_CONFIG) for APPEND or SUBTRACT on a config that `is_list` denies."""
    overrides: dict[str, str | None] = dict(current)
    for entry in entries:
        name, op = entry.name, entry.config_operation
        if op == OP_SET:
            overrides[name] = entry.value
        elif op == OP_DELETE:
            overrides.pop(name, None)
        else:
            if not is_list(name):
                raise AlterError(
                    ErrorCode.INVALID_CONFIG,
                    f"Config value {OP_NAMES[op].lower()} is not allowed for config key: {name}",
                )
            old = overrides.get(name)
            overrides[name] = list_op(op, old if old is not None else default(name), entry.value)
    return overrides


def list_op(op: int, old: str | None, value: str) -> str:
    """APPEND: add the items of `value` missing from `old`; SUBTRACT: remove them (Kafka's
    ConfigurationControlManager; empty items are dropped)."""
    items = [item for item in (old or "").split(",") if item]
    for item in value.split(","):
        if not item:
            continue
        if op == OP_APPEND:
            if item not in items:
                items.append(item)
        elif item in items:
            items.remove(item)
    return ",".join(items)

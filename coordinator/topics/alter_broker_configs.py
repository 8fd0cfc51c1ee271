"""IncrementalAlterConfigs on BROKER resources, answered as Apache Kafka 4.4 answers them.

Kafka updates about a hundred broker configs dynamically (kafka_broker_configs.py lists
them, with the ones it does not). A change naming one it does not is INVALID_REQUEST
"Cannot update these configs dynamically: [names]" (DynamicBrokerConfig.validateConfigs,
wrapped by ConfigAdminManager, KAFKA-13609); a dynamic one with a bad value is
INVALID_REQUEST "Invalid value V for configuration N: reason" (its ConfigDef); a name Kafka
does not know is accepted and kept. Accepted configs are kept in the data directory
(broker_config_store.py, via the topic registry), resource "" as the cluster-wide default
and "<node id>" as this broker's own (which wins), and survive restarts. Those that are a
topic config's broker default with a setting of ours behind it (log.retention.ms,
log.retention.bytes, log.segment.bytes, log.roll.ms, message.max.bytes, ...) apply to every
topic without its own override at once (TopicRegistry.set_broker_configs); the rest are kept
and described only."""

from __future__ import annotations

import re
from typing import Any

from groupcoord.protocol.errors import ErrorCode

from .admin import BROKER_CONFIGS
from .config_ops import OP_APPEND, OP_SUBTRACT, AlterError, apply_ops
from .configs import TOPIC_CONFIG_BROKER_NAMES, TOPIC_CONFIGS, InvalidConfig
from .context import TopicsContext
from .kafka_broker_configs import DYNAMIC_BROKER_CONFIGS, STATIC_BROKER_CONFIGS

_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_RANGES = {
    "SHORT": (-(2**15), 2**15 - 1),
    "INT": (_INT_MIN, _INT_MAX),
    "LONG": (-(2**63), 2**63 - 1),
}
# A topic config's name by its broker synonym's.
TOPIC_CONFIG_OF_BROKER = {broker: topic for topic, broker in TOPIC_CONFIG_BROKER_NAMES.items()}
# Kafka's own validators of dynamic configs that are not a topic config's default.
_AT_LEAST_ZERO = frozenset({"max.connections", "max.connections.per.ip"})


def alter_broker_configs(ctx: TopicsContext, resource: Any, validate_only: bool) -> None:
    """Raises AlterError: INVALID_REQUEST for a name other than "" or this node's id, for a
    config Kafka cannot update dynamically, and for a bad value; INVALID_CONFIG for APPEND
    or SUBTRACT on a config that is not a list. Otherwise the resource's configs after the
    operations are saved and applied (validate_only: checked only)."""
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
    ours = {config.name: config for config in BROKER_CONFIGS}
    for entry in resource.configs:
        if entry.config_operation not in (OP_APPEND, OP_SUBTRACT):
            continue
        if entry.name not in DYNAMIC_BROKER_CONFIGS and entry.name not in STATIC_BROKER_CONFIGS:
            raise AlterError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {entry.name}")
        if not _is_list(entry.name):
            raise AlterError(
                ErrorCode.INVALID_CONFIG,
                f"Config value {('append', 'subtract')[entry.config_operation - OP_APPEND]} "
                f"is not allowed for config key: {entry.name}",
            )
    store = ctx.topics.broker_configs
    configs = apply_ops(
        store.overrides(name),
        resource.configs,
        _is_list,
        lambda config: ours[config].value(ctx) if config in ours else None,
    )
    static = [config for config in configs if config in STATIC_BROKER_CONFIGS]
    if static:
        raise AlterError(
            ErrorCode.INVALID_REQUEST,
            f"Cannot update these configs dynamically: [{', '.join(static)}]",
        )
    checked = {config: check_broker_value(config, value or "") for config, value in configs.items()}
    if validate_only or checked == store.overrides(name):
        return
    ctx.topics.set_broker_configs(name, checked)


def _is_list(config: str) -> bool:
    return DYNAMIC_BROKER_CONFIGS.get(config) == "LIST"


def check_broker_value(name: str, value: str) -> str:
    """`value` as Kafka parses it for dynamic broker config `name` (unknown names: as
    given); AlterError(INVALID_REQUEST) with Kafka's message when it refuses it."""
    kind = DYNAMIC_BROKER_CONFIGS.get(name)
    if kind is None:
        return value
    try:
        topic_config = TOPIC_CONFIG_OF_BROKER.get(name)
        spec = TOPIC_CONFIGS.get(topic_config) if topic_config is not None else None
        if spec is not None:
            return spec.check(value)
        return _check_type(name, kind, value.strip())
    except InvalidConfig as e:
        if e.whole:
            raise AlterError(ErrorCode.INVALID_REQUEST, str(e)) from None
        raise AlterError(
            ErrorCode.INVALID_REQUEST, f"Invalid value {value} for configuration {name}: {e}"
        ) from None


def _check_type(name: str, kind: str, text: str) -> str:
    if kind in _RANGES:
        low, high = _RANGES[kind]
        if not _JAVA_INT.fullmatch(text) or not low <= int(text) <= high:
            raise InvalidConfig(f"Not a number of type {kind}")
        if name in _AT_LEAST_ZERO and int(text) < 0:
            raise InvalidConfig("Value must be at least 0")
        if name == "log.cleaner.threads" and int(text) == 0:
            # Kafka's LogCleaner divides its buffer by the thread count.
            raise InvalidConfig("/ by zero", whole=True)
        return str(int(text))
    if kind == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise InvalidConfig("Expected value to be either true or false")
        return text.lower()
    if kind == "DOUBLE" and not _DOUBLE.fullmatch(text):
        raise InvalidConfig("Not a number of type DOUBLE")
    return text

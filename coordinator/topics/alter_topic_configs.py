"""IncrementalAlterConfigs on TOPIC resources: the topic's overrides after the operations,
checked as CreateTopics checks them, then saved and applied by the registry
(TopicRegistry.alter_configs), in the order Kafka's controller checks them
(ControllerConfigurationValidator, then the existence check)."""

from __future__ import annotations

from typing import Any

from groupcoord.protocol.errors import ErrorCode

from ..observability.logging import get_logger
from .config_ops import AlterError, apply_ops
from .configs import TOPIC_CONFIGS
from .context import TopicsContext
from .registry import check_topic_name

log = get_logger("groupcoord.admin")


def alter_topic_configs(ctx: TopicsContext, resource: Any, validate_only: bool) -> None:
    """Apply `resource`'s operations to its topic. Raises AlterError or TopicError:
    INVALID_CONFIG (APPEND/SUBTRACT on a config that is not a list, an unknown name or a bad
    value in the resulting set), INVALID_REQUEST (empty name), INVALID_TOPIC_EXCEPTION
    (illegal name; an internal topic), UNKNOWN_TOPIC_OR_PARTITION; OSError when topics.json
    cannot be written (the old configs stay in force)."""
    registry = ctx.topics
    name = resource.resource_name
    topic = registry.get(name) if name else None

    def is_list(config: str) -> bool:
        spec = TOPIC_CONFIGS.get(config)
        return spec is not None and spec.kind == "LIST"

    def default(config: str) -> str | None:
        spec = TOPIC_CONFIGS.get(config)
        return None if spec is None else spec.default(ctx.settings)

    overrides = apply_ops(topic.configs if topic else {}, resource.configs, is_list, default)
    if not name:
        raise AlterError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
    check_topic_name(name)
    registry.checked_configs(overrides)
    if topic is None:
        raise AlterError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist."
        )
    if topic.internal:
        # Kafka 4.4 alters them; here their settings are the server's (offsets_segment_bytes,
        # ...) and their cleanup is the coordinator's own compaction.
        raise AlterError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Cannot alter the configs of internal topic {name}: they are the server's settings.",
        )
    before = dict(topic.configs)
    registry.alter_configs(topic, overrides, validate_only=validate_only)
    if not validate_only and topic.configs != before:
        log.info("altered topic configs", topic=name, configs=topic.configs)

"""IncrementalAlterConfigs (44): one answer per resource, by resource type.

TOPIC (alter_topic_configs.py): SET, DELETE, APPEND and SUBTRACT on the topic's overrides,
saved to topics.json and applied to the live logs. GROUP (alter_group_configs.py): KIP-848
dynamic group configs. BROKER (alter_broker_configs.py): refused, as Kafka refuses a broker
config that cannot be updated dynamically. The legacy AlterConfigs (33) is not served."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..observability.logging import get_logger
from .access import ALTER_CONFIGS, DENIED_MESSAGES, config_resource_denied
from .admin import RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC
from .alter_broker_configs import alter_broker_configs
from .alter_group_configs import alter_group_configs
from .alter_topic_configs import alter_topic_configs
from .config_ops import AlterError, request_errors
from .context import TopicsContext
from .registry import TopicError

log = get_logger("groupcoord.admin")

_ALTER: dict[int, Callable[[TopicsContext, Any, bool], None]] = {
    RESOURCE_TOPIC: alter_topic_configs,
    RESOURCE_BROKER: alter_broker_configs,
    RESOURCE_GROUP: alter_group_configs,
}
# Kafka's request checks (ConfigAdminManager.preprocess); GROUP keeps its own checks.
_PRECHECKED = {RESOURCE_TOPIC, RESOURCE_BROKER}


def handle_incremental_alter_configs(ctx: TopicsContext, request: Request) -> Any:
    """IncrementalAlterConfigs v0-v1: emits per resource its error code and message (null on
    success); validate_only checks everything and writes nothing.
    TOPIC: the overrides after the operations are validated as CreateTopics validates topic
    configs, saved to topics.json, then applied to the topic's live logs; DescribeConfigs
    then shows them as DYNAMIC_TOPIC_CONFIG (source 1), and a restart keeps them. Errors:
    INVALID_REQUEST (resource named twice, config named twice, a null value for an operation
    other than DELETE, an unknown operation, an empty topic name), INVALID_CONFIG (APPEND or
    SUBTRACT on a config that is not a list, an unknown config, a bad value),
    INVALID_TOPIC_EXCEPTION (illegal name), UNKNOWN_TOPIC_OR_PARTITION,
    UNKNOWN_SERVER_ERROR (topics.json could not be written: the old configs stay in force).
    BROKER "" or "<node_id>": this server has no dynamic broker configs, so any SET, APPEND or
    SUBTRACT is INVALID_REQUEST with "Cannot update these configs dynamically: Set(...)" --
    the code and message Kafka gives for a config that cannot be altered dynamically (it
    wraps that ConfigException in InvalidRequestException, KAFKA-13609); DELETE, which has
    nothing to delete, succeeds. Other broker ids: INVALID_REQUEST; APPEND or SUBTRACT on an
    unknown or non-list broker config: INVALID_CONFIG.
    GROUP: as before (alter_group_configs.py): INVALID_CONFIG for a bad result,
    INVALID_REQUEST for an empty name. Other resource types: INVALID_REQUEST.
    With an authorizer, ALTER_CONFIGS on the topic, group or cluster (for BROKER) after the
    request's own checks: TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED,
    CLUSTER_AUTHORIZATION_FAILED, that resource untouched."""
    body = request.body
    m = response_types(ApiKey.INCREMENTAL_ALTER_CONFIGS, request.api_version)
    rejected = request_errors(body.resources, _PRECHECKED)
    responses = []
    for index, resource in enumerate(body.resources):
        rtype, name = resource.resource_type, resource.resource_name
        # Kafka's order: the request's own checks (`rejected`) first, then ALTER_CONFIGS.
        denied = None
        if index not in rejected:
            denied = config_resource_denied(
                ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, ALTER_CONFIGS, rtype, name
            )
        if denied is not None:
            error, message = ErrorCode(denied), DENIED_MESSAGES[denied]
        else:
            error, message = _alter(ctx, index, resource, body.validate_only, rejected)
        responses.append(
            build(
                m.AlterConfigsResourceResponse,
                error_code=error,
                error_message=message,
                resource_type=rtype,
                resource_name=name,
            )
        )
    return build(m.IncrementalAlterConfigsResponse, responses=tuple(responses))


def _alter(
    ctx: TopicsContext,
    index: int,
    resource: Any,
    validate_only: bool,
    rejected: dict[int, AlterError],
) -> tuple[ErrorCode, str | None]:
    rtype = resource.resource_type
    alter = _ALTER.get(rtype)
    if alter is None:
        return (
            ErrorCode.INVALID_REQUEST,
            f"Altering configs of resource type {rtype} is not supported",
        )
    try:
        if index in rejected:
            raise rejected[index]
        alter(ctx, resource, validate_only)
    except (AlterError, TopicError) as e:
        return ErrorCode(e.code), e.message
    except Exception as e:
        # OSError: a write failed (what was in force stays so); anything else is a bug.
        # Either is this resource's answer, not the whole request's.
        if isinstance(e, OSError):
            log.error("alter configs failed", resource=resource.resource_name, error=str(e))
        else:
            log.exception("alter configs failed", resource=resource.resource_name)
        return (
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"Altering configs of '{resource.resource_name}' failed: {e}",
        )
    return ErrorCode.NONE, None

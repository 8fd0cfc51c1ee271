"""Per-group configuration (KIP-848 dynamic group configs): the GROUP resource of
DescribeConfigs and IncrementalAlterConfigs, with Kafka's names, bounds and messages.

Theory of operation. Overrides are plain `{name: value}` strings kept by the server (a
`GroupConfigSource`, persisted beside the topic metadata); a shard reads a group's
overrides when a heartbeat needs its settings, so a change applies from the group's next
heartbeat (as in Kafka: a member's timers are re-armed with the new values then). This
module is pure: the names and their checks, and the effective settings of a group.

`consumer.assignor` is ours: the server assignor a group uses when none of its members
names one (Kafka only has the broker-wide `group.consumer.assignors` order). Kafka's
`consumer.assignor.offload.enable` (default true) lets a group of at least
`consumer_offload_min_members` members compute its target assignment in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from .config import GroupConfig

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
ASSIGNMENT_INTERVAL = "consumer.assignment.interval.ms"
ASSIGNOR_OFFLOAD = "consumer.assignor.offload.enable"
ASSIGNOR = "consumer.assignor"


class InvalidGroupConfig(ValueError):
    """INVALID_CONFIG, with the message to send."""


class GroupConfigSource(Protocol):
    def overrides(self, group_id: str) -> Mapping[str, str]: ...


class NoGroupConfigs:
    def overrides(self, group_id: str) -> Mapping[str, str]:
        return {}


@dataclass(frozen=True)
class GroupConfigSpec:
    name: str
    kind: str  # Kafka's config type name (DescribeConfigs v3+)
    default: Callable[[GroupConfig], str]
    doc: str


GROUP_CONFIGS: dict[str, GroupConfigSpec] = {
    spec.name: spec
    for spec in (
        GroupConfigSpec(
            SESSION_TIMEOUT,
            "INT",
            lambda c: str(c.consumer_session_timeout_ms),
            "The timeout to detect client failures when using the consumer group protocol.",
        ),
        GroupConfigSpec(
            HEARTBEAT_INTERVAL,
            "INT",
            lambda c: str(c.consumer_heartbeat_interval_ms),
            "The heartbeat interval given to the members.",
        ),
        GroupConfigSpec(
            ASSIGNMENT_INTERVAL,
            "INT",
            lambda c: str(c.consumer_assignment_interval_ms),
            "The least time between two target assignments of the group.",
        ),
        GroupConfigSpec(
            ASSIGNOR_OFFLOAD,
            "BOOLEAN",
            lambda c: "true",
            "Whether a large group (group_consumer_offload_min_members) computes its target "
            "assignment off the loop.",
        ),
        GroupConfigSpec(
            ASSIGNOR,
            "STRING",
            lambda c: c.consumer_assignors[0],
            "The server assignor used when no member names one (groupcoord's own).",
        ),
    )
}


@dataclass(frozen=True)
class ConsumerGroupSettings:
    session_timeout_ms: int
    heartbeat_interval_ms: int
    assignment_interval_ms: int
    assignor: str
    assignor_offload: bool = True


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidGroupConfig(f"Invalid value {value} for configuration {name}") from None


def _bounded(name: str, value: str, low: int, high: int, low_name: str, high_name: str) -> int:
    number = _int(name, value)
    if number < low:
        raise InvalidGroupConfig(f"{name} must be greater than or equal to {low_name}")
    if number > high:
        raise InvalidGroupConfig(f"{name} must be less than or equal to {high_name}")
    return number


def settings(config: GroupConfig, overrides: Mapping[str, str]) -> ConsumerGroupSettings:
    """The group's effective settings; raises InvalidGroupConfig for invalid overrides
    (Kafka's GroupConfig.validate, bounds from the broker's min/max settings)."""
    for name in overrides:
        if name not in GROUP_CONFIGS:
            raise InvalidGroupConfig(f"Unknown group config name: {name}")
    session = config.consumer_session_timeout_ms
    if SESSION_TIMEOUT in overrides:
        session = _bounded(
            SESSION_TIMEOUT,
            overrides[SESSION_TIMEOUT],
            config.consumer_min_session_timeout_ms,
            config.consumer_max_session_timeout_ms,
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        )
    heartbeat = config.consumer_heartbeat_interval_ms
    if HEARTBEAT_INTERVAL in overrides:
        heartbeat = _bounded(
            HEARTBEAT_INTERVAL,
            overrides[HEARTBEAT_INTERVAL],
            config.consumer_min_heartbeat_interval_ms,
            config.consumer_max_heartbeat_interval_ms,
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        )
    if (SESSION_TIMEOUT in overrides or HEARTBEAT_INTERVAL in overrides) and heartbeat >= session:
        raise InvalidGroupConfig(f"{HEARTBEAT_INTERVAL} must be less than {SESSION_TIMEOUT}")
    interval = config.consumer_assignment_interval_ms
    if ASSIGNMENT_INTERVAL in overrides:
        interval = _bounded(
            ASSIGNMENT_INTERVAL,
            overrides[ASSIGNMENT_INTERVAL],
            0,
            config.consumer_max_assignment_interval_ms,
            "0",
            "group.consumer.max.assignment.interval.ms",
        )
    if ASSIGNOR_OFFLOAD in overrides and overrides[ASSIGNOR_OFFLOAD].lower() not in (
        "true",
        "false",
    ):
        raise InvalidGroupConfig(
            f"Invalid value {overrides[ASSIGNOR_OFFLOAD]} for configuration {ASSIGNOR_OFFLOAD}"
        )
    assignor = overrides.get(ASSIGNOR, config.consumer_assignors[0])
    if assignor not in config.consumer_assignors:
        raise InvalidGroupConfig(
            f"{ASSIGNOR} must be one of {', '.join(config.consumer_assignors)}"
        )
    offload = overrides.get(ASSIGNOR_OFFLOAD, "true").lower() == "true"
    return ConsumerGroupSettings(session, heartbeat, interval, assignor, offload)

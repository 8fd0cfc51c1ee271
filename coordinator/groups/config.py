"""The group coordinator's settings, defined once: what the server is configured with
(broker-level: the setting's name, default, meaning and Kafka's name), the shard's view of
them (GroupConfig), the per-group overrides of KIP-848 (the GROUP resource of
DescribeConfigs and IncrementalAlterConfigs: Kafka's names, types, bounds and messages) and
a group's effective settings.

Theory of operation. A GroupConfig field that the server's configuration sets carries, in
its metadata, the server's name for it (a field of coordinator/config.py's Config: TOML
key, GROUPCOORD_<NAME>, --set), its meaning (for --help and the README) and Kafka's name;
Config declares those fields from SERVER_SETTINGS and the runtime builds the shards'
GroupConfig with `from_server`. Overrides are plain `{name: value}` strings kept by the
server (runtime/group_config_store.py, a GroupConfigSource); a shard reads a group's
overrides when a heartbeat needs its settings, so a change applies from the group's next
heartbeat (as in Kafka: a member's timers are re-armed with the new values then). An
override is checked against the broker's bounds when it is set and again when it is read
(the bounds may have changed since). Pure: no I/O, nothing of ours imported.

`consumer.assignor` is ours: the server assignor a group uses when none of its members
names one (Kafka only has the broker-wide `group.consumer.assignors` order). Kafka's
`consumer.assignor.offload.enable` (default true) lets a group of at least
`consumer_offload_min_members` members compute its target assignment in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple, Protocol, TypeVar

from .assignors.spec import PartitionAssignor

_T = TypeVar("_T")

# The per-group configs (Kafka's GroupConfig names).
SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
ASSIGNMENT_INTERVAL = "consumer.assignment.interval.ms"
ASSIGNOR_OFFLOAD = "consumer.assignor.offload.enable"
ASSIGNOR = "consumer.assignor"

# group.consumer.migration.policy's values.
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


def _one_of(choices: tuple[str, ...]) -> str:
    return f"{', '.join(choices[:-1])} or {choices[-1]}"


# Metadata keys of GroupConfig's fields.
_SETTING, _HELP, _KAFKA = "setting", "help", "kafka"


def _server(default: _T, setting: str, meaning: str, kafka: str | None = None) -> _T:
    """A field the server's configuration sets, as `setting`; its help is `meaning`
    followed by Kafka's name of it, when Kafka has the same setting."""
    help_ = f"{meaning} ({kafka})" if kafka is not None else meaning
    return field(default=default, metadata={_SETTING: setting, _HELP: help_, _KAFKA: kafka})


def _fixed(default: _T, kafka: str) -> _T:
    """A field the server does not configure: Kafka's value (and name) of it."""
    return field(default=default, metadata={_KAFKA: kafka})


@dataclass(frozen=True)
class GroupConfig:
    """The group coordinator's settings as the pure shard logic sees them."""

    min_session_timeout_ms: int = _server(
        6_000,
        "group_min_session_timeout_ms",
        "smallest session timeout",
        "group.min.session.timeout.ms",
    )
    max_session_timeout_ms: int = _server(
        1_800_000,
        "group_max_session_timeout_ms",
        "largest session timeout",
        "group.max.session.timeout.ms",
    )
    initial_rebalance_delay_ms: int = _server(
        3_000,
        "group_initial_rebalance_delay_ms",
        "wait for more members of a new group",
        "group.initial.rebalance.delay.ms",
    )
    max_size: int = _server(
        2_147_483_647, "group_max_size", "members per classic group", "group.max.size"
    )
    # Ours (Kafka's only bound is its coordinator log's message.max.bytes, 1 MiB, on the
    # whole group record): what one member may make the server keep and write.
    member_metadata_max_bytes: int = _server(
        1_048_576,
        "group_member_metadata_bytes_max",
        "largest protocol metadata of one classic member (JoinGroup, all protocols) or "
        "subscription of one consumer-protocol member (ConsumerGroupHeartbeat) (ours)",
    )
    member_assignment_max_bytes: int = _server(
        1_048_576,
        "group_member_assignment_bytes_max",
        "largest assignment of one member in a leader's SyncGroup (ours)",
    )
    # Ours: groups (of every kind, those only offset commits made included) the server
    # holds; a request that would create one more is refused GROUP_MAX_SIZE_REACHED.
    max_groups: int = _server(
        100_000,
        "groups_max",
        "groups the server holds; a request creating one more is refused (ours)",
    )
    # Hard-coded in Kafka (a new member's JoinGroup waits at most this long).
    new_member_join_timeout_ms: int = 300_000
    offset_metadata_max_bytes: int = _server(
        4_096,
        "offset_metadata_bytes_max",
        "largest commit metadata",
        "offset.metadata.max.bytes",
    )
    # Kafka's offsets.retention.minutes (10080), in ms.
    offsets_retention_ms: int = _server(
        7 * 24 * 3600 * 1000,
        "offsets_retention_ms",
        "offset retention (offsets.retention.minutes, in ms)",
    )
    # Kafka's offsets.retention.check.interval.ms.
    offsets_retention_check_interval_ms: int = _server(
        600_000, "offsets_retention_check_interval_ms", "how often expired offsets are removed"
    )
    # The consumer rebalance protocol (KIP-848).
    consumer_session_timeout_ms: int = _server(
        45_000,
        "group_consumer_session_timeout_ms",
        "consumer-protocol session timeout",
        "group.consumer.session.timeout.ms",
    )
    consumer_min_session_timeout_ms: int = _server(
        45_000,
        "group_consumer_min_session_timeout_ms",
        f"smallest per-group {SESSION_TIMEOUT}",
        "group.consumer.min.session.timeout.ms",
    )
    consumer_max_session_timeout_ms: int = _server(
        60_000,
        "group_consumer_max_session_timeout_ms",
        f"largest per-group {SESSION_TIMEOUT}",
        "group.consumer.max.session.timeout.ms",
    )
    consumer_heartbeat_interval_ms: int = _server(
        5_000,
        "group_consumer_heartbeat_interval_ms",
        "consumer-protocol heartbeat interval",
        "group.consumer.heartbeat.interval.ms",
    )
    consumer_min_heartbeat_interval_ms: int = _server(
        5_000,
        "group_consumer_min_heartbeat_interval_ms",
        f"smallest per-group {HEARTBEAT_INTERVAL}",
        "group.consumer.min.heartbeat.interval.ms",
    )
    consumer_max_heartbeat_interval_ms: int = _server(
        15_000,
        "group_consumer_max_heartbeat_interval_ms",
        f"largest per-group {HEARTBEAT_INTERVAL}",
        "group.consumer.max.heartbeat.interval.ms",
    )
    consumer_max_size: int = _server(
        2_147_483_647,
        "group_consumer_max_size",
        "members per consumer group",
        "group.consumer.max.size",
    )
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    # The assignors of the names above that are not built in (uniform, range): the server
    # loads them from entry points (coordinator/assignor_plugins.py), tests pass them.
    consumer_assignor_plugins: tuple[PartitionAssignor, ...] = ()
    # With an authorizer (the server's authorizer_enabled): a regex is resolved only with
    # the DESCRIBE check of a member's heartbeat (regex_refresh.py), never without one (as
    # after a restart, before any heartbeat).
    regex_needs_member_check: bool = False
    consumer_assignment_interval_ms: int = _server(
        1_000,
        "group_consumer_assignment_interval_ms",
        "least time between target assignments of a group",
        "group.consumer.assignment.interval.ms",
    )
    consumer_regex_refresh_interval_ms: int = _server(
        600_000,
        "group_consumer_regex_refresh_interval_ms",
        "how often a consumer group's regex subscriptions are resolved again at the latest",
        "group.consumer.regex.refresh.interval.ms",
    )
    # Lower-cased by the shard, checked by check_server_settings.
    consumer_migration_policy: str = _server(
        "bidirectional",
        "group_consumer_migration_policy",
        f"classic <-> consumer group conversion: {_one_of(MIGRATION_POLICIES)}",
        "group.consumer.migration.policy",
    )
    # The upper bound of consumer.assignment.interval.ms in Kafka.
    consumer_max_assignment_interval_ms: int = _fixed(
        15_000, "group.consumer.max.assignment.interval.ms"
    )
    # Ours: the heartbeat interval given to members that are reconciling (0: the normal
    # interval), so released partitions reach their next owner quickly.
    consumer_reconciling_heartbeat_interval_ms: int = _server(
        250,
        "group_consumer_reconciling_heartbeat_interval_ms",
        "heartbeat interval given to reconciling members so released partitions move fast "
        "(ours; 0 = the normal interval)",
    )
    # Ours: groups this large (members, or partitions of the topics they subscribe to)
    # compute their target assignment off the shard's loop and write it in slices, unless
    # the group's consumer.assignor.offload.enable is false.
    consumer_offload_min_members: int = _server(
        200,
        "group_consumer_offload_min_members",
        "consumer groups with this many members compute target assignments off the shard's "
        f"loop (ours; per group: {ASSIGNOR_OFFLOAD})",
    )
    consumer_offload_min_partitions: int = _server(
        10_000,
        "group_consumer_offload_min_partitions",
        "... or whose subscribed topics have this many partitions (ours)",
    )
    # Ours: the rebalance timeline (events.py), rebuilt from the log at load. In a shard's
    # GroupConfig, timeline_events_total is that shard's share (runtime/service.py).
    timeline_events: int = _server(
        100,
        "group_timeline_events",
        "group events kept per group for the rebalance timeline (ours; 0: none)",
    )
    timeline_events_total: int = _server(
        100_000,
        "group_timeline_events_total",
        "group events kept for the timelines of all groups, the oldest dropped first (ours)",
    )


# -- broker-level: the server's settings ---------------------------------------------------


class ServerSetting(NamedTuple):
    """A setting of the server's configuration that the group coordinator reads."""

    field: str  # GroupConfig's field
    default: Any
    help: str


# By the server's name (Config's field), in GroupConfig's order.
SERVER_SETTINGS: dict[str, ServerSetting] = {
    f.metadata[_SETTING]: ServerSetting(f.name, f.default, f.metadata[_HELP])
    for f in fields(GroupConfig)
    if _SETTING in f.metadata
}
_SETTING_OF = {s.field: name for name, s in SERVER_SETTINGS.items()}
_KAFKA_NAME_OF = {f.name: f.metadata[_KAFKA] for f in fields(GroupConfig) if f.metadata}


def from_server(settings: object, **others: Any) -> GroupConfig:
    """The shards' settings from the server's configuration (coordinator/config.py's Config,
    read by the names of SERVER_SETTINGS); `others`: the fields the server does not set by
    name alone (the assignors)."""
    values = {s.field: getattr(settings, name) for name, s in SERVER_SETTINGS.items()}
    return GroupConfig(**values, **others)


class InvalidGroupConfig(ValueError):
    """Settings the checks refuse (per group: INVALID_CONFIG), with the message to give."""


def check_server_settings(config: GroupConfig) -> None:
    """The broker-level checks; raises InvalidGroupConfig naming the server's settings."""
    heartbeat, session = "consumer_heartbeat_interval_ms", "consumer_session_timeout_ms"
    if config.consumer_heartbeat_interval_ms >= config.consumer_session_timeout_ms:
        raise InvalidGroupConfig(f"{_SETTING_OF[heartbeat]} must be below {_SETTING_OF[session]}")
    if config.consumer_migration_policy.lower() not in MIGRATION_POLICIES:
        raise InvalidGroupConfig(
            f"{_SETTING_OF['consumer_migration_policy']}: {_one_of(MIGRATION_POLICIES)}"
        )


# -- per group: KIP-848's dynamic group configs ----------------------------------------------


class GroupConfigSource(Protocol):
    """Where a shard reads the groups' overrides (the server's: runtime/group_config_store.py)."""

    def overrides(self, group_id: str) -> Mapping[str, str]: ...


class NoGroupConfigs:
    def overrides(self, group_id: str) -> Mapping[str, str]:
        return {}


@dataclass(frozen=True)
class GroupConfigSpec:
    """A per-group config: Kafka's name and type (DescribeConfigs v3+), the broker's value
    that applies without an override, and its documentation."""

    name: str
    kind: str
    broker_value: Callable[[GroupConfig], str]
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
    """A consumer group's effective settings: its overrides over the broker's."""

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


def _bounded(config: GroupConfig, name: str, value: str, low: str | None, high: str) -> int:
    """`value` of config `name`, within the GroupConfig fields `low` (None: 0) and `high`;
    the messages name the bounds as Kafka does, by their broker configs."""
    number = _int(name, value)
    if number < (getattr(config, low) if low is not None else 0):
        low_name = _KAFKA_NAME_OF[low] if low is not None else "0"
        raise InvalidGroupConfig(f"{name} must be greater than or equal to {low_name}")
    if number > getattr(config, high):
        raise InvalidGroupConfig(f"{name} must be less than or equal to {_KAFKA_NAME_OF[high]}")
    return number


def effective_settings(config: GroupConfig, overrides: Mapping[str, str]) -> ConsumerGroupSettings:
    """The group's effective settings; raises InvalidGroupConfig for invalid overrides
    (Kafka's GroupConfig.validate, bounds from the broker's min/max settings)."""
    for name in overrides:
        if name not in GROUP_CONFIGS:
            raise InvalidGroupConfig(f"Unknown group config name: {name}")
    session = config.consumer_session_timeout_ms
    if SESSION_TIMEOUT in overrides:
        session = _bounded(
            config,
            SESSION_TIMEOUT,
            overrides[SESSION_TIMEOUT],
            "consumer_min_session_timeout_ms",
            "consumer_max_session_timeout_ms",
        )
    heartbeat = config.consumer_heartbeat_interval_ms
    if HEARTBEAT_INTERVAL in overrides:
        heartbeat = _bounded(
            config,
            HEARTBEAT_INTERVAL,
            overrides[HEARTBEAT_INTERVAL],
            "consumer_min_heartbeat_interval_ms",
            "consumer_max_heartbeat_interval_ms",
        )
    if (SESSION_TIMEOUT in overrides or HEARTBEAT_INTERVAL in overrides) and heartbeat >= session:
        raise InvalidGroupConfig(f"{HEARTBEAT_INTERVAL} must be less than {SESSION_TIMEOUT}")
    interval = config.consumer_assignment_interval_ms
    if ASSIGNMENT_INTERVAL in overrides:
        interval = _bounded(
            config,
            ASSIGNMENT_INTERVAL,
            overrides[ASSIGNMENT_INTERVAL],
            None,
            "consumer_max_assignment_interval_ms",
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

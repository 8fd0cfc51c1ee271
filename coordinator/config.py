"""Server configuration: one frozen dataclass, filled from defaults < TOML file < environment
(GROUPCOORD_<NAME>) < command-line flags. Units are last in names. The group coordinator's
settings (group_*, offsets retention, commit metadata) are defined with the shards' view of
them, in groups/config.py: here they are only declared, and checked through it."""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .groups.config import SERVER_SETTINGS, InvalidGroupConfig, check_server_settings, from_server

MiB = 1024 * 1024
DAY_MS = 24 * 3600 * 1000
LONG_MAX = 2**63 - 1  # Java's Long.MAX_VALUE: Kafka's "no limit" for LONG settings
# Room in a frame beside its record batch: request header, transactional id, topic name,
# partition fields (a produce request's own bytes are far below this).
FRAME_OVERHEAD_BYTES = 64 * 1024


class ConfigError(ValueError):
    pass


def split_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _group_setting(name: str) -> Any:
    """A setting of the group coordinator: its default and meaning are defined with the
    shards' settings (groups/config.py)."""
    setting = SERVER_SETTINGS[name]
    return field(default=setting.default, metadata={"help": setting.help})


@dataclass(frozen=True)
class Config:
    listen: str = field(default="127.0.0.1:9092", metadata={"help": "Kafka listener HOST:PORT"})
    advertised_listener: str = field(
        default="",
        metadata={"help": "HOST:PORT clients are told to connect to (default: the listener)"},
    )
    data_dir: str = field(default="./data", metadata={"help": "directory for all state"})
    data_umask: str = field(
        default="077",
        metadata={
            "help": "umask (octal) for every file and directory the server creates in "
            "data_dir: 077 makes them 0600/0700; 027 lets the group read"
        },
    )
    metrics_listen: str = field(
        default="127.0.0.1:9464",
        metadata={"help": "HTTP HOST:PORT for /metrics and /health (empty: disabled)"},
    )
    node_id: int = field(default=0, metadata={"help": "broker id advertised in metadata"})
    log_level: str = field(default="info", metadata={"help": "debug, info, warning or error"})
    log_repeat_window_ms: int = field(
        default=10_000,
        metadata={
            "help": "identical log lines (same level, event and fields) within this time "
            "after one is logged are counted instead of logged; the count follows with the "
            "next one logged (0: log every line)"
        },
    )
    frame_bytes_max: int = field(
        default=8 * MiB,
        metadata={
            "help": "largest request frame accepted (socket.request.max.bytes, 100 MiB in "
            "Kafka); keep it at least message_bytes_max + 64 KiB, so that a request carrying "
            "a max-size batch fits (a warning at start says when it is not)"
        },
    )
    queued_request_bytes_max: int = field(
        default=128 * MiB,
        metadata={
            "help": "bytes the connections together may hold in partly received frames and "
            "unsent responses (queued.max.request.bytes); past it, connections starting a "
            "frame stop reading until bytes are freed"
        },
    )
    frame_read_timeout_ms: int = field(
        default=30_000,
        metadata={
            "help": "a frame whose first bytes arrived must be complete within this, or the "
            "connection is closed (a slow sender holds a connection and its bytes)"
        },
    )
    connection_inflight_max: int = field(
        default=100,
        metadata={
            "help": "requests in flight per connection; beyond it reading pauses and requests "
            "already read wait unhandled"
        },
    )
    frames_per_loop_iteration_max: int = field(
        default=64,
        metadata={
            "help": "request frames the connections together handle per event-loop iteration; "
            "the rest wait for the next one, so that fsync completions are not held behind "
            "one long burst of reads"
        },
    )
    connection_write_buffer_bytes_max: int = field(
        default=8 * MiB,
        metadata={"help": "unsent response bytes per connection before reading pauses"},
    )
    connections_max: int = field(
        default=10_000, metadata={"help": "open connections accepted (max.connections)"}
    )
    connections_max_per_ip: int = field(
        default=1_000,
        metadata={
            "help": "open connections accepted from one client address (max.connections.per.ip)"
        },
    )
    connections_max_per_ip_overrides: str = field(
        default="",
        metadata={
            "help": "per-address exceptions, ADDRESS:COUNT,... "
            "(max.connections.per.ip.overrides; addresses as connections show them, no names)"
        },
    )
    connections_max_idle_ms: int = field(
        default=600_000,
        metadata={
            "help": "a connection with no request in flight that received nothing for this "
            "long is closed (connections.max.idle.ms)"
        },
    )
    segment_files_open_max: int = field(
        default=0,
        metadata={
            "help": "segment files kept open across all logs, least recently used closed "
            "first and reopened on demand (0: half the file-descriptor limit, which is "
            "raised to the hard limit at start)"
        },
    )
    auto_create_topics: bool = field(
        default=True, metadata={"help": "create unknown topics on Metadata requests that allow it"}
    )
    default_partitions: int = field(
        default=1, metadata={"help": "partitions of auto-created topics"}
    )
    message_bytes_max: int = field(
        default=1_048_588, metadata={"help": "largest record batch accepted (max.message.bytes)"}
    )
    log_segment_bytes: int = field(
        default=1024 * MiB, metadata={"help": "segment size before rolling"}
    )
    log_segment_ms: int = field(default=7 * DAY_MS, metadata={"help": "segment age before rolling"})
    log_retention_ms: int = field(
        default=7 * DAY_MS, metadata={"help": "delete segments older than this (-1: forever)"}
    )
    log_retention_bytes: int = field(
        default=-1, metadata={"help": "keep at most this many bytes per partition (-1: unlimited)"}
    )
    log_retention_check_interval_ms: int = field(
        default=300_000, metadata={"help": "how often retention runs"}
    )
    log_cleaner_interval_ms: int = field(
        default=15_000,
        metadata={
            "help": "how often the partitions of compacted topics (cleanup.policy=compact) "
            "are checked and cleaned when due (log.cleaner.backoff.ms)"
        },
    )
    log_message_timestamp_type: str = field(
        default="CreateTime",
        metadata={
            "help": "record timestamps: the producer's (CreateTime) or the append time "
            "(LogAppendTime); topics' default (log.message.timestamp.type)"
        },
    )
    log_message_timestamp_before_max_ms: int = field(
        default=LONG_MAX,
        metadata={
            "help": "CreateTime: refuse records timestamped further in the past than this "
            "(log.message.timestamp.before.max.ms)"
        },
    )
    log_message_timestamp_after_max_ms: int = field(
        default=3_600_000,
        metadata={
            "help": "CreateTime: refuse records timestamped further in the future than this "
            "(log.message.timestamp.after.max.ms)"
        },
    )
    fetch_wait_max_ms: int = field(
        default=30_000, metadata={"help": "cap on a Fetch request's max_wait"}
    )
    durable_waiters_max: int = field(
        default=100_000, metadata={"help": "produce requests parked awaiting fsync"}
    )
    syncfs_min_logs: int = field(
        default=4,
        metadata={
            "help": "a group-commit round over at least this many logs is made durable by "
            "one syncfs() of the data directory's filesystem instead of one fsync per log "
            "(Linux 5.8+; 0: always per-log fsyncs)"
        },
    )
    offsets_partitions: int = field(
        default=50,
        metadata={
            "help": "coordinator shards (offsets.topic.num.partitions); like Kafka's, it "
            "applies to a new data directory only: one already served keeps its count"
        },
    )
    offsets_segment_bytes: int = field(
        default=100 * MiB,
        metadata={"help": "coordinator log segment size (offsets.topic.segment.bytes)"},
    )
    offsets_retention_ms: int = _group_setting("offsets_retention_ms")
    offsets_retention_check_interval_ms: int = _group_setting("offsets_retention_check_interval_ms")
    offset_metadata_bytes_max: int = _group_setting("offset_metadata_bytes_max")
    offsets_compaction_interval_ms: int = field(
        default=300_000, metadata={"help": "how often coordinator logs are compacted"}
    )
    offsets_tombstone_retention_ms: int = field(
        default=DAY_MS, metadata={"help": "how long compaction keeps tombstones"}
    )
    transaction_state_partitions: int = field(
        default=50,
        metadata={
            "help": "transaction coordinator shards, logs __transaction_state-N "
            "(transaction.state.log.num.partitions); like offsets_partitions, it applies to "
            "a new data directory only"
        },
    )
    transaction_state_segment_bytes: int = field(
        default=100 * MiB,
        metadata={
            "help": "transaction state log segment size (transaction.state.log.segment.bytes)"
        },
    )
    transaction_max_timeout_ms: int = field(
        default=900_000,
        metadata={
            "help": "largest transaction timeout a producer may ask for; above it "
            "InitProducerId answers INVALID_TRANSACTION_TIMEOUT (transaction.max.timeout.ms)"
        },
    )
    transaction_abort_interval_ms: int = field(
        default=10_000,
        metadata={
            "help": "how often transactions past their timeout are aborted "
            "(transaction.abort.timed.out.transaction.cleanup.interval.ms)"
        },
    )
    transactional_id_expiration_ms: int = field(
        default=7 * DAY_MS,
        metadata={
            "help": "a transactional id with no transaction in progress and no update for "
            "this long is forgotten (transactional.id.expiration.ms)"
        },
    )
    transaction_expiration_interval_ms: int = field(
        default=3_600_000,
        metadata={
            "help": "how often expired transactional ids are removed "
            "(transaction.remove.expired.transaction.cleanup.interval.ms)"
        },
    )
    transaction_partition_verification_enable: bool = field(
        default=True,
        metadata={
            "help": "a transactional Produce (v11 and older) or TxnOffsetCommit (v4 and older) "
            "that would open a transaction on a partition first asks the transaction "
            "coordinator whether the partition is in the transaction, so no hanging "
            "transaction is created (transaction.partition.verification.enable; transactions "
            "V2 always ask, to add it)"
        },
    )
    group_min_session_timeout_ms: int = _group_setting("group_min_session_timeout_ms")
    group_max_session_timeout_ms: int = _group_setting("group_max_session_timeout_ms")
    group_initial_rebalance_delay_ms: int = _group_setting("group_initial_rebalance_delay_ms")
    group_max_size: int = _group_setting("group_max_size")
    group_member_metadata_bytes_max: int = _group_setting("group_member_metadata_bytes_max")
    group_member_assignment_bytes_max: int = _group_setting("group_member_assignment_bytes_max")
    groups_max: int = _group_setting("groups_max")
    group_consumer_session_timeout_ms: int = _group_setting("group_consumer_session_timeout_ms")
    group_consumer_min_session_timeout_ms: int = _group_setting(
        "group_consumer_min_session_timeout_ms"
    )
    group_consumer_max_session_timeout_ms: int = _group_setting(
        "group_consumer_max_session_timeout_ms"
    )
    group_consumer_heartbeat_interval_ms: int = _group_setting(
        "group_consumer_heartbeat_interval_ms"
    )
    group_consumer_min_heartbeat_interval_ms: int = _group_setting(
        "group_consumer_min_heartbeat_interval_ms"
    )
    group_consumer_max_heartbeat_interval_ms: int = _group_setting(
        "group_consumer_max_heartbeat_interval_ms"
    )
    group_consumer_max_size: int = _group_setting("group_consumer_max_size")
    group_consumer_assignors: str = field(
        default="uniform,range",
        metadata={
            "help": "server assignors, the first is the default (group.consumer.assignors): "
            "uniform, range, or names of entry points in the group groupcoord.assignors"
        },
    )
    group_consumer_assignment_interval_ms: int = _group_setting(
        "group_consumer_assignment_interval_ms"
    )
    group_consumer_regex_refresh_interval_ms: int = _group_setting(
        "group_consumer_regex_refresh_interval_ms"
    )
    group_consumer_offload_min_members: int = _group_setting("group_consumer_offload_min_members")
    group_consumer_offload_min_partitions: int = _group_setting(
        "group_consumer_offload_min_partitions"
    )
    group_consumer_migration_policy: str = _group_setting("group_consumer_migration_policy")
    group_consumer_reconciling_heartbeat_interval_ms: int = _group_setting(
        "group_consumer_reconciling_heartbeat_interval_ms"
    )
    thread_switch_interval_us: int = field(
        default=100,
        metadata={"help": "Python thread switch interval; short so fsync results return fast"},
    )
    shutdown_timeout_ms: int = field(
        default=10_000, metadata={"help": "time to finish in-flight requests on SIGTERM"}
    )

    @property
    def listen_address(self) -> tuple[str, int]:
        return split_host_port(self.listen)

    @property
    def advertised_address(self) -> tuple[str, int]:
        host, port = split_host_port(self.advertised_listener or self.listen)
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return host, port

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)

    @property
    def data_umask_bits(self) -> int:
        return int(self.data_umask, 8)


ENV_PREFIX = "GROUPCOORD_"


def _coerce(name: str, kind: Any, value: Any) -> Any:
    if kind in (bool, "bool"):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: expected a boolean, got {value!r}")
    if kind in (int, "int"):
        if isinstance(value, bool):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: expected an integer, got {value!r}") from None
    return str(value)


def load_config(
    file: str | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Merge defaults, the TOML file, GROUPCOORD_* variables and explicit overrides."""
    environ = dict(os.environ if environ is None else environ)
    values: dict[str, Any] = {}
    known = {f.name: f.type for f in fields(Config)}
    file = file or environ.get(ENV_PREFIX + "CONFIG")
    if file:
        try:
            with open(file, "rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read config file {file}: {e}") from None
        for key, value in data.items():
            name = key.replace("-", "_")
            if name not in known:
                raise ConfigError(f"unknown setting {key!r} in {file}")
            values[name] = _coerce(name, known[name], value)
    for name, kind in known.items():
        env = environ.get(ENV_PREFIX + name.upper())
        if env is not None:
            values[name] = _coerce(name, kind, env)
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, known[name], value)
    config = Config(**values)
    validate(config)
    return config


def validate(config: Config) -> None:
    # Parsing the addresses is the check: a bad HOST:PORT raises ConfigError here.
    _ = (config.listen_address, config.advertised_address)
    if config.metrics_listen:
        split_host_port(config.metrics_listen)
    positive = (
        "frame_bytes_max",
        "connection_inflight_max",
        "frames_per_loop_iteration_max",
        "connections_max",
        "connections_max_per_ip",
        "connections_max_idle_ms",
        "queued_request_bytes_max",
        "frame_read_timeout_ms",
        "default_partitions",
        "message_bytes_max",
        "log_segment_bytes",
        "log_cleaner_interval_ms",
        "offsets_partitions",
        "transaction_state_partitions",
        "transaction_state_segment_bytes",
        "transaction_max_timeout_ms",
        "transaction_abort_interval_ms",
        "transactional_id_expiration_ms",
        "transaction_expiration_interval_ms",
        "thread_switch_interval_us",
        "group_member_metadata_bytes_max",
        "group_member_assignment_bytes_max",
        "groups_max",
    )
    for name in positive:
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name} must be positive")
    per_ip_overrides(config.connections_max_per_ip_overrides)  # raises ConfigError
    if config.log_repeat_window_ms < 0:
        raise ConfigError("log_repeat_window_ms must be 0 (off) or more")
    if config.segment_files_open_max < 0:
        raise ConfigError("segment_files_open_max must be 0 (automatic) or more")
    if config.syncfs_min_logs < 0:
        raise ConfigError("syncfs_min_logs must be 0 or more")
    try:
        check_server_settings(from_server(config))
    except InvalidGroupConfig as e:
        raise ConfigError(str(e)) from None
    # The names are resolved when the server starts (assignor_plugins.py): only there may
    # this module's users (topics/ among them) reach groups/ and installed distributions.
    if not [a for a in config.group_consumer_assignors.split(",") if a.strip()]:
        raise ConfigError(
            "group_consumer_assignors: a comma-separated list of assignors (uniform, range, "
            "or installed ones)"
        )
    if not re.fullmatch(r"0?[0-7]{1,3}", config.data_umask) or config.data_umask_bits & 0o700:
        raise ConfigError(
            "data_umask must be octal (e.g. 077 or 027) and must not mask the owner's bits (700)"
        )
    if config.log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError("log_level must be debug, info, warning or error")
    if config.log_message_timestamp_type not in ("CreateTime", "LogAppendTime"):
        raise ConfigError("log_message_timestamp_type must be CreateTime or LogAppendTime")
    for name in ("log_message_timestamp_before_max_ms", "log_message_timestamp_after_max_ms"):
        if not 0 <= getattr(config, name) <= LONG_MAX:
            raise ConfigError(f"{name} must be 0 to {LONG_MAX}")


def per_ip_overrides(text: str) -> dict[str, int]:
    """connections_max_per_ip_overrides ("ADDRESS:COUNT,...") as {address: count}."""
    overrides: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        address, sep, count = item.rpartition(":")
        address = address.strip().strip("[]")
        if not sep or not address or not count.strip().isdigit():
            raise ConfigError(
                f"connections_max_per_ip_overrides: expected ADDRESS:COUNT, got {item!r}"
            )
        overrides[address] = int(count)
    return overrides


def describe_settings() -> list[tuple[str, str, str]]:
    """(name, default, help) of every setting, for --help and the README."""
    return [
        (f.name, repr(f.default), f.metadata.get("help", "")) for f in dataclasses.fields(Config)
    ]


def markdown_table() -> str:
    """The README's configuration reference (`python -m groupcoord.coordinator.config`)."""
    rows = [
        "| setting (TOML key) | environment variable | default | meaning |",
        "|---|---|---|---|",
    ]
    for name, default, text in describe_settings():
        rows.append(f"| `{name}` | `{ENV_PREFIX}{name.upper()}` | `{default}` | {text} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())

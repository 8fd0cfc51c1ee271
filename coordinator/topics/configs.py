"""Topic-level configs: the Kafka names we honour, their defaults from the broker config,
and validation (unknown names or bad values -> INVALID_CONFIG)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..config import Config
from .cleanup_policy import POLICIES, policy_items


class InvalidConfig(ValueError):
    """A refused config value. `whole`: the message is Kafka's entire answer (it names the
    config itself), not the reason after "Invalid value V for configuration N: "."""

    def __init__(self, message: str, *, whole: bool = False) -> None:
        super().__init__(message)
        self.whole = whole


# Kafka parses INT configs as a Java int and LONG configs as a Java long (ConfigDef.parseType):
# anything outside that range is "Not a number", so a storage limit set by the type (e.g.
# segment.bytes, a u32 file position) is refused here, as INVALID_CONFIG, and never reaches
# the log (LogConfig raises ValueError on it).
_NUMBER_RANGES = {"INT": (-(2**31), 2**31 - 1), "LONG": (-(2**63), 2**63 - 1)}
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def _number_at_least(kind: str, low: int, high: int | None = None) -> Callable[[str], str]:
    """A Kafka INT or LONG config: a decimal in the type's range (Kafka trims the value, as
    Integer/Long.parseInt a sign is allowed, Python's digit separators are not), >= `low`
    (and <= `high` when given: ConfigDef.Range.between)."""
    lowest, highest = _NUMBER_RANGES[kind]

    def check(value: str) -> str:
        text = value.strip()
        if not _DECIMAL.fullmatch(text):
            raise InvalidConfig(f"Not a number of type {kind}")
        number = int(text)
        if not lowest <= number <= highest:
            raise InvalidConfig(f"Not a number of type {kind} ({lowest} to {highest})")
        if number < low:
            raise InvalidConfig(f"Value must be at least {low}")
        if high is not None and number > high:
            raise InvalidConfig(f"Value must be no more than {high}")
        return str(number)

    return check


def _number(
    name: str,
    kind: str,
    broker_setting: str | None,
    fixed_default: str | None,
    low: int,
    doc: str,
    high: int | None = None,
) -> ConfigSpec:
    """An INT or LONG config, checked against its type's range, `low` and `high`."""
    return ConfigSpec(
        name, kind, broker_setting, fixed_default, _number_at_least(kind, low, high), doc
    )


def _one_of(*choices: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in choices:
            raise InvalidConfig(f"must be one of {', '.join(choices)}")
        return value

    return check


def _string_in(*choices: str) -> Callable[[str], str]:
    """Kafka's ConfigDef.ValidString.in on the trimmed value (case matters)."""

    def check(value: str) -> str:
        text = value.strip()
        if text not in choices:
            raise InvalidConfig(f"String must be one of: {', '.join(choices)}")
        return text

    return check


def _boolean(value: str) -> str:
    """A Kafka BOOLEAN: 'true' or 'false' in any case, trimmed; kept in lower case."""
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfig("Expected value to be either true or false")
    return text


def _gzip_level(value: str) -> str:
    """GzipCompression.LevelValidator: 1 to 9, or -1 (zlib's default)."""
    text = _number_at_least("INT", -(2**31))(value)
    if text != "-1" and not 1 <= int(text) <= 9:
        raise InvalidConfig("Value must be between 1 and 9 or equal to -1")
    return text


_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def _throttled_replicas(name: str) -> Callable[[str], str]:
    """Kafka's ThrottledReplicaListValidator on a LIST: '*' or partition:broker pairs."""

    def check(value: str) -> str:
        text = value.strip()
        items = re.split(r"\s*,\s*", text) if text else []
        if not (
            all(_THROTTLED_REPLICA.fullmatch(item.strip()) for item in items)
            or "".join(items) == "*"
        ):
            raise InvalidConfig(
                f"Invalid value [{', '.join(items)}] for configuration {name}: {name} must be "
                "the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
                whole=True,
            )
        return value

    return check


def _remote_storage(value: str) -> str:
    """remote.storage.enable: a BOOLEAN, and never true here (no tiered storage), refused
    with the message Kafka's broker gives when its remote log storage system is off."""
    text = _boolean(value)
    if text == "true":
        raise InvalidConfig(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage.",
            whole=True,
        )
    return text


# compression.type values, in Kafka's order (BrokerCompressionType), and the record batch
# codec (attributes bits 0-2) each stands for; 'producer' keeps the producer's.
COMPRESSION_CODECS = {"uncompressed": 0, "zstd": 4, "lz4": 3, "snappy": 2, "gzip": 1}
PRODUCER_COMPRESSION = "producer"


def _cleanup_policy(value: str) -> str:
    """Kafka's ValidList.in("compact", "delete") (Kafka 4): any of them, once each, or
    none (neither deletion nor compaction); kept as written."""
    items = policy_items(value)
    if any(not item for item in items):
        raise InvalidConfig("Configuration 'cleanup.policy' values must not be empty.")
    if len(set(items)) != len(items):
        raise InvalidConfig("Configuration 'cleanup.policy' values must not be duplicated.")
    for item in items:
        if item not in POLICIES:
            raise InvalidConfig(f"String must be one of: {', '.join(POLICIES)}")
    return value


# Java's Double.parseDouble on a trimmed value, without NaN, infinities, hexadecimal or
# a type suffix.
_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _ratio(value: str) -> str:
    """A Kafka DOUBLE config between 0 and 1 (ConfigDef.Range.between(0, 1))."""
    text = value.strip()
    if not _DOUBLE.fullmatch(text):
        raise InvalidConfig("Not a number of type DOUBLE")
    number = float(text)
    if number < 0:
        raise InvalidConfig("Value must be at least 0")
    if number > 1:
        raise InvalidConfig("Value must be no more than 1")
    return text


@dataclass(frozen=True)
class ConfigSpec:
    name: str
    kind: str  # Kafka's config type name, for DescribeConfigs v3+
    broker_setting: str | None
    fixed_default: str | None
    check: Callable[[str], str]
    doc: str

    def default(self, config: Config) -> str:
        if self.broker_setting is not None:
            return str(getattr(config, self.broker_setting))
        assert self.fixed_default is not None
        return self.fixed_default


TOPIC_CONFIGS: dict[str, ConfigSpec] = {
    spec.name: spec
    for spec in (
        _number(
            "retention.ms",
            "LONG",
            "log_retention_ms",
            None,
            -1,
            "Delete segments older than this many milliseconds (-1: never).",
        ),
        _number(
            "retention.bytes",
            "LONG",
            "log_retention_bytes",
            None,
            -1,
            "Keep at most this many bytes per partition (-1: unlimited).",
        ),
        _number(
            "segment.bytes",
            "INT",
            "log_segment_bytes",
            None,
            14,
            "Segment file size before a new one is rolled.",
        ),
        _number(
            "segment.ms",
            "LONG",
            "log_segment_ms",
            None,
            1,
            "Segment age before a new one is rolled.",
        ),
        _number(
            "max.message.bytes",
            "INT",
            "message_bytes_max",
            None,
            0,
            "Largest record batch accepted.",
        ),
        ConfigSpec(
            "cleanup.policy",
            "LIST",
            None,
            "delete",
            _cleanup_policy,
            "'delete' (retention deletes old segments), 'compact' (the latest record of each "
            "key is kept), both, or neither.",
        ),
        _number(
            "delete.retention.ms",
            "LONG",
            None,
            "86400000",
            0,
            "Compacted topics: how long a tombstone stays after the cleaner first passed it.",
        ),
        _number(
            "min.compaction.lag.ms",
            "LONG",
            None,
            "0",
            0,
            "Compacted topics: a record stays uncompacted at least this long.",
        ),
        _number(
            "max.compaction.lag.ms",
            "LONG",
            None,
            str(2**63 - 1),
            1,
            "Compacted topics: a record is compacted at most this long after it was written "
            "(the active segment rolls by then, and its log is cleaned whatever its ratio).",
        ),
        ConfigSpec(
            "min.cleanable.dirty.ratio",
            "DOUBLE",
            None,
            "0.5",
            _ratio,
            "Compacted topics: a log is cleaned once this share of it was never cleaned.",
        ),
        ConfigSpec(
            "message.timestamp.type",
            "STRING",
            "log_message_timestamp_type",
            None,
            _one_of("CreateTime", "LogAppendTime"),
            "Record timestamps are the producer's (CreateTime) or the broker's clock at "
            "append (LogAppendTime).",
        ),
        _number(
            "message.timestamp.before.max.ms",
            "LONG",
            "log_message_timestamp_before_max_ms",
            None,
            0,
            "CreateTime: refuse a record whose timestamp is more than this many milliseconds "
            "before the broker's clock (INVALID_TIMESTAMP).",
        ),
        _number(
            "message.timestamp.after.max.ms",
            "LONG",
            "log_message_timestamp_after_max_ms",
            None,
            0,
            "CreateTime: refuse a record whose timestamp is more than this many milliseconds "
            "after the broker's clock (INVALID_TIMESTAMP).",
        ),
        _number(
            "min.insync.replicas",
            "INT",
            None,
            "1",
            1,
            "Accepted for compatibility; a single node is always in sync.",
        ),
        ConfigSpec(
            "compression.type",
            "STRING",
            None,
            PRODUCER_COMPRESSION,
            _string_in(*COMPRESSION_CODECS, PRODUCER_COMPRESSION),
            "The codec batches are stored with: 'producer' keeps the producer's; any other "
            "recompresses a batch sent with a different codec on append.",
        ),
        ConfigSpec(
            "compression.gzip.level",
            "INT",
            None,
            "-1",
            _gzip_level,
            "The level batches recompressed with gzip get (1-9, -1: zlib's default).",
        ),
        _number(
            "compression.lz4.level",
            "INT",
            None,
            "9",
            1,
            "The level batches recompressed with lz4 get.",
            high=17,
        ),
        _number(
            "compression.zstd.level",
            "INT",
            None,
            "3",
            -131072,
            "The level batches recompressed with zstd get.",
            high=22,
        ),
        _number(
            "flush.messages",
            "LONG",
            None,
            str(2**63 - 1),
            1,
            "Accepted for compatibility: every append is fsynced before it is acknowledged, "
            "which is more than any value asks.",
        ),
        _number(
            "flush.ms",
            "LONG",
            None,
            str(2**63 - 1),
            0,
            "Accepted for compatibility: every append is fsynced before it is acknowledged, "
            "which is more than any value asks.",
        ),
        ConfigSpec(
            "preallocate",
            "BOOLEAN",
            None,
            "false",
            _boolean,
            "Stored only: segment files are not preallocated.",
        ),
        _number(
            "segment.index.bytes",
            "INT",
            None,
            "10485760",
            4,
            "Stored only: the offset index is sized by the segment, not by this.",
        ),
        _number(
            "segment.jitter.ms",
            "LONG",
            None,
            "0",
            0,
            "Stored only: segments roll at segment.ms without jitter.",
        ),
        _number(
            "index.interval.bytes",
            "INT",
            None,
            "4096",
            0,
            "Stored only: the index spacing is the server's own.",
        ),
        _number(
            "file.delete.delay.ms",
            "LONG",
            None,
            "60000",
            0,
            "Stored only: deleted segments' files are removed at once.",
        ),
        _number(
            "max.decompressed.message.bytes",
            "INT",
            None,
            str(2**31 - 9),
            1,
            "Stored only: decompressed batches are not limited beyond max.message.bytes.",
        ),
        ConfigSpec(
            "errors.deadletterqueue.group.enable",
            "BOOLEAN",
            None,
            "false",
            _boolean,
            "Stored only (share groups' dead letter queues are not served).",
        ),
        ConfigSpec(
            "unclean.leader.election.enable",
            "BOOLEAN",
            None,
            "false",
            _boolean,
            "Stored only: a single node has no other replica to elect.",
        ),
        ConfigSpec(
            "leader.replication.throttled.replicas",
            "LIST",
            None,
            "",
            _throttled_replicas("leader.replication.throttled.replicas"),
            "Stored only: there is no replication to throttle.",
        ),
        ConfigSpec(
            "follower.replication.throttled.replicas",
            "LIST",
            None,
            "",
            _throttled_replicas("follower.replication.throttled.replicas"),
            "Stored only: there is no replication to throttle.",
        ),
        ConfigSpec(
            "remote.storage.enable",
            "BOOLEAN",
            None,
            "false",
            _remote_storage,
            "Tiered storage is not served: only false is accepted, as a Kafka broker "
            "without a remote log storage system answers.",
        ),
        ConfigSpec(
            "remote.log.copy.disable",
            "BOOLEAN",
            None,
            "false",
            _boolean,
            "Stored only (no tiered storage).",
        ),
        ConfigSpec(
            "remote.log.delete.on.disable",
            "BOOLEAN",
            None,
            "false",
            _boolean,
            "Stored only (no tiered storage).",
        ),
        _number(
            "local.retention.ms",
            "LONG",
            None,
            "-2",
            -2,
            "Stored only (no tiered storage: retention.ms applies).",
        ),
        _number(
            "local.retention.bytes",
            "LONG",
            None,
            "-2",
            -2,
            "Stored only (no tiered storage: retention.bytes applies).",
        ),
        _number(
            "remote.copy.lag.ms",
            "LONG",
            None,
            "0",
            -1,
            "Stored only (no tiered storage).",
        ),
        _number(
            "remote.copy.lag.bytes",
            "LONG",
            None,
            "-1",
            -1,
            "Stored only (no tiered storage).",
        ),
    )
}


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Checked, normalised overrides; raises InvalidConfig naming the bad entry."""
    checked: dict[str, str] = {}
    for name, value in configs.items():
        spec = TOPIC_CONFIGS.get(name)
        if spec is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if value is None:
            raise InvalidConfig(f"Null value not supported for topic config: {name}")
        try:
            checked[name] = spec.check(value)
        except InvalidConfig as e:
            if e.whole:
                raise
            raise InvalidConfig(f"Invalid value {value} for configuration {name}: {e}") from None
    return checked


# The broker config each topic config falls back to, by its Kafka name (for synonyms).
TOPIC_CONFIG_BROKER_NAMES = {
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "max.message.bytes": "message.max.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "min.insync.replicas": "min.insync.replicas",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "index.interval.bytes": "log.index.interval.bytes",
    "local.retention.bytes": "log.local.retention.bytes",
    "local.retention.ms": "log.local.retention.ms",
    "max.decompressed.message.bytes": "max.decompressed.message.bytes",
    "preallocate": "log.preallocate",
    "remote.copy.lag.bytes": "log.remote.copy.lag.bytes",
    "remote.copy.lag.ms": "log.remote.copy.lag.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    # The rest have no broker synonym with a value (Kafka lists none for them): flush.ms
    # (log.flush.interval.ms is unset), segment.jitter.ms (log.roll.jitter.ms is unset),
    # the throttled replica lists, the remote log switches, the dead letter queue switch.
}

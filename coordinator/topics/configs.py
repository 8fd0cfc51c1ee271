"""Topic-level configs: the Kafka names we honour, their defaults from the broker config,
and validation (unknown names or bad values -> INVALID_CONFIG)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ..config import Config


class InvalidConfig(ValueError):
    pass


# Kafka parses INT configs as a Java int and LONG configs as a Java long (ConfigDef.parseType):
# anything outside that range is "Not a number", so a storage limit set by the type (e.g.
# segment.bytes, a u32 file position) is refused here, as INVALID_CONFIG, and never reaches
# the log (LogConfig raises ValueError on it).
_NUMBER_RANGES = {"INT": (-(2**31), 2**31 - 1), "LONG": (-(2**63), 2**63 - 1)}
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def _number_at_least(kind: str, low: int) -> Callable[[str], str]:
    """A Kafka INT or LONG config: a decimal in the type's range (Kafka trims the value, as
    Integer/Long.parseInt a sign is allowed, Python's digit separators are not), >= `low`."""
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
        return str(number)

    return check


def _number(
    name: str, kind: str, broker_setting: str | None, fixed_default: str | None, low: int, doc: str
) -> ConfigSpec:
    """An INT or LONG config, checked against its type's range and `low`."""
    return ConfigSpec(name, kind, broker_setting, fixed_default, _number_at_least(kind, low), doc)


def _one_of(*choices: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in choices:
            raise InvalidConfig(f"must be one of {', '.join(choices)}")
        return value

    return check


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
            _one_of("delete"),
            "Only 'delete' is served for data topics.",
        ),
        ConfigSpec(
            "message.timestamp.type",
            "STRING",
            None,
            "CreateTime",
            _one_of("CreateTime"),
            "Record timestamps are the producer's (CreateTime).",
        ),
        _number(
            "min.insync.replicas",
            "INT",
            None,
            "1",
            1,
            "Accepted for compatibility; a single node is always in sync.",
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
            raise InvalidConfig(f"Invalid value {value} for configuration {name}: {e}") from None
    return checked

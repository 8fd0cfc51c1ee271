"""The group coordinator's settings (groups/config.py): the server's settings reach the
shards' GroupConfig field by field, both sides default alike, the broker-level and per-group
checks answer with their messages, and the overrides persist (runtime/group_config_store.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from groupcoord.coordinator.config import Config, ConfigError, load_config
from groupcoord.coordinator.groups.config import (
    ASSIGNMENT_INTERVAL,
    ASSIGNOR,
    ASSIGNOR_OFFLOAD,
    HEARTBEAT_INTERVAL,
    SERVER_SETTINGS,
    SESSION_TIMEOUT,
    ConsumerGroupSettings,
    GroupConfig,
    InvalidGroupConfig,
    effective_settings,
)
from groupcoord.coordinator.runtime.group_config_store import GroupConfigStore
from groupcoord.coordinator.runtime.service import group_config

# The server's setting -> the shard's field, as written out before they were defined once.
SERVER_TO_SHARD = {
    "group_min_session_timeout_ms": "min_session_timeout_ms",
    "group_max_session_timeout_ms": "max_session_timeout_ms",
    "group_initial_rebalance_delay_ms": "initial_rebalance_delay_ms",
    "group_max_size": "max_size",
    "group_member_metadata_bytes_max": "member_metadata_max_bytes",
    "group_member_assignment_bytes_max": "member_assignment_max_bytes",
    "groups_max": "max_groups",
    "offset_metadata_bytes_max": "offset_metadata_max_bytes",
    "offsets_retention_ms": "offsets_retention_ms",
    "offsets_retention_check_interval_ms": "offsets_retention_check_interval_ms",
    "group_consumer_session_timeout_ms": "consumer_session_timeout_ms",
    "group_consumer_min_session_timeout_ms": "consumer_min_session_timeout_ms",
    "group_consumer_max_session_timeout_ms": "consumer_max_session_timeout_ms",
    "group_consumer_heartbeat_interval_ms": "consumer_heartbeat_interval_ms",
    "group_consumer_min_heartbeat_interval_ms": "consumer_min_heartbeat_interval_ms",
    "group_consumer_max_heartbeat_interval_ms": "consumer_max_heartbeat_interval_ms",
    "group_consumer_max_size": "consumer_max_size",
    "group_consumer_assignment_interval_ms": "consumer_assignment_interval_ms",
    "group_consumer_regex_refresh_interval_ms": "consumer_regex_refresh_interval_ms",
    "group_consumer_migration_policy": "consumer_migration_policy",
    "group_consumer_offload_min_members": "consumer_offload_min_members",
    "group_consumer_offload_min_partitions": "consumer_offload_min_partitions",
    "group_consumer_reconciling_heartbeat_interval_ms": (
        "consumer_reconciling_heartbeat_interval_ms"
    ),
    "group_timeline_events": "timeline_events",
    "group_timeline_events_total": "timeline_events_total",
}


def test_every_server_setting_reaches_its_shard_field() -> None:
    assert {name: s.field for name, s in SERVER_SETTINGS.items()} == SERVER_TO_SHARD
    values = {name: 1_000_000 + i for i, name in enumerate(SERVER_TO_SHARD)}
    values["group_consumer_migration_policy"] = "Upgrade"
    values["group_consumer_assignors"] = "range, uniform"
    shard = group_config(Config(**values))
    for name, field in SERVER_TO_SHARD.items():
        assert getattr(shard, field) == values[name], name
    assert shard.consumer_assignors == ("range", "uniform")


def test_the_server_and_the_shards_default_alike() -> None:
    assert group_config(Config()) == GroupConfig()
    config_fields = {f.name: f for f in dataclasses.fields(Config)}
    for name, setting in SERVER_SETTINGS.items():
        assert config_fields[name].default == setting.default, name
        assert config_fields[name].metadata["help"] == setting.help, name


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"GROUPCOORD_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "45000"},
            "^group_consumer_heartbeat_interval_ms must be below "
            "group_consumer_session_timeout_ms$",
        ),
        (
            {"GROUPCOORD_GROUP_CONSUMER_MIGRATION_POLICY": "sideways"},
            "^group_consumer_migration_policy: bidirectional, upgrade, downgrade or disabled$",
        ),
    ],
)
def test_broker_level_checks(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(environ=environ)


def test_migration_policy_is_checked_case_blind() -> None:
    assert load_config(environ={"GROUPCOORD_GROUP_CONSUMER_MIGRATION_POLICY": "Disabled"})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"no.such": "1"}, "Unknown group config name: no.such"),
        ({SESSION_TIMEOUT: "x"}, f"Invalid value x for configuration {SESSION_TIMEOUT}"),
        (
            {SESSION_TIMEOUT: "44999"},
            f"{SESSION_TIMEOUT} must be greater than or equal to "
            "group.consumer.min.session.timeout.ms",
        ),
        (
            {SESSION_TIMEOUT: "60001"},
            f"{SESSION_TIMEOUT} must be less than or equal to "
            "group.consumer.max.session.timeout.ms",
        ),
        (
            {HEARTBEAT_INTERVAL: "4999"},
            f"{HEARTBEAT_INTERVAL} must be greater than or equal to "
            "group.consumer.min.heartbeat.interval.ms",
        ),
        (
            {HEARTBEAT_INTERVAL: "15001"},
            f"{HEARTBEAT_INTERVAL} must be less than or equal to "
            "group.consumer.max.heartbeat.interval.ms",
        ),
        (
            {ASSIGNMENT_INTERVAL: "-1"},
            f"{ASSIGNMENT_INTERVAL} must be greater than or equal to 0",
        ),
        (
            {ASSIGNMENT_INTERVAL: "15001"},
            f"{ASSIGNMENT_INTERVAL} must be less than or equal to "
            "group.consumer.max.assignment.interval.ms",
        ),
        (
            {ASSIGNOR_OFFLOAD: "maybe"},
            f"Invalid value maybe for configuration {ASSIGNOR_OFFLOAD}",
        ),
        ({ASSIGNOR: "sticky"}, f"{ASSIGNOR} must be one of uniform, range"),
    ],
)
def test_per_group_overrides_are_checked_against_the_broker(
    overrides: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidGroupConfig) as raised:
        effective_settings(GroupConfig(), overrides)
    assert str(raised.value) == message


def test_heartbeat_must_stay_below_the_session_timeout() -> None:
    config = GroupConfig(consumer_max_heartbeat_interval_ms=60_000)
    with pytest.raises(InvalidGroupConfig, match=f"^{HEARTBEAT_INTERVAL} must be less than"):
        effective_settings(config, {HEARTBEAT_INTERVAL: "45000"})


def test_effective_settings_are_the_overrides_over_the_broker() -> None:
    assert effective_settings(GroupConfig(), {}) == ConsumerGroupSettings(
        45_000, 5_000, 1_000, "uniform", True
    )
    overrides = {
        SESSION_TIMEOUT: "50000",
        HEARTBEAT_INTERVAL: "6000",
        ASSIGNMENT_INTERVAL: "0",
        ASSIGNOR: "range",
        ASSIGNOR_OFFLOAD: "FALSE",
    }
    assert effective_settings(GroupConfig(), overrides) == ConsumerGroupSettings(
        50_000, 6_000, 0, "range", False
    )


def test_store_persists_replaces_and_forgets(tmp_path: Path) -> None:
    path = tmp_path / "group_configs.json"
    store = GroupConfigStore(path)
    store.load()  # no file yet: no overrides
    assert store.overrides("g") == {}
    store.replace("g", {SESSION_TIMEOUT: "50000"})
    store.replace("h", {ASSIGNOR: "range"})
    assert json.loads(path.read_text()) == {
        "groups": {"g": {SESSION_TIMEOUT: "50000"}, "h": {ASSIGNOR: "range"}}
    }
    store.replace("g", {})
    reloaded = GroupConfigStore(path)
    reloaded.load()
    assert (reloaded.overrides("g"), reloaded.overrides("h")) == ({}, {ASSIGNOR: "range"})
    assert not (tmp_path / "group_configs.json.tmp").exists()


def test_store_bounds_the_groups_it_keeps(tmp_path: Path) -> None:
    store = GroupConfigStore(tmp_path / "group_configs.json", groups_max=1)
    store.replace("g", {ASSIGNOR: "range"})
    store.replace("g", {ASSIGNOR: "uniform"})  # the same group: replaced
    with pytest.raises(ValueError, match="at most 1 groups"):
        store.replace("h", {ASSIGNOR: "range"})

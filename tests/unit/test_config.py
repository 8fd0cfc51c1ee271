"""Configuration precedence and validation, and the README's reference staying complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from groupcoord.coordinator.cli import main
from groupcoord.coordinator.config import ConfigError, load_config
from groupcoord.coordinator.server.dispatch import APIS, markdown_table
from groupcoord.coordinator.settings_table import describe_settings
from groupcoord.coordinator.settings_table import markdown_table as config_table

ROOT = Path(__file__).resolve().parents[2]


def test_precedence_defaults_file_environment_overrides(tmp_path: Path) -> None:
    toml = tmp_path / "gc.toml"
    toml.write_text(
        'listen = "127.0.0.1:1000"\ndefault_partitions = 3\nauto_create_topics = false\n'
    )
    assert load_config(environ={}).listen == "127.0.0.1:9092"
    config = load_config(str(toml), environ={})
    assert (config.listen, config.default_partitions, config.auto_create_topics) == (
        "127.0.0.1:1000",
        3,
        False,
    )
    env = {"GROUPCOORD_LISTEN": "127.0.0.1:2000", "GROUPCOORD_AUTO_CREATE_TOPICS": "true"}
    config = load_config(str(toml), environ=env)
    assert (config.listen, config.auto_create_topics) == ("127.0.0.1:2000", True)
    config = load_config(str(toml), {"listen": "127.0.0.1:3000"}, environ=env)
    assert config.listen == "127.0.0.1:3000"
    assert load_config(environ={"GROUPCOORD_CONFIG": str(toml)}).default_partitions == 3


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"GROUPCOORD_LISTEN": "nope"}, "HOST:PORT"),
        ({"GROUPCOORD_DEFAULT_PARTITIONS": "x"}, "integer"),
        ({"GROUPCOORD_DEFAULT_PARTITIONS": "0"}, "positive"),
        ({"GROUPCOORD_AUTO_CREATE_TOPICS": "maybe"}, "boolean"),
        ({"GROUPCOORD_LOG_LEVEL": "loud"}, "log_level"),
        ({"GROUPCOORD_LISTEN": "0.0.0.0:9092"}, "Set advertised_listener"),
        ({"GROUPCOORD_LISTEN": ":9092"}, "Set advertised_listener"),
        ({"GROUPCOORD_DATA_DIRECTORY": "/tmp"}, "did you mean GROUPCOORD_DATA_DIR"),
        (
            {"GROUPCOORD_GROUP_CONSUMER_MAX_SESSION_TIMEOUT_MS": "40000"},
            r"group_consumer_min_session_timeout_ms \(45000\) exceeds",
        ),
    ],
)
def test_bad_values_are_refused_with_a_clear_message(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(environ=environ)


def test_unknown_key_in_file_is_refused(tmp_path: Path) -> None:
    toml = tmp_path / "gc.toml"
    toml.write_text("no_such_setting = 1\n")
    with pytest.raises(ConfigError, match="unknown setting"):
        load_config(str(toml), environ={})
    toml.write_text("data-directory = 1\n")
    with pytest.raises(ConfigError, match="did you mean 'data_dir'"):
        load_config(str(toml), environ={})


def test_harness_variables_are_not_settings() -> None:
    """The test and benchmark harnesses' GROUPCOORD_TEST_*/BENCH_* reach the servers they
    start; they are theirs, not misspelt settings."""
    env = {"GROUPCOORD_TEST_JAVA": "java", "GROUPCOORD_BENCH_CACHE": "/tmp"}
    assert load_config(environ=env).listen == "127.0.0.1:9092"


def test_help_documents_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for name, _, _ in describe_settings():
        assert name in out and f"GROUPCOORD_{name.upper()}" in out
    for flag in ("--listen", "--advertised-listener", "--data-dir", "--metrics-listen", "--config"):
        assert flag in out


def test_cli_rejects_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--listen", "bad"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err


def test_readme_documents_every_setting_and_api() -> None:
    readme = (ROOT / "README.md").read_text()
    for name, default, _ in describe_settings():
        assert f"| `{name}` | `GROUPCOORD_{name.upper()}` | `{default}` |" in readme, name
    for key, (_, low, high) in APIS.items():
        versions = f"{low}-{high}" if low != high else f"{low}"
        assert f"| {int(key)} | {versions} |" in readme, key
    # The whole generated tables, handlers included, so the API table follows handlers that move.
    stale = "README.md's generated tables are stale: python -m tests.regen_readme"
    assert markdown_table() in readme, stale
    assert config_table() in readme, stale


def test_topic_timestamp_defaults_are_broker_settings() -> None:
    config = load_config(environ={})
    assert config.log_message_timestamp_type == "CreateTime"
    assert config.log_message_timestamp_before_max_ms == 2**63 - 1
    assert config.log_message_timestamp_after_max_ms == 3_600_000
    config = load_config(
        environ={
            "GROUPCOORD_LOG_MESSAGE_TIMESTAMP_TYPE": "LogAppendTime",
            "GROUPCOORD_LOG_MESSAGE_TIMESTAMP_AFTER_MAX_MS": "0",
        }
    )
    assert config.log_message_timestamp_type == "LogAppendTime"
    assert config.log_message_timestamp_after_max_ms == 0
    with pytest.raises(ConfigError, match="log_message_timestamp_type"):
        load_config(environ={"GROUPCOORD_LOG_MESSAGE_TIMESTAMP_TYPE": "NowTime"})
    with pytest.raises(ConfigError, match="log_message_timestamp_before_max_ms"):
        load_config(environ={"GROUPCOORD_LOG_MESSAGE_TIMESTAMP_BEFORE_MAX_MS": "-1"})

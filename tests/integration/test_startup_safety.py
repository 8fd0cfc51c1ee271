"""Start-up safety: the real server refuses, before it binds anything, a configuration that
would misdirect clients or that cannot mean what its author wanted, and says what to set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, ServerProcess, free_port

BAD_CONFIGURATIONS = [
    pytest.param(
        {"GROUPCOORD_LISTEN": "0.0.0.0:{port}"},
        ["advertised_listener is not set", "GROUPCOORD_ADVERTISED_LISTENER", "0.0.0.0"],
        id="listen-on-all-interfaces-without-advertised-listener",
    ),
    pytest.param(
        {"GROUPCOORD_ADVERTISED_LISTENER": "0.0.0.0:{port}"},
        ["advertised_listener is '0.0.0.0:", "--advertised-listener"],
        id="advertised-0.0.0.0",
    ),
    pytest.param(
        {"GROUPCOORD_LISTEN": "[::]:{port}"},
        ["advertised_listener is not set", "'::'"],
        id="listen-on-ipv6-any-without-advertised-listener",
    ),
    pytest.param(
        {"GROUPCOORD_ADVERTISED_LISTENR": "localhost:{port}"},
        [
            "unknown environment variable GROUPCOORD_ADVERTISED_LISTENR",
            "did you mean GROUPCOORD_ADVERTISED_LISTENER?",
        ],
        id="misspelt-environment-variable",
    ),
    pytest.param(
        {"GROUPCOORD_GROUP_MAX_SESION_TIMEOUT_MS": "1000"},
        ["did you mean GROUPCOORD_GROUP_MAX_SESSION_TIMEOUT_MS?"],
        id="misspelt-group-setting",
    ),
    pytest.param(
        {
            "GROUPCOORD_GROUP_MIN_SESSION_TIMEOUT_MS": "60000",
            "GROUPCOORD_GROUP_MAX_SESSION_TIMEOUT_MS": "30000",
        },
        ["group_min_session_timeout_ms (60000) exceeds group_max_session_timeout_ms (30000)"],
        id="classic-session-timeout-min-above-max",
    ),
    pytest.param(
        {"GROUPCOORD_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS": "70000"},
        [
            "group_consumer_min_session_timeout_ms (70000) exceeds "
            "group_consumer_max_session_timeout_ms (60000)"
        ],
        id="consumer-session-timeout-min-above-max",
    ),
    pytest.param(
        {"GROUPCOORD_GROUP_CONSUMER_MAX_HEARTBEAT_INTERVAL_MS": "1000"},
        [
            "group_consumer_min_heartbeat_interval_ms (5000) exceeds "
            "group_consumer_max_heartbeat_interval_ms (1000)"
        ],
        id="consumer-heartbeat-interval-min-above-max",
    ),
]


@pytest.mark.parametrize(("settings", "messages"), BAD_CONFIGURATIONS)
def test_the_server_refuses_to_start(
    tmp_path: Path, settings: dict[str, str], messages: list[str]
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPCOORD_")}
    env["GROUPCOORD_LISTEN"] = f"127.0.0.1:{port}"
    env["GROUPCOORD_DATA_DIR"] = str(tmp_path / "data")
    env["GROUPCOORD_METRICS_LISTEN"] = f"127.0.0.1:{free_port()}"
    env.update({k: v.format(port=port) for k, v in settings.items()})
    done = subprocess.run(
        [sys.executable, "-m", "groupcoord.coordinator", "serve"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,  # on a server that does not refuse: it would serve until killed
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    for message in messages:
        assert message in done.stderr, done.stderr
    # Refused before anything was created or bound.
    assert not (tmp_path / "data").exists()


def test_the_same_server_starts_once_the_setting_is_given(tmp_path: Path) -> None:
    """The control: all interfaces with an advertised listener is a valid configuration."""
    proc = ServerProcess(tmp_path / "data")
    # The later --listen wins over the one ServerProcess gives.
    proc.extra_args = ["--listen", f"0.0.0.0:{proc.port}", "--advertised-listener", proc.bootstrap]
    proc.start()
    try:
        assert proc.healthy()
    finally:
        proc.kill()

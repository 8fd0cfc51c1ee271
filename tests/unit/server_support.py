"""A real Server started in the test's event loop (no client traffic: tests call handlers
directly) and the connection stand-in handlers get."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from coordinator.config import load_config
from coordinator.server.app import Server


async def started_server(data_dir: Path) -> AsyncIterator[Server]:
    """For an async fixture: a started server whose shards are loaded; stopped after."""
    config = load_config(
        overrides={"data_dir": str(data_dir), "metrics_listen": "", "listen": "127.0.0.1:0"},
        environ={},
    )
    started = Server(config)
    await started.start()
    await started.coordinator.loaded.wait()
    yield started
    await started.stop()


class StubConn:
    """What a handler reads from its Connection."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.peer = "127.0.0.1:5555"
        self.client_host = "/127.0.0.1"
        self.read_at = 0.0

"""A `serve --cluster` node opens its listener before it has loaded the metadata store's
image: a CreateTopics arriving in that window waits for the image and is then made as any
other (before, the change hit a store not yet connected, answered UNKNOWN_SERVER_ERROR, and
the image loaded next deleted the topic it had created locally)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import asyncpg
import pytest

from groupcoord.protocol.api import build
from tests.cluster_support import has_topic, node_args, request_module
from tests.postgres_server import postgres_server
from tests.rawclient import RawClient
from tests.support import ServerProcess

pytestmark = pytest.mark.integration


def accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def stored_topics(dsn: str) -> list[str]:
    async def run() -> list[str]:
        conn = await asyncpg.connect(dsn)
        try:
            return [r[0] for r in await conn.fetch("SELECT name FROM topics ORDER BY name")]
        finally:
            await conn.close()

    return asyncio.run(run())


def test_a_topic_created_while_the_node_starts_is_kept(tmp_path: Path) -> None:
    with postgres_server() as pg:
        node = ServerProcess(tmp_path / "node1", node_args(pg.dsn, 1))
        starting = threading.Thread(target=node.start, daemon=True)
        starting.start()
        try:
            deadline = time.monotonic() + 60
            while not accepts(node.bootstrap):
                assert time.monotonic() < deadline, "the listener never opened"
                time.sleep(0.005)
            m = request_module(19, 7)
            topic = build(m.CreatableTopic, name="early", num_partitions=2, replication_factor=1)
            with RawClient(node.bootstrap, timeout_s=90) as client:
                answer = client.request(19, 7, build(m.CreateTopicsRequest, topics=(topic,)))
            assert answer.topics[0].error_code == 0, answer.topics[0]
            starting.join(60)
            assert has_topic(node.bootstrap, "early")
            assert stored_topics(pg.dsn) == ["early"]
            time.sleep(2)  # the follower's next image must keep it too
            assert has_topic(node.bootstrap, "early")
        finally:
            node.kill()

"""serve --workers: topic changes made on one worker, repeated on every other.

Theory of operation. Every worker keeps the whole topic metadata (names, ids, partition
counts, configs, dynamic broker configs) in its own data directory, and opens every
partition (those it does not lead stay empty: ownership.py), so that Metadata, the group
coordinator's assignors and offset commits see the same topics on every node. A change a
client makes on one worker (CreateTopics, DeleteTopics, CreatePartitions,
IncrementalAlterConfigs; and ACLs and SCRAM credentials, which every worker checks alike)
is answered by that worker, then sent as the same Kafka request (same version, same body)
to every other worker on the workers' channel (worker_channel.py), whose principal marks
it as a peer's so that it goes no further. Topic ids are the same everywhere because every
worker derives them from the cluster id and the name (worker_layout.same_topic_ids).
DeleteTopics on each worker removes the topic's offsets from the shards that worker owns:
together, every shard.

A topic that Metadata auto-creates is created by the first worker alone (another worker
asks it with a CreateTopics that it repeats to all, and answers LEADER_NOT_AVAILABLE
meanwhile: the client asks again), so that two workers never make one name with different
partition counts.

Why Kafka requests and not a local channel: the workers are Kafka brokers already, so the
requests, their validation and their answers exist and are tested; a worker needs nothing
but its peers' addresses; and it is the shape a cluster across machines keeps (issue 22
item 2 replaces the sending by a metadata table that every node follows, the handlers
stay). Each peer has one queue, sent in order (a delete never overtakes its create), with
retries while the peer is down (a worker being restarted). What a worker misses all the
same (the sender died before the peer was back) it repairs from its peers' images
(topic_repair.py), for which every topic changed here is recorded (TopicChanges) once
answered. A request from a peer waits for this worker's shards to load, so that a
deletion removes the topic's offsets from every shard this worker owns.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
from collections.abc import Callable
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, request_types

from ..observability.logging import get_logger
from ..ownership import Ownership
from .peer_exchange import exchange
from .topic_repair import TopicChanges, changed_topics
from .worker_channel import open_channel
from .worker_layout import WORKER_PRINCIPAL

log = get_logger("groupcoord.topic_sync")

PEER_CLIENT_ID = "groupcoord-worker"
# A worker asking the first worker to auto-create a topic: a request the first worker
# repeats to every worker (so not PEER_CLIENT_ID).
AUTO_CREATE_CLIENT_ID = "groupcoord-worker-auto-create"
CREATE_TOPICS_VERSION = 5
# The requests repeated on the other workers.
SYNCED_APIS = (
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    ApiKey.CREATE_ACLS,
    ApiKey.DELETE_ACLS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
)
RETRY_MIN_S = 0.2
RETRY_MAX_S = 5.0
REQUEST_TIMEOUT_S = 30.0

Peer = tuple[int, str]  # node id, its channel's address (worker_channel.channel_address)


async def peer_request(
    peer: Peer, api_key: int, version: int, body: Any, client_id: str = PEER_CLIENT_ID
) -> Any:
    """One request to a peer worker on a connection of its own; its response body.
    OSError / TimeoutError / asyncio.IncompleteReadError when it cannot be had."""
    reader, writer = await open_channel(peer[1], 5)
    try:
        return await exchange(reader, writer, api_key, version, body, client_id, REQUEST_TIMEOUT_S)
    finally:
        writer.close()


class TopicSync:
    """Sends the topic changes of this worker to its peers (module docstring)."""

    def __init__(
        self, ownership: Ownership, changes: TopicChanges, loaded: Callable[[], Any]
    ) -> None:
        """`changes`: where the topics changed here are recorded; `loaded()`: an
        awaitable done once the group shards are loaded."""
        self.ownership = ownership
        self.changes = changes
        self.loaded = loaded
        self.peers: list[Peer] = []
        self._queues: dict[int, asyncio.Queue[tuple[int, int, Any, str]]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, peers: list[Peer]) -> None:
        """Start sending to every peer (every worker but this one)."""
        self.peers = peers
        for peer in self.peers:
            queue: asyncio.Queue[tuple[int, int, Any, str]] = asyncio.Queue()
            self._queues[peer[0]] = queue
            self._tasks.append(asyncio.ensure_future(self._send_loop(peer, queue)))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def wrap(self, api_key: int, handler: Callable[..., Any]) -> Callable[..., Any]:
        """`handler` answering as before, its request then queued for every peer unless a
        peer sent it."""

        async def synced(ctx: Any, request: Request) -> Any:
            from_peer = (
                ctx.principal == WORKER_PRINCIPAL
                and request.header.client_id != AUTO_CREATE_CLIENT_ID
            )
            if from_peer:
                await self.loaded()
            result = handler(ctx, request)
            if inspect.isawaitable(result):
                result = await result
            try:
                self.changes.record(changed_topics(api_key, request, result))
            except OSError as e:  # the repair may then miss this change: said, not fatal
                log.error("topic change not recorded", error=str(e))
            if not from_peer:
                for queue in self._queues.values():
                    queue.put_nowait((api_key, request.api_version, request.body, PEER_CLIENT_ID))
            return result

        return synced

    def auto_create(self, name: str, partitions: int) -> bool:
        """The registry's auto_create_hook: the first worker creates a topic Metadata
        auto-creates (and repeats it on the others); another worker asks the first with a
        CreateTopics and answers LEADER_NOT_AVAILABLE meanwhile, so that two workers
        never auto-create one name with different ids or counts."""
        mod = request_types(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION)
        body = build(
            mod.CreateTopicsRequest,
            topics=(
                build(
                    mod.CreatableTopic,
                    name=name,
                    num_partitions=partitions,
                    replication_factor=-1,
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=datetime.timedelta(milliseconds=REQUEST_TIMEOUT_S * 1000),
            validate_only=False,
        )
        if self.ownership.index == 0:
            try:
                self.changes.record({name: False})
            except OSError as e:
                log.error("topic change not recorded", error=str(e))
            for queue in self._queues.values():
                queue.put_nowait(
                    (ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, body, PEER_CLIENT_ID)
                )
            return True
        first = self.ownership.node_ids[0]
        queue = self._queues.get(first)
        if queue is not None:
            queue.put_nowait(
                (ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, body, AUTO_CREATE_CLIENT_ID)
            )
        return False

    async def _send_loop(self, peer: Peer, queue: asyncio.Queue[tuple[int, int, Any, str]]) -> None:
        while True:
            api_key, version, body, client_id = await queue.get()
            delay_s = RETRY_MIN_S
            while True:
                try:
                    await peer_request(peer, api_key, version, body, client_id)
                    break
                except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
                    log.info(
                        "peer unreachable: topic change retried",
                        peer=peer[0],
                        api=ApiKey(api_key).name,
                        error=repr(e),
                        retry_in_s=delay_s,
                    )
                    await asyncio.sleep(delay_s)
                    delay_s = min(delay_s * 2, RETRY_MAX_S)

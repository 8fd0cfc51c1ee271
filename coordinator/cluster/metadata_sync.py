"""serve --cluster: topics, topic configs, ACLs and SCRAM credentials follow the metadata
store in PostgreSQL (metadata_store.py); the cluster id is the store's.

Theory of operation. The store is the truth; each node's local state (its topic registry
with topics.json and partition logs, its ACL log, its SCRAM credentials file) is a copy that
follows the store's image (`MetadataFollower`: LISTEN plus a version check after every
reconnect and every `CHECK_INTERVAL_S`). Applying an image makes the local state equal to
it: topics missing here are created with the store's topic id, topics the image lacks are
deleted here with their groups' offsets in the shards this node has active (as a local
DeleteTopics removes them), partition counts grow, configs, ACLs and credentials are set.
The image wins over anything local: a node whose data directory holds a topic the store
does not know (made while the database could not be written) drops it.

A client's change (CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
CreateAcls, DeleteAcls, AlterUserScramCredentials) is made by the node's own handler first:
its checks, its errors and its answer are the single-node ones. Each entry that succeeded
is then written to the store (one transaction each), and the node answers once those
committed and its own image has the version written, so the client's next request to this
node sees it. An entry the store refuses is answered with the error Kafka gives for the
race it lost (TOPIC_ALREADY_EXISTS: another node created the name first;
UNKNOWN_TOPIC_OR_PARTITION: another deleted it; INVALID_PARTITIONS), and the image then
puts the local state back. When the database cannot be written the entry is answered
REQUEST_TIMED_OUT (retriable) and the local change is undone the same way. Changes and image
applications on one node take turns (one lock), so an image never undoes a change whose
write is in flight, and every change starts from the latest image.

Other nodes learn of a change by NOTIFY within milliseconds (or after a missed one by the
version check): until then a client asking them gets UNKNOWN_TOPIC_OR_PARTITION for a new
topic, as a Kafka broker that has not yet replayed the metadata log answers, and retries.

Metadata's auto-creation writes the store (in the background) and answers
LEADER_NOT_AVAILABLE; the client asks again once the image brought the topic here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import inspect
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import asyncpg

from groupcoord.protocol.api import ApiKey, Request
from groupcoord.protocol.errors import ErrorCode

from ..observability.logging import get_logger
from ..security.acl_binding import AclBinding
from ..security.scram import ScramCredential
from ..topics.registry import TopicError, TopicRegistry, check_topic_name
from .leases import open_pool
from .metadata_store import (
    MetadataFollower,
    MetadataImage,
    MetadataStore,
    TopicExists,
    UnknownTopic,
    ensure_metadata_schema,
)

log = get_logger("groupcoord.cluster")

# The backstop version check of a follower whose NOTIFYs stopped silently.
CHECK_INTERVAL_S = 5.0
# How long a change waits for this node's image to reach the version it wrote (the write
# has committed: past this the answer goes anyway).
VERSION_WAIT_S = 30.0
# How long a change arriving before the node loaded the store's image waits for it.
START_WAIT_S = 60.0
# A store write not done by then is answered REQUEST_TIMED_OUT: whether it committed or
# not, the image applied next makes the local state what the store holds.
WRITE_TIMEOUT_S = 30.0
RETRY_S = 1.0
RESOURCE_TOPIC = 2  # ConfigResource type of IncrementalAlterConfigs
# What a failed database write raises.
_STORE_DOWN = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError)
_STORE_DOWN_MESSAGE = "The cluster's metadata store could not be written: {error}"

Credentials = dict[tuple[str, str], ScramCredential]


async def stored_cluster_id(pool: asyncpg.Pool) -> str:
    """The cluster id in the store; a new one (Kafka's form: 22 base64 characters) when
    this is the cluster's first node."""
    async with pool.acquire() as connection:
        await ensure_metadata_schema(connection)
    proposed = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return await MetadataStore(pool).ensure_cluster_id(proposed)


def follower_name(node_id: int) -> str:
    """The application_name of node `node_id`'s listening connection."""
    return f"groupcoord-metadata-{node_id}"


class ClusterMetadata:
    """This node's topics, ACLs and credentials following the store (module docstring)."""

    def __init__(
        self,
        dsn: str,
        topics: TopicRegistry,
        security: Any,
        topics_deleted: Callable[[Mapping[str, uuid.UUID]], None],
        node_id: int,
    ) -> None:
        """`security`: the server's AuthServices (its `acls` store, None without an
        authorizer, and `scram` credentials); `topics_deleted`: removes the groups'
        offsets of deleted topics (GroupCoordinatorGateway.topics_deleted)."""
        self.dsn = dsn
        self.node_id = node_id
        self.topics = topics
        self.security = security
        self.topics_deleted = topics_deleted
        self.follower = MetadataFollower(
            dsn,
            self._image_changed,
            check_interval_s=CHECK_INTERVAL_S,
            application_name=follower_name(node_id),
        )
        self.store: MetadataStore | None = None
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()
        self._applied = -1  # the image version the local state was last made equal to
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._auto_creating: set[str] = set()
        # Set once `start` made the local state equal to the store's image: a change that
        # arrives before (the listener opens first) waits for it, never applying an image
        # not yet loaded (an empty one would delete every topic).
        self._started = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()

    def _connected_store(self) -> MetadataStore:
        """The store a change is written to: changes are applied only after `start`
        connected it (they wait for `_started`), so it is never None here."""
        assert self.store is not None
        return self.store

    # lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, load the image, make the local state equal to it, then follow."""
        # The leases' session settings: a node paused or cut off inside a metadata change
        # (holding metadata_version's row) loses that transaction after the lock hold, and
        # a change waiting that long for the row fails (the request's error) instead of
        # hanging behind it.
        self._pool = await open_pool(self.dsn, max_size=2, node_id=self.node_id)
        self.store = MetadataStore(self._pool)
        await self.follower.start()
        async with self._lock:
            await self._catch_up()
        self._started.set()
        self._task = asyncio.ensure_future(self._follow())

    async def close(self) -> None:
        for task in (self._task, *self._background):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.follower.close()
        if self._pool is not None:
            await self._pool.close()

    # following the image -----------------------------------------------------------------

    def _image_changed(self, _image: MetadataImage) -> None:
        self._dirty.set()

    async def _follow(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            async with self._lock:
                done = await self._catch_up()
            if not done:  # something could not be applied: again shortly
                self._dirty.set()
                await asyncio.sleep(RETRY_S)

    async def _catch_up(self) -> bool:
        """Make the local state equal to the follower's image unless it is already
        (holding the lock); False when a step failed (tried again later)."""
        image = self.follower.image
        if image.version == self._applied:
            return True
        done = await self._apply(image)
        if done:
            self._applied = image.version
        return done

    async def _apply(self, image: MetadataImage) -> bool:
        ok = True
        registry = self.topics
        deleted: dict[str, uuid.UUID] = {}
        for topic in registry.topics():
            record = image.topics.get(topic.name)
            if record is not None and record.topic_id == topic.topic_id:
                continue
            try:
                await registry.delete_in_steps(topic)
            except (TopicError, OSError) as e:
                ok = _failed("delete topic", topic.name, e)
                continue
            log.info("topic deleted: the metadata store has it no more", topic=topic.name)
            # A name the store gave another id keeps its offsets: they are the new topic's.
            if record is None:
                deleted[topic.name] = topic.topic_id
        if deleted:
            self.topics_deleted(deleted)
        for record in image.topics.values():
            configs = dict(image.configs.get(record.name, {}))
            topic = registry.get(record.name)
            try:
                if topic is None:
                    await registry.create_in_steps(
                        record.name, record.partitions, dict(configs), topic_id=record.topic_id
                    )
                    log.info("topic created from the metadata store", topic=record.name)
                    continue
                if record.partitions > len(topic.partitions):
                    await registry.add_partitions_in_steps(topic, record.partitions)
                if configs != topic.configs:
                    registry.alter_configs(topic, dict(configs))
            except (TopicError, OSError) as e:
                ok = _failed("follow topic", record.name, e)
        acls = self.security.acls
        if acls is not None:
            local = set(acls.authorizer.acls())
            added, removed = image.acls - local, local - image.acls
            if added or removed:
                try:
                    await acls.change(list(added), list(removed))
                except (OSError, ValueError) as e:
                    ok = _failed("follow ACLs", "", e)
        scram = self.security.scram
        local_credentials = _credentials(scram)
        upserts = [
            (user, mechanism, credential)
            for (user, mechanism), credential in image.credentials.items()
            if local_credentials.get((user, mechanism)) != credential
        ]
        deletions = [key for key in local_credentials if key not in image.credentials]
        if upserts or deletions:
            try:
                scram.apply(upserts, deletions)
            except (OSError, ValueError) as e:
                ok = _failed("follow SCRAM credentials", "", e)
        return ok

    # client changes ----------------------------------------------------------------------

    def wrap(self, handlers: dict[int, Any]) -> None:
        """Route the metadata-changing APIs' answers through the store (module docstring)."""
        publishers: dict[int, Callable[[Request, Any, Any], Awaitable[Any]]] = {
            ApiKey.CREATE_TOPICS: self._created,
            ApiKey.DELETE_TOPICS: self._deleted,
            ApiKey.CREATE_PARTITIONS: self._grown,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._reconfigured,
            ApiKey.CREATE_ACLS: self._acls_changed,
            ApiKey.DELETE_ACLS: self._acls_changed,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._credentials_changed,
        }
        for key, publish in publishers.items():
            handlers[key] = self._wrapped(handlers[key], publish)
        self.topics.auto_create_hook = self.auto_create

    def _wrapped(
        self, handler: Callable[..., Any], publish: Callable[[Request, Any, Any], Awaitable[Any]]
    ) -> Callable[..., Any]:
        async def through_store(ctx: Any, request: Request) -> Any:
            await asyncio.wait_for(self._started.wait(), START_WAIT_S)
            async with self._lock:
                await self._catch_up()
                before = self._security_state()
                result = handler(ctx, request)
                if inspect.isawaitable(result):
                    result = await result
                if getattr(request.body, "validate_only", False):
                    return result
                return await publish(request, result, before)

        return through_store

    async def _written(self, versions: list[int]) -> None:
        """Wait (holding the lock) until this node's image has every version written here,
        so the image applied next includes them and this node's next answers show them."""
        if versions:
            with contextlib.suppress(TimeoutError):
                await self.follower.wait_for_version(max(versions), VERSION_WAIT_S)

    def _diverged(self) -> None:
        """The local state differs from the image (a change the store refused or could
        not take): the image is applied again, whatever its version."""
        self._applied = -1
        self._dirty.set()

    async def _each(
        self,
        entries: tuple[Any, ...],
        succeeded: Callable[[Any], bool],
        write: Callable[[Any], Awaitable[int]],
        refusals: Mapping[type[Exception], tuple[ErrorCode, Callable[[Any], str]]],
    ) -> tuple[Any, ...]:
        """Write each succeeded entry to the store; an entry it refuses (or cannot take)
        answered with its error instead."""
        assert self.store is not None
        out = []
        versions: list[int] = []
        for entry in entries:
            if not succeeded(entry):
                out.append(entry)
                continue
            try:
                versions.append(await _bounded(write(entry)))
            except tuple(refusals) as e:
                code, message = refusals[type(e)]
                entry = dataclasses.replace(entry, error_code=code, error_message=message(entry))
                self._diverged()  # the image puts the local state back
            except _STORE_DOWN as e:
                entry = _store_down(entry, e)
                self._diverged()
            out.append(entry)
        await self._written(versions)
        return tuple(out)

    async def _created(self, _request: Request, response: Any, _before: Any) -> Any:
        store = self._connected_store()

        def write(entry: Any) -> Awaitable[int]:
            topic = self.topics.get(entry.name)
            assert topic is not None
            return store.create_topic(
                topic.name, len(topic.partitions), topic.topic_id, topic.configs
            )

        exists = (ErrorCode.TOPIC_ALREADY_EXISTS, lambda e: f"Topic '{e.name}' already exists.")
        topics = await self._each(
            response.topics, _ok_and(self.topics.get), write, {TopicExists: exists}
        )
        # An entry refused by the store is answered as the local path answers an error.
        topics = tuple(t if not t.error_code else _as_create_error(t) for t in topics)
        return dataclasses.replace(response, topics=topics)

    async def _deleted(self, _request: Request, response: Any, _before: Any) -> Any:
        store = self._connected_store()

        def write(entry: Any) -> Awaitable[int]:
            topic_id = entry.topic_id if getattr(entry, "topic_id", None) else None
            return store.delete_topic(entry.name, topic_id)

        unknown = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _not_hosted)
        responses = await self._each(response.responses, _ok_named, write, {UnknownTopic: unknown})
        return dataclasses.replace(response, responses=responses)

    async def _grown(self, _request: Request, response: Any, _before: Any) -> Any:
        store = self._connected_store()

        def write(entry: Any) -> Awaitable[int]:
            topic = self.topics.get(entry.name)
            assert topic is not None
            return store.create_partitions(entry.name, len(topic.partitions))

        refusals = {
            UnknownTopic: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, _not_hosted),
            ValueError: (
                ErrorCode.INVALID_PARTITIONS,
                lambda e: f"Topic '{e.name}' has as many partitions already.",
            ),
        }
        results = await self._each(response.results, _ok_and(self.topics.get), write, refusals)
        return dataclasses.replace(response, results=results)

    async def _reconfigured(self, _request: Request, response: Any, _before: Any) -> Any:
        store = self._connected_store()

        def is_topic(entry: Any) -> bool:
            return (
                not entry.error_code
                and entry.resource_type == RESOURCE_TOPIC
                and self.topics.get(entry.resource_name) is not None
            )

        def write(entry: Any) -> Awaitable[int]:
            topic = self.topics.get(entry.resource_name)
            assert topic is not None
            return store.replace_topic_configs(topic.name, topic.configs)

        unknown = (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            lambda e: f"The topic '{e.resource_name}' does not exist.",
        )
        responses = await self._each(response.responses, is_topic, write, {UnknownTopic: unknown})
        return dataclasses.replace(response, responses=responses)

    def _security_state(self) -> tuple[frozenset[AclBinding], Credentials]:
        acls = self.security.acls
        bindings = frozenset(acls.authorizer.acls()) if acls is not None else frozenset()
        return bindings, _credentials(self.security.scram)

    async def _acls_changed(
        self, _request: Request, response: Any, before: tuple[frozenset[AclBinding], Any]
    ) -> Any:
        store = self._connected_store()
        after = self._security_state()[0]
        added, removed = after - before[0], before[0] - after
        field = "results" if hasattr(response, "results") else "filter_results"
        try:
            versions = [await _bounded(store.create_acls(added))] if added else []
            if removed:
                versions.append(await _bounded(store.delete_acls(removed)))
        except _STORE_DOWN as e:
            self._diverged()
            entries = tuple(_store_down(r, e) for r in getattr(response, field))
            return dataclasses.replace(response, **{field: entries})
        await self._written(versions)
        return response

    async def _credentials_changed(
        self, _request: Request, response: Any, before: tuple[Any, Credentials]
    ) -> Any:
        store = self._connected_store()
        after = self._security_state()[1]
        try:
            versions = [
                await _bounded(store.upsert_credential(user, mechanism, credential))
                for (user, mechanism), credential in after.items()
                if before[1].get((user, mechanism)) != credential
            ]
            versions += [
                await _bounded(store.delete_credential(user, mechanism))
                for user, mechanism in before[1]
                if (user, mechanism) not in after
            ]
        except _STORE_DOWN as e:
            self._diverged()
            results = tuple(_store_down(r, e) for r in response.results)
            return dataclasses.replace(response, results=results)
        await self._written(versions)
        return response

    def auto_create(self, name: str, partitions: int) -> bool:
        """The registry's auto_create_hook: the topic is written to the store in the
        background and False returned (Metadata answers LEADER_NOT_AVAILABLE; the client
        asks again and finds it once the image brought it). True for a name the local
        checks refuse, so that Metadata answers their error."""
        try:
            check_topic_name(name)
            self.topics.check_collision(name)
        except TopicError:
            return True
        if name not in self._auto_creating and self._started.is_set():
            self._auto_creating.add(name)
            task = asyncio.ensure_future(self._auto_create(name, partitions))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return False

    async def _auto_create(self, name: str, partitions: int) -> None:
        assert self.store is not None
        try:
            await self.store.create_topic(name, partitions)
            log.info("auto-created topic in the metadata store", topic=name)
        except TopicExists:
            pass
        except _STORE_DOWN as e:
            log.warning("auto-create failed: metadata store unavailable", topic=name, error=repr(e))
        finally:
            self._auto_creating.discard(name)


async def _bounded(write: Awaitable[int]) -> int:
    return await asyncio.wait_for(write, WRITE_TIMEOUT_S)


def _not_hosted(_entry: Any) -> str:
    return "This server does not host this topic-partition."


def _ok_named(entry: Any) -> bool:
    return not entry.error_code and bool(entry.name)


def _ok_and(exists: Callable[[str], Any]) -> Callable[[Any], bool]:
    def ok(entry: Any) -> bool:
        return not entry.error_code and exists(entry.name) is not None

    return ok


def _as_create_error(entry: Any) -> Any:
    fields = {f.name for f in dataclasses.fields(entry)}
    values: dict[str, Any] = {"num_partitions": -1, "replication_factor": -1, "configs": ()}
    if "topic_id" in fields:
        values["topic_id"] = uuid.UUID(int=0)
    return dataclasses.replace(entry, **{k: v for k, v in values.items() if k in fields})


def _store_down(entry: Any, error: BaseException) -> Any:
    if entry.error_code:
        return entry
    log.warning("metadata store write failed", error=repr(error))
    return dataclasses.replace(
        entry,
        error_code=ErrorCode.REQUEST_TIMED_OUT,
        error_message=_STORE_DOWN_MESSAGE.format(error=error),
    )


def _credentials(scram: Any) -> Credentials:
    return {
        (user, mechanism): credential
        for user in scram.users()
        for mechanism, credential in (scram.mechanisms(user) or {}).items()
    }


def _failed(step: str, name: str, error: Exception) -> bool:
    log.warning("metadata image step failed; tried again", step=step, name=name, error=str(error))
    return False

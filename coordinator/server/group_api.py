"""Group and offset APIs: kio requests of every served version -> the pure shard's
messages, run on the group's shard, and the shard's answers -> kio responses of the
request's version.

Every adapter returns the response at once when the shard answered synchronously (nothing
to wait for), else a Pending set when the shard's records are durable. While a shard
loads, requests get COORDINATOR_LOAD_IN_PROGRESS; a failed shard answers NOT_COORDINATOR
(clients look the coordinator up again)."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from groupcoord.protocol.api import ApiKey, Encoded, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..groups import offsets as om
from ..groups.classic import messages as cm
from ..groups.consumer import messages as ccm
from ..groups.result import Reply, Result
from ..groups.shard import GroupShard
from ..runtime.runner import NotActive, ShardState, StorageFailure
from .pending import Pending

if TYPE_CHECKING:
    from .connection import Connection


_NO_THROTTLE = datetime.timedelta(0)


def not_active_error(e: NotActive) -> ErrorCode:
    if e.state is ShardState.LOADING:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return ErrorCode.NOT_COORDINATOR


def run_on_shard(
    conn: Connection,
    group_id: str,
    event: Callable[[GroupShard, Reply, int], Result],
    convert: Callable[[Any], Any],
    on_error: Callable[[ErrorCode], Any],
) -> Any:
    """Run `event(shard, reply, now_ms)` on the group's shard; the reply is converted to
    the response. Returns the response when the shard answered at once (most heartbeats),
    else a Pending of it."""
    answer = _ShardAnswer(convert, on_error)
    try:
        conn.server.coordinator.runner_for(group_id).call(event, answer, conn.read_at)
    except NotActive as e:
        return on_error(not_active_error(e))
    return answer.value if answer.done else answer


class _ShardAnswer(Pending):
    """The response to a request run on a shard, and the reply its event hands the shard:
    called with the shard's answer, it sets the response converted from it (NOT_COORDINATOR
    through `on_error` for a StorageFailure). One object per request, rather than a Pending
    and a closure over it."""

    __slots__ = ("_convert", "_on_error")

    def __init__(self, convert: Callable[[Any], Any], on_error: Callable[[ErrorCode], Any]) -> None:
        # Pending's fields set here: no super().__init__ call per request.
        self.done = False
        self.value = None
        self.listener = None
        self._future = None
        self._convert = convert
        self._on_error = on_error

    def __call__(self, answer: Any) -> None:
        self.set(
            self._on_error(ErrorCode.NOT_COORDINATOR)
            if isinstance(answer, StorageFailure)
            else self._convert(answer)
        )


def run_group_call(
    conn: Connection,
    group_id: str | None,
    call: Callable[[GroupShard, Reply, int], Result],
    convert: Callable[[Any], Any],
    on_error: Callable[[ErrorCode], Any],
) -> Any:
    """`call(shard, reply, now_ms)` on the group's shard, after the check every group API
    shares: a null or empty group id is INVALID_GROUP_ID."""
    if not group_id:
        return on_error(ErrorCode.INVALID_GROUP_ID)
    return run_on_shard(conn, group_id, call, convert, on_error)


def respond_when_answered(parts: list[Any], respond: Callable[[list[Any]], Any]) -> Any:
    """`respond(answers)` once every shard answer in `parts` is in (some are Pendings): the
    response at once when none is pending, else an awaitable of it."""
    if all(not isinstance(p, Pending) for p in parts):
        return respond(parts)

    async def wait() -> Any:
        return respond([await p if isinstance(p, Pending) else p for p in parts])

    return wait()


def run_by_shard(
    conn: Connection,
    group_ids: Iterable[str],
    event: Callable[[GroupShard, list[str], Reply, int], Result],
    convert: Callable[[Any], dict[str, Any]],
    on_error: Callable[[ErrorCode, list[str]], dict[str, Any]],
    respond: Callable[[dict[str, Any]], Any],
) -> Any:
    """One event per shard owning some of `group_ids` (each id once, in order):
    `event(shard, ids, reply, now_ms)`, its reply converted to {group id: answer} (or
    `on_error(error, ids)` when the shard cannot run it); `respond(every answer)` once all
    shards answered (respond_when_answered)."""
    by_shard: dict[int, list[str]] = {}
    for group_id in dict.fromkeys(group_ids):
        by_shard.setdefault(conn.server.coordinator.runner_for(group_id).shard_id, []).append(
            group_id
        )
    parts = [
        run_on_shard(
            conn,
            ids[0],
            lambda shard, reply, now_ms, ids=ids: event(shard, ids, reply, now_ms),
            convert,
            lambda error, ids=ids: on_error(error, ids),
        )
        for ids in by_shard.values()
    ]

    def merged(answers: list[dict[str, Any]]) -> Any:
        merged_answers: dict[str, Any] = {}
        for answer in answers:
            merged_answers.update(answer)
        return respond(merged_answers)

    return respond_when_answered(parts, merged)


def _cls(module: Any, *names: str) -> Any:
    for name in names:
        cls = getattr(module, name, None)
        if cls is not None:
            return cls
    raise AttributeError(names)


# -- OffsetCommit ----------------------------------------------------------------------------


def _retention_ms(body: Any) -> int:
    """OffsetCommit v2-v4's RetentionTimeMs (the codec's timedelta `retention_time`), -1
    (the broker's retention) for the versions without it."""
    retention = getattr(body, "retention_time", None)
    if retention is None:
        return -1
    return int(retention // datetime.timedelta(milliseconds=1))


def handle_offset_commit(conn: Connection, request: Request) -> Any:
    """OffsetCommit v2-v9 (see `offset_commit`)."""
    body = request.body
    return offset_commit(
        conn,
        request.api_version,
        body.group_id,
        body.generation_id_or_member_epoch,
        body.member_id,
        getattr(body, "group_instance_id", None),
        _retention_ms(body),
        [
            (
                t.name,
                [
                    om.new_commit_partition(
                        p.partition_index,
                        p.committed_offset,
                        getattr(p, "committed_leader_epoch", -1),
                        p.committed_metadata,
                    )
                    for p in t.partitions
                ],
            )
            for t in body.topics
        ],
    )


def offset_commit(
    conn: Connection,
    version: int,
    group_id: str | None,
    generation_id_or_member_epoch: int,
    member_id: str,
    group_instance_id: str | None,
    retention_time_ms: int,
    requested: list[tuple[str, list[om.OffsetCommitPartition]]],
) -> Any:
    """OffsetCommit v2-v9, from the decoded request (handle_offset_commit) or from
    fast_paths.py's reading of the frame; `requested` is [(topic, partitions)]. Emits
    OffsetCommit records for accepted partitions. Errors: UNKNOWN_TOPIC_OR_PARTITION
    (topic or partition does not exist, checked here as Kafka's KafkaApis does),
    INVALID_GROUP_ID (null group id), and the shard's errors (offsets.py)."""
    registry = conn.server.topics
    invalid: dict[str, list[int]] | None = None  # refused here: unknown topic or partition
    topics: list[om.OffsetCommitTopic] = []
    for name, partitions in requested:
        topic = registry.get(name)
        if topic is None:
            invalid = invalid or {}
            invalid.setdefault(name, []).extend(p.index for p in partitions)
            continue
        count = len(topic.partitions)
        valid = partitions
        for p in partitions:  # a loop, not a comprehension: every partition valid is usual
            if not 0 <= p.index < count:
                valid = [p for p in partitions if 0 <= p.index < count]
                invalid = invalid or {}
                invalid.setdefault(name, []).extend(
                    p.index for p in partitions if not 0 <= p.index < count
                )
                break
        if valid:
            topics.append(om.new_commit_topic(name, valid, topic.topic_id))
    # No closures here (a function and a cell per captured name, per commit): one object
    # answers what the shard cannot (on_error) and merges in the partitions refused here.
    replies = _CommitReplies(version, topics, invalid)
    if group_id is None:
        return replies(ErrorCode.INVALID_GROUP_ID)
    if not topics:
        return replies.respond([])
    commit = om.new_commit_request(
        group_id,
        generation_id_or_member_epoch,
        member_id,
        group_instance_id,
        retention_time_ms,
        version,
        topics,
    )
    return run_on_shard(
        conn,
        group_id,
        lambda shard, reply, now_ms: shard.offsets.commit_offsets(commit, reply, now_ms),
        replies.merged if invalid else _COMMIT_ANSWERS.get(version) or _CommitAnswer(version),
        replies,
    )


class _CommitReplies:
    """A commit's response when not every partition went to the shard or the shard could
    not run it: called with an error, every partition sent to the shard fails with it;
    `merged(shard's answer)` adds the partitions refused before the shard
    (UNKNOWN_TOPIC_OR_PARTITION)."""

    __slots__ = ("version", "topics", "invalid")

    def __init__(
        self, version: int, topics: list[om.OffsetCommitTopic], invalid: dict[str, list[int]] | None
    ) -> None:
        self.version = version
        self.topics = topics
        self.invalid = invalid

    def __call__(self, error: ErrorCode) -> Any:
        return self.respond(
            [(t.name, [(p.index, error) for p in t.partitions]) for t in self.topics]
        )

    def merged(self, r: om.OffsetCommitResponse) -> Any:
        return self.respond(_commit_results(r))

    def respond(self, results: list[tuple[str, list[tuple[int, ErrorCode]]]]) -> Any:
        if self.invalid:
            merged: dict[str, list[tuple[int, ErrorCode]]] = {}
            for name, parts in results:
                merged.setdefault(name, []).extend(parts)
            for name, indexes in self.invalid.items():
                merged.setdefault(name, []).extend(
                    (i, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for i in indexes
                )
            results = list(merged.items())
        return _commit_response(self.version, results)


def _commit_results(r: om.OffsetCommitResponse) -> list[tuple[str, list[tuple[int, ErrorCode]]]]:
    return [(t.name, [(p.index, p.error) for p in t.partitions]) for t in r.topics]


class _CommitAnswer:
    """The OffsetCommitResponse of a version for the shard's answer, when every requested
    partition exists (the usual commit: one topic, one partition, answered from
    _ONE_PARTITION_COMMITS without building a response)."""

    __slots__ = ("version",)

    def __init__(self, version: int) -> None:
        self.version = version

    def __call__(self, r: om.OffsetCommitResponse) -> Any:
        topics = r.topics
        if len(topics) == 1:
            topic = topics[0]
            if len(topic.partitions) == 1:
                p = topic.partitions[0]
                key = (self.version, topic.name, p.index, p.error)
                encoded = _ONE_PARTITION_COMMITS.cached(key)
                if encoded is not None:
                    return encoded
        return _commit_response(self.version, _commit_results(r))


# One per OffsetCommit version served (v0-v9 are known to the codec).
_COMMIT_ANSWERS = {version: _CommitAnswer(version) for version in range(10)}


class _EncodedResponses:
    """Responses that repeat, encoded once per key and reused; bounded (emptied when full)
    so that clients cannot grow it without limit. The key starts with the version."""

    __slots__ = ("api_key", "_encoded")
    LIMIT = 100_000

    def __init__(self, api_key: ApiKey) -> None:
        self.api_key = api_key
        self._encoded: dict[tuple[Any, ...], Encoded] = {}

    def cached(self, key: tuple[Any, ...]) -> Encoded | None:
        return self._encoded.get(key)

    def get(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Encoded:
        encoded = self._encoded.get(key)
        if encoded is None:
            if len(self._encoded) >= self.LIMIT:
                self._encoded.clear()
            encoded = self._encoded[key] = Encoded(build(), self.api_key, key[0])
        return encoded


# The common commit response: one topic, one partition, by (version, topic, partition, error).
_ONE_PARTITION_COMMITS = _EncodedResponses(ApiKey.OFFSET_COMMIT)


def _commit_response(version: int, results: list[tuple[str, list[tuple[int, ErrorCode]]]]) -> Any:
    """The OffsetCommitResponse of `version` for [(topic, [(partition, error)])]."""
    if len(results) == 1 and len(results[0][1]) == 1:
        name, ((index, error),) = results[0]
        return _ONE_PARTITION_COMMITS.get(
            (version, name, index, error), lambda: _build_commit_response(version, results)
        )
    return _build_commit_response(version, results)


def _build_commit_response(
    version: int, results: list[tuple[str, list[tuple[int, ErrorCode]]]]
) -> Any:
    m = response_types(ApiKey.OFFSET_COMMIT, version)
    topics = tuple(
        m.OffsetCommitResponseTopic(
            name=name,
            partitions=tuple(
                m.OffsetCommitResponsePartition(partition_index=index, error_code=error)
                for index, error in parts
            ),
        )
        for name, parts in results
    )
    if "throttle_time" in m.OffsetCommitResponse.__dataclass_fields__:
        return m.OffsetCommitResponse(throttle_time=_NO_THROTTLE, topics=topics)
    return m.OffsetCommitResponse(topics=topics)


# -- OffsetFetch -----------------------------------------------------------------------------


def _fetch_one(
    conn: Connection,
    group_id: str,
    topics: Any,
    require_stable: bool,
    member_id: str | None,
    member_epoch: int,
) -> Any:
    """Returns om.OffsetFetchResponse, or a future of it."""
    wanted = (
        None
        if topics is None
        else [om.OffsetFetchTopic(t.name, list(t.partition_indexes)) for t in topics]
    )
    fetch = om.OffsetFetchRequest(
        group_id=group_id,
        topics=wanted,
        require_stable=require_stable,
        member_id=member_id,
        member_epoch=member_epoch,
    )
    return run_on_shard(
        conn,
        group_id,
        lambda shard, reply, now_ms: shard.offsets.fetch_offsets(fetch, reply, now_ms),
        lambda r: r,
        lambda error: om.OffsetFetchResponse(group_id, [], error),
    )


def handle_offset_fetch(conn: Connection, request: Request) -> Any:
    """OffsetFetch v1-v9 (v8+: several groups). Writes nothing. A missing group answers
    offset -1 for each requested partition, no error (client-compat 13). Errors:
    COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR per group, INVALID_GROUP_ID."""
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.OFFSET_FETCH, version)
    if version >= 8:
        parts = [
            _fetch_one(
                conn,
                g.group_id,
                g.topics,
                body.require_stable,
                getattr(g, "member_id", None),
                getattr(g, "member_epoch", -1),
            )
            for g in body.groups
        ]
    else:
        parts = [
            _fetch_one(
                conn, body.group_id, body.topics, getattr(body, "require_stable", False), None, -1
            )
        ]

    def respond(answers: list[om.OffsetFetchResponse]) -> Any:
        partition_cls = _cls(m, "OffsetFetchResponsePartitions", "OffsetFetchResponsePartition")
        topic_cls = _cls(m, "OffsetFetchResponseTopics", "OffsetFetchResponseTopic")

        def topics_of(answer: om.OffsetFetchResponse) -> tuple[Any, ...]:
            return tuple(
                build(
                    topic_cls,
                    name=t.name,
                    partitions=tuple(
                        build(
                            partition_cls,
                            partition_index=p.index,
                            committed_offset=p.offset,
                            committed_leader_epoch=p.leader_epoch,
                            metadata=p.metadata,
                            error_code=p.error,
                        )
                        for p in t.partitions
                    ),
                )
                for t in answer.topics
            )

        if version >= 8:
            return build(
                m.OffsetFetchResponse,
                groups=tuple(
                    build(
                        m.OffsetFetchResponseGroup,
                        group_id=a.group_id,
                        topics=topics_of(a),
                        error_code=a.error,
                    )
                    for a in answers
                ),
            )
        answer = answers[0]
        if version < 2 and answer.error != ErrorCode.NONE:
            # v0-v1 have no top-level error: every requested partition carries it, offset -1
            # (Kafka's getErrorResponse). A shard's error answer lists no topics: without
            # them a loading coordinator would read as "nothing committed", and the client
            # would apply auto.offset.reset.
            answer = om.OffsetFetchResponse(
                answer.group_id,
                [
                    om.OffsetFetchTopicResult(
                        t.name,
                        None,
                        [
                            om.OffsetFetchPartition(i, error=answer.error)
                            for i in t.partition_indexes
                        ],
                    )
                    for t in body.topics
                ],
                answer.error,
            )
        return build(m.OffsetFetchResponse, topics=topics_of(answer), error_code=answer.error)

    return respond_when_answered(parts, respond)


# -- OffsetDelete ----------------------------------------------------------------------------


def handle_offset_delete(conn: Connection, request: Request) -> Any:
    """OffsetDelete v0. Emits tombstones for the deleted offsets. Errors: top-level
    GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, INVALID_GROUP_ID; per partition
    GROUP_SUBSCRIBED_TO_TOPIC, UNKNOWN_TOPIC_OR_PARTITION (no such topic or partition)."""
    body = request.body
    m = response_types(ApiKey.OFFSET_DELETE, request.api_version)
    registry = conn.server.topics
    wanted: dict[str, list[int]] = {}
    invalid: dict[str, list[int]] = {}
    for t in body.topics:
        topic = registry.get(t.name)
        for p in t.partitions:
            if topic is None or not 0 <= p.partition_index < len(topic.partitions):
                invalid.setdefault(t.name, []).append(p.partition_index)
            else:
                wanted.setdefault(t.name, []).append(p.partition_index)

    def respond(answer: om.OffsetDeleteResponse) -> Any:
        merged: dict[str, list[tuple[int, ErrorCode]]] = {}
        for t in answer.topics:
            merged.setdefault(t.name, []).extend((p.index, p.error) for p in t.partitions)
        if answer.error == ErrorCode.NONE:
            for name, indexes in invalid.items():
                merged.setdefault(name, []).extend(
                    (i, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for i in indexes
                )
        return build(
            m.OffsetDeleteResponse,
            error_code=answer.error,
            topics=tuple(
                build(
                    m.OffsetDeleteResponseTopic,
                    name=name,
                    partitions=tuple(
                        build(m.OffsetDeleteResponsePartition, partition_index=i, error_code=e)
                        for i, e in parts
                    ),
                )
                for name, parts in merged.items()
            ),
        )

    return run_group_call(
        conn,
        body.group_id,
        lambda shard, reply, now_ms: shard.offsets.delete_offsets(
            body.group_id, wanted, reply, now_ms
        ),
        respond,
        lambda error: respond(om.OffsetDeleteResponse(error, [])),
    )


# -- DeleteGroups ----------------------------------------------------------------------------


def handle_delete_groups(conn: Connection, request: Request) -> Any:
    """DeleteGroups v0-v2. Emits offset tombstones and a group tombstone per deleted group.
    Per group: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR, INVALID_GROUP_ID (null id)."""
    m = response_types(ApiKey.DELETE_GROUPS, request.api_version)
    names = list(request.body.groups_names)

    def respond(errors: dict[str, ErrorCode]) -> Any:
        return build(
            m.DeleteGroupsResponse,
            results=tuple(
                build(m.DeletableGroupResult, group_id=g, error_code=errors[g])
                for g in dict.fromkeys(names)
            ),
        )

    return run_by_shard(
        conn,
        names,
        lambda shard, ids, reply, now_ms: shard.offsets.delete_groups(ids, reply, now_ms),
        lambda r: {x.group_id: x.error for x in r.results},
        lambda error, ids: dict.fromkeys(ids, error),
        respond,
    )


# -- Classic group protocol ------------------------------------------------------------------


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


def _client_host(conn: Connection) -> str:
    # Kafka prints the InetAddress: "/127.0.0.1".
    return getattr(conn, "client_host", None) or "/" + conn.peer.rsplit(":", 1)[0]


def handle_join_group(conn: Connection, request: Request) -> Any:
    """JoinGroup v0-v9: parks until the join phase completes (or answers at once: member id
    required, static rejoin, unchanged follower). Emits GroupMetadata records where Kafka
    writes them. Errors: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, UNKNOWN_MEMBER_ID,
    MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL,
    GROUP_MAX_SIZE_REACHED, REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR (classic/manager.py has the decision order)."""
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.JOIN_GROUP, version)
    session_timeout_ms = _ms(body.session_timeout)
    join = cm.JoinGroupRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        protocol_type=body.protocol_type,
        protocols=[(p.name, p.metadata) for p in body.protocols],
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=_ms(body.rebalance_timeout) if version >= 1 else -1,
        group_instance_id=getattr(body, "group_instance_id", None),
        reason=getattr(body, "reason", None),
        client_id=request.header.client_id or "",
        client_host=_client_host(conn),
        api_version=version,
    )

    def respond(r: cm.JoinGroupResponse) -> Any:
        protocol_name = r.protocol_name if version >= 7 else (r.protocol_name or "")
        return build(
            m.JoinGroupResponse,
            error_code=r.error_code,
            generation_id=r.generation_id,
            protocol_type=r.protocol_type,
            protocol_name=protocol_name,
            leader=r.leader,
            skip_assignment=r.skip_assignment,
            member_id=r.member_id,
            members=tuple(
                build(
                    m.JoinGroupResponseMember,
                    member_id=x.member_id,
                    group_instance_id=x.group_instance_id,
                    metadata=x.metadata,
                )
                for x in r.members
            ),
        )

    def failed(error: ErrorCode) -> Any:
        return respond(cm.JoinGroupResponse(error_code=error, member_id=body.member_id))

    return run_group_call(
        conn,
        body.group_id,
        lambda shard, reply, now_ms: shard.classic.join_group(join, reply, now_ms),
        respond,
        failed,
    )


def handle_sync_group(conn: Connection, request: Request) -> Any:
    """SyncGroup v0-v5: the leader's assignment is persisted (GroupMetadata) and every
    parked member answered once it is durable. Errors: INVALID_GROUP_ID, UNKNOWN_MEMBER_ID,
    FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
    REBALANCE_IN_PROGRESS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR."""
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.SYNC_GROUP, version)
    sync = cm.SyncGroupRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        generation_id=body.generation_id,
        assignments=[(a.member_id, a.assignment) for a in body.assignments],
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        api_version=version,
    )

    def respond(r: cm.SyncGroupResponse) -> Any:
        return build(
            m.SyncGroupResponse,
            error_code=r.error_code,
            protocol_type=r.protocol_type,
            protocol_name=r.protocol_name,
            assignment=r.assignment,
        )

    def failed(error: ErrorCode) -> Any:
        return respond(cm.SyncGroupResponse(error_code=error))

    if not body.group_id:
        return failed(ErrorCode.INVALID_GROUP_ID)
    if version >= 5 and (sync.protocol_type is None or sync.protocol_name is None):
        return failed(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    return run_group_call(
        conn,
        body.group_id,
        lambda shard, reply, now_ms: shard.classic.sync_group(sync, reply, now_ms),
        respond,
        failed,
    )


def handle_heartbeat(conn: Connection, request: Request) -> Any:
    """Heartbeat v0-v4: refreshes the member's session; writes nothing. Errors:
    INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
    REBALANCE_IN_PROGRESS, NOT_COORDINATOR. While the shard loads the answer is NONE, as
    Kafka's ("blindly respond": the member is not fenced for the coordinator's restart)."""
    body = request.body
    m = response_types(ApiKey.HEARTBEAT, request.api_version)
    beat = cm.HeartbeatRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        generation_id=body.generation_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        api_version=request.api_version,
    )

    def failed(error: ErrorCode) -> Any:
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            error = ErrorCode.NONE
        return build(m.HeartbeatResponse, error_code=error)

    return run_group_call(
        conn,
        body.group_id,
        lambda shard, reply, now_ms: shard.classic.heartbeat(beat, reply, now_ms),
        lambda r: build(m.HeartbeatResponse, error_code=r.error_code),
        failed,
    )


def handle_leave_group(conn: Connection, request: Request) -> Any:
    """LeaveGroup v0-v5 (v3+: a batch, per-member errors echoing MemberId and
    GroupInstanceId). Errors: INVALID_GROUP_ID, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
    COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR."""
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.LEAVE_GROUP, version)
    if version >= 3:
        leave = cm.LeaveGroupRequest(
            body.group_id,
            [
                cm.LeaveMember(x.member_id, x.group_instance_id, getattr(x, "reason", None))
                for x in body.members
            ],
            version,
        )
    else:
        leave = cm.LeaveGroupRequest.single(body.group_id, body.member_id, version)

    def respond(r: cm.LeaveGroupResponse) -> Any:
        return build(
            m.LeaveGroupResponse,
            error_code=r.error_code,
            members=tuple(
                build(
                    m.MemberResponse,
                    member_id=x.member_id,
                    group_instance_id=x.group_instance_id,
                    error_code=x.error_code,
                )
                for x in r.members
            ),
        )

    def failed(error: ErrorCode) -> Any:
        return respond(cm.LeaveGroupResponse(error_code=error))

    return run_group_call(
        conn,
        body.group_id,
        lambda shard, reply, now_ms: shard.classic.leave_group(leave, reply, now_ms),
        respond,
        failed,
    )


def handle_describe_groups(conn: Connection, request: Request) -> Any:
    """DescribeGroups v0-v6: reads the groups' current state; writes nothing. A missing
    group, or a consumer (KIP-848) group, is "Dead" (GROUP_ID_NOT_FOUND from v6). Per
    group: COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR while its shard is not active."""
    version = request.api_version
    m = response_types(ApiKey.DESCRIBE_GROUPS, version)
    include_ops = getattr(request.body, "include_authorized_operations", False)
    groups = []
    for group_id in request.body.groups:
        runner = conn.server.coordinator.runner_for(group_id)
        if runner.state is not ShardState.ACTIVE:
            groups.append(
                build(
                    m.DescribedGroup,
                    group_id=group_id,
                    error_code=not_active_error(NotActive(runner.state)),
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=-(2**31),
                )
            )
            continue
        # A consumer group is not a classic group: Dead, as Kafka (client-compat 9); clients
        # describe it with ConsumerGroupDescribe.
        described = runner.shard.classic.describe_groups([group_id], version)[0]
        groups.append(
            build(
                m.DescribedGroup,
                group_id=described.group_id,
                error_code=described.error_code,
                error_message=described.error_message,
                group_state=described.group_state,
                protocol_type=described.protocol_type,
                protocol_data=described.protocol_data,
                members=tuple(
                    build(
                        m.DescribedGroupMember,
                        member_id=x.member_id,
                        group_instance_id=x.group_instance_id,
                        client_id=x.client_id,
                        client_host=x.client_host,
                        member_metadata=x.member_metadata,
                        member_assignment=x.member_assignment,
                    )
                    for x in described.members
                ),
                # No authorizer: everything is allowed when asked (READ, DESCRIBE, DELETE bits).
                authorized_operations=(1 << 3 | 1 << 6 | 1 << 8)
                if include_ops
                else described.authorized_operations,
            )
        )
    return build(m.DescribeGroupsResponse, groups=tuple(groups))


def handle_list_groups(conn: Connection, request: Request) -> Any:
    """ListGroups v0-v5: every group of every active shard with its real state and type;
    states and types filters matched case-insensitively. A failed shard is skipped (Kafka
    swallows NOT_COORDINATOR per partition); while any shard still loads the answer is
    COORDINATOR_LOAD_IN_PROGRESS with no groups (Kafka fails the whole listing with it, and
    clients retry)."""
    version = request.api_version
    m = response_types(ApiKey.LIST_GROUPS, version)
    states = list(getattr(request.body, "states_filter", ()) or ())
    types = list(getattr(request.body, "types_filter", ()) or ())
    runners = conn.server.coordinator.runners
    if any(runner.state is ShardState.LOADING for runner in runners):
        return build(
            m.ListGroupsResponse, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, groups=()
        )
    listed = []
    for runner in runners:
        if runner.state is ShardState.ACTIVE:
            listed.extend(runner.shard.classic.list_groups(states, types))
            listed.extend(runner.shard.consumer.list_groups(states, types))
    return build(
        m.ListGroupsResponse,
        error_code=ErrorCode.NONE,
        groups=tuple(
            build(
                m.ListedGroup,
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.group_state,
                group_type=g.group_type,
            )
            for g in listed
        ),
    )


# Encoded steady ConsumerGroupHeartbeat answers by (version, member, epoch, interval).
_STEADY_HEARTBEATS = _EncodedResponses(ApiKey.CONSUMER_GROUP_HEARTBEAT)


@functools.lru_cache(maxsize=64)
def _interval(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def consumer_heartbeat_response(version: int, r: ccm.HeartbeatResponse) -> Any:
    """The ConsumerGroupHeartbeat response of `version` for the shard's answer. A steady
    answer (no error, no assignment) repeats for the member until its epoch moves, so it
    is encoded once and kept (bounded)."""
    if r.assignment is None and r.error_code == ErrorCode.NONE and r.member_id is not None:
        return _STEADY_HEARTBEATS.get(
            (version, r.member_id, r.member_epoch, r.heartbeat_interval_ms),
            lambda: _heartbeat_entity(version, r),
        )
    return _heartbeat_entity(version, r)


def _heartbeat_entity(version: int, r: ccm.HeartbeatResponse) -> Any:
    m = response_types(ApiKey.CONSUMER_GROUP_HEARTBEAT, version)
    assignment = None
    if r.assignment is not None:
        assignment = m.Assignment(
            topic_partitions=tuple(
                m.TopicPartitions(topic_id=t, partitions=tuple(ps)) for t, ps in r.assignment
            ),
        )
    # Both versions have exactly these fields: constructed directly (the hot path).
    return m.ConsumerGroupHeartbeatResponse(
        throttle_time=_NO_THROTTLE,
        error_code=r.error_code,
        error_message=r.error_message,
        member_id=r.member_id,
        member_epoch=r.member_epoch,
        heartbeat_interval=_interval(r.heartbeat_interval_ms),
        assignment=assignment,
    )


def handle_consumer_group_heartbeat(conn: Connection, request: Request) -> Any:
    """ConsumerGroupHeartbeat v0-v1 (KIP-848). Emits the consumer-group records the shard's
    pipeline writes (consumer/manager.py); the response goes after they are durable. Errors
    (top level, with Kafka's messages): INVALID_REQUEST, UNSUPPORTED_ASSIGNOR,
    GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
    FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID, INVALID_REGULAR_EXPRESSION,
    UNKNOWN_SERVER_ERROR, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR."""
    body = request.body
    version = request.api_version
    client_id = request.header.client_id or ""
    client_host = _client_host(conn)

    def full_request() -> ccm.HeartbeatRequest:
        owned = body.topic_partitions
        names = body.subscribed_topic_names
        return ccm.HeartbeatRequest(
            group_id=body.group_id,
            member_id=body.member_id,
            member_epoch=body.member_epoch,
            instance_id=body.instance_id,
            rack_id=body.rack_id,
            rebalance_timeout_ms=_ms(body.rebalance_timeout),
            subscribed_topic_names=None if names is None else list(names),
            subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
            server_assignor=body.server_assignor,
            topic_partitions=None
            if owned is None
            else [(tp.topic_id, list(tp.partitions)) for tp in owned],
            api_version=version,
            client_id=client_id,
            client_host=client_host,
        )

    def event(shard: GroupShard, reply: Reply, now_ms: int) -> Result:
        # Steady v1 heartbeats rarely get here (fast_paths.py answers them from the raw
        # frame); the shard's heartbeat tries its steady path first anyway.
        return shard.consumer.heartbeat(full_request(), reply, now_ms)

    def respond(r: ccm.HeartbeatResponse) -> Any:
        return consumer_heartbeat_response(version, r)

    def failed(error: ErrorCode) -> Any:
        return respond(ccm.HeartbeatResponse(error_code=error))

    if not (body.group_id or "").strip():
        # Nothing to route by: the validation is pure, any shard's answer is the same.
        invalid = conn.server.coordinator.runners[0].shard.consumer.validate(full_request())
        assert invalid is not None
        return respond(
            ccm.HeartbeatResponse(error_code=invalid.error, error_message=invalid.message)
        )
    return run_on_shard(conn, body.group_id, event, respond, failed)


def handle_consumer_group_describe(conn: Connection, request: Request) -> Any:
    """ConsumerGroupDescribe v0-v1: reads the groups' state; writes nothing. The groups of
    each shard are described by one event on that shard (consumer describe_groups): a read
    after pending writes, answered once the writes before it are durable, as Kafka reads at
    the last committed offset (D.2). Per group: GROUP_ID_NOT_FOUND for a missing or classic
    group (with Kafka's message), INVALID_GROUP_ID for "", COORDINATOR_LOAD_IN_PROGRESS /
    NOT_COORDINATOR while its shard is not active, NOT_COORDINATOR when a write before it
    failed."""
    m = response_types(ApiKey.CONSUMER_GROUP_DESCRIBE, request.api_version)
    include_ops = request.body.include_authorized_operations
    group_ids = list(request.body.group_ids)

    def assignment(topics: list[ccm.DescribedTopicPartitions]) -> Any:
        return build(
            m.Assignment,
            topic_partitions=tuple(
                build(
                    m.TopicPartitions,
                    topic_id=p.topic_id,
                    topic_name=p.topic_name,
                    partitions=tuple(p.partitions),
                )
                for p in topics
            ),
        )

    def described_group(group_id: str, described: ccm.DescribedConsumerGroup) -> Any:
        return build(
            m.DescribedGroup,
            error_code=described.error_code,
            error_message=described.error_message,
            group_id=group_id,
            group_state=described.group_state,
            group_epoch=described.group_epoch,
            assignment_epoch=described.assignment_epoch,
            assignor_name=described.assignor_name,
            members=tuple(
                build(
                    m.Member,
                    member_id=x.member_id,
                    instance_id=x.instance_id,
                    rack_id=x.rack_id,
                    member_epoch=x.member_epoch,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    subscribed_topic_names=tuple(x.subscribed_topic_names),
                    subscribed_topic_regex=x.subscribed_topic_regex,
                    assignment=assignment(x.assignment),
                    target_assignment=assignment(x.target_assignment),
                    member_type=x.member_type,
                )
                for x in described.members
            ),
            # No authorizer: everything is allowed when asked (READ, DESCRIBE, DELETE).
            authorized_operations=(1 << 3 | 1 << 6 | 1 << 8)
            if include_ops and described.error_code == ErrorCode.NONE
            else -(2**31),
        )

    def respond(described: dict[str, ccm.DescribedConsumerGroup]) -> Any:
        invalid = ccm.DescribedConsumerGroup(
            "", ErrorCode.INVALID_GROUP_ID, "Group ID can't be empty."
        )
        return build(
            m.ConsumerGroupDescribeResponse,
            groups=tuple(described_group(g, described[g] if g else invalid) for g in group_ids),
        )

    return run_by_shard(
        conn,
        (g for g in group_ids if g),
        lambda shard, ids, reply, now_ms: shard.consumer.describe_groups(ids, reply),
        lambda described: {d.group_id: d for d in described},
        lambda error, ids: {g: ccm.DescribedConsumerGroup(g, error) for g in ids},
        respond,
    )

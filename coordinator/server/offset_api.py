"""Offset APIs: OffsetCommit v2-v9, OffsetFetch v1-v9 and OffsetDelete v0, from kio requests
of every served version to the shard's messages, run through the gateway, and the shard's
answers back to kio responses of the request's version.

Each returns the response at once when the shard answered synchronously, else a Pending
of it (the gateway's form). The common commit (one topic, one partition) is answered with
a response encoded once and reused, and OffsetCommit v8-v9 of the usual shape come here
from the raw frame (fast_paths.py), skipping the codec.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime import group_messages as gm
from ..runtime.shard_calls import when_all
from ..topics.access import DELETE, DESCRIBE, GROUP, READ, TOPIC, allowed, visible
from .context import GroupContext
from .encoded_responses import NO_THROTTLE, EncodedResponses, entity_class

# -- OffsetCommit ----------------------------------------------------------------------------


def _retention_ms(body: Any) -> int:
    """OffsetCommit v2-v4's RetentionTimeMs (the codec's timedelta `retention_time`), -1
    (the broker's retention) for the versions without it."""
    retention = getattr(body, "retention_time", None)
    if retention is None:
        return -1
    return int(retention // datetime.timedelta(milliseconds=1))


def handle_offset_commit(ctx: GroupContext, request: Request) -> Any:
    """OffsetCommit v2-v9 (see `offset_commit`; with an authorizer,
    `authorized_offset_commit`)."""
    body = request.body
    return (authorized_offset_commit if ctx.authorizer.enabled else offset_commit)(
        ctx,
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
                    gm.new_commit_partition(
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
    ctx: GroupContext,
    version: int,
    group_id: str | None,
    generation_id_or_member_epoch: int,
    member_id: str,
    group_instance_id: str | None,
    retention_time_ms: int,
    requested: list[tuple[str, list[gm.OffsetCommitPartition]]],
    refused: dict[str, list[tuple[int, ErrorCode]]] | None = None,
) -> Any:
    """OffsetCommit v2-v9, from the decoded request (handle_offset_commit) or from
    fast_paths.py's reading of the frame; `requested` is [(topic, partitions)], `refused`
    the partitions already refused (authorized_offset_commit's). Emits OffsetCommit
    records for accepted partitions. Errors: UNKNOWN_TOPIC_OR_PARTITION (topic or
    partition does not exist, checked here as Kafka's KafkaApis does), INVALID_GROUP_ID
    (null group id), and the shard's errors (offsets.py)."""
    registry = ctx.topics
    # Refused here: unknown topic or partition, [(partition, error)] by topic.
    invalid = refused
    topics: list[gm.OffsetCommitTopic] = []
    for name, partitions in requested:
        topic = registry.get(name)
        if topic is None:
            invalid = invalid or {}
            invalid.setdefault(name, []).extend(
                (p.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in partitions
            )
            continue
        count = len(topic.partitions)
        valid = partitions
        for p in partitions:  # a loop, not a comprehension: every partition valid is usual
            if not 0 <= p.index < count:
                valid = [p for p in partitions if 0 <= p.index < count]
                invalid = invalid or {}
                invalid.setdefault(name, []).extend(
                    (p.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    for p in partitions
                    if not 0 <= p.index < count
                )
                break
        if valid:
            topics.append(gm.new_commit_topic(name, valid, topic.topic_id))
    # No closures here (a function and a cell per captured name, per commit): one object
    # answers what the shard cannot (on_error) and merges in the partitions refused here.
    replies = _CommitReplies(version, topics, invalid)
    if group_id is None:
        return replies(ErrorCode.INVALID_GROUP_ID)
    if not topics:
        return replies.respond([])
    commit = gm.new_commit_request(
        group_id,
        generation_id_or_member_epoch,
        member_id,
        group_instance_id,
        retention_time_ms,
        version,
        topics,
    )
    return ctx.groups.commit_offsets(
        commit,
        ctx.read_at,
        replies.merged if invalid else _COMMIT_ANSWERS.get(version) or _CommitAnswer(version),
        replies,
    )


def authorized_offset_commit(
    ctx: GroupContext,
    version: int,
    group_id: str | None,
    generation_id_or_member_epoch: int,
    member_id: str,
    group_instance_id: str | None,
    retention_time_ms: int,
    requested: list[tuple[str, list[gm.OffsetCommitPartition]]],
) -> Any:
    """OffsetCommit with an authorizer, Kafka's checks before `offset_commit`: without
    READ on the group every partition answers GROUP_AUTHORIZATION_FAILED (the response
    has no top-level error) and nothing is committed; without READ on a topic its
    partitions answer TOPIC_AUTHORIZATION_FAILED, the others are committed (DESCRIBE or
    WRITE on the topic is not enough)."""
    api = ApiKey.OFFSET_COMMIT
    if not allowed(ctx, api, READ, GROUP, group_id or ""):
        denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
        return _commit_response(
            version, [(name, [(p.index, denied) for p in parts]) for name, parts in requested]
        )
    unreadable = {
        name
        for name in dict.fromkeys(name for name, _ in requested)
        if not allowed(ctx, api, READ, TOPIC, name)
    }
    refused = None
    if unreadable:
        refused = {}
        for name, parts in requested:
            if name in unreadable:
                refused.setdefault(name, []).extend(
                    (p.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in parts
                )
        requested = [(name, parts) for name, parts in requested if name not in unreadable]
    return offset_commit(
        ctx,
        version,
        group_id,
        generation_id_or_member_epoch,
        member_id,
        group_instance_id,
        retention_time_ms,
        requested,
        refused,
    )


class _CommitReplies:
    """A commit's response when not every partition went to the shard or the shard could
    not run it: called with an error, every partition sent to the shard fails with it;
    `merged(shard's answer)` adds the partitions refused before the shard
    (UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED)."""

    __slots__ = ("version", "topics", "invalid")

    def __init__(
        self,
        version: int,
        topics: list[gm.OffsetCommitTopic],
        invalid: dict[str, list[tuple[int, ErrorCode]]] | None,
    ) -> None:
        self.version = version
        self.topics = topics
        self.invalid = invalid

    def __call__(self, error: ErrorCode) -> Any:
        return self.respond(
            [(t.name, [(p.index, error) for p in t.partitions]) for t in self.topics]
        )

    def merged(self, r: gm.OffsetCommitResponse) -> Any:
        return self.respond(_commit_results(r))

    def respond(self, results: list[tuple[str, list[tuple[int, ErrorCode]]]]) -> Any:
        if self.invalid:
            # Kafka's order (OffsetCommitResponse.Builder.merge): the partitions refused
            # before the coordinator first, in the request's order, then the coordinator's
            # answer, its partitions added to a topic already listed.
            merged = {name: list(parts) for name, parts in self.invalid.items()}
            for name, parts in results:
                merged.setdefault(name, []).extend(parts)
            results = list(merged.items())
        return _commit_response(self.version, results)


def _commit_results(r: gm.OffsetCommitResponse) -> list[tuple[str, list[tuple[int, ErrorCode]]]]:
    return [(t.name, [(p.index, p.error) for p in t.partitions]) for t in r.topics]


class _CommitAnswer:
    """The OffsetCommitResponse of a version for the shard's answer, when every requested
    partition exists (the usual commit: one topic, one partition, answered from
    _ONE_PARTITION_COMMITS without building a response)."""

    __slots__ = ("version",)

    def __init__(self, version: int) -> None:
        self.version = version

    def __call__(self, r: gm.OffsetCommitResponse) -> Any:
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

# The common commit response: one topic, one partition, by (version, topic, partition, error).
_ONE_PARTITION_COMMITS = EncodedResponses(ApiKey.OFFSET_COMMIT)


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
        return m.OffsetCommitResponse(throttle_time=NO_THROTTLE, topics=topics)
    return m.OffsetCommitResponse(topics=topics)


# -- OffsetFetch -----------------------------------------------------------------------------


def _fetch_one(
    ctx: GroupContext,
    group_id: str,
    topics: Any,
    require_stable: bool,
    member_id: str | None,
    member_epoch: int,
) -> Any:
    """Returns gm.OffsetFetchResponse, or a future of it."""
    wanted = (
        None
        if topics is None
        else [gm.OffsetFetchTopic(t.name, list(t.partition_indexes)) for t in topics]
    )
    if ctx.authorizer.enabled:
        return _authorized_fetch_one(ctx, group_id, wanted, require_stable, member_id, member_epoch)
    return _fetch(ctx, group_id, wanted, require_stable, member_id, member_epoch, _same)


def _same(answer: gm.OffsetFetchResponse) -> gm.OffsetFetchResponse:
    return answer


def _fetch(
    ctx: GroupContext,
    group_id: str,
    wanted: list[gm.OffsetFetchTopic] | None,
    require_stable: bool,
    member_id: str | None,
    member_epoch: int,
    respond: Callable[[gm.OffsetFetchResponse], gm.OffsetFetchResponse],
) -> Any:
    """The group coordinator's answer for one group, passed through `respond`."""
    fetch = gm.OffsetFetchRequest(
        group_id=group_id,
        topics=wanted,
        require_stable=require_stable,
        member_id=member_id,
        member_epoch=member_epoch,
    )
    return ctx.groups.fetch_offsets(
        fetch, ctx.read_at, respond, lambda error: gm.OffsetFetchResponse(group_id, [], error)
    )


def _authorized_fetch_one(
    ctx: GroupContext,
    group_id: str,
    wanted: list[gm.OffsetFetchTopic] | None,
    require_stable: bool,
    member_id: str | None,
    member_epoch: int,
) -> Any:
    """One group's OffsetFetch with Kafka's checks: without DESCRIBE on the group, the
    group's error GROUP_AUTHORIZATION_FAILED; requested topics the principal may not
    DESCRIBE answer TOPIC_AUTHORIZATION_FAILED per partition (offset -1, after the
    others); asked for all topics, those it may not DESCRIBE are left out silently."""
    api = ApiKey.OFFSET_FETCH
    if not allowed(ctx, api, DESCRIBE, GROUP, group_id):
        return gm.OffsetFetchResponse(group_id, [], ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused: list[gm.OffsetFetchTopic] = []
    if wanted is not None:
        hidden = {t.name for t in wanted if not allowed(ctx, api, DESCRIBE, TOPIC, t.name)}
        refused = [t for t in wanted if t.name in hidden]
        wanted = [t for t in wanted if t.name not in hidden]

    def respond(answer: gm.OffsetFetchResponse) -> gm.OffsetFetchResponse:
        topics = answer.topics
        if wanted is None:
            topics = [t for t in topics if visible(ctx, DESCRIBE, TOPIC, t.name)]
        elif refused and answer.error == ErrorCode.NONE:
            denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            topics = topics + [
                gm.OffsetFetchTopicResult(
                    t.name, None, [gm.OffsetFetchPartition(i, error=denied) for i in t.partitions]
                )
                for t in refused
            ]
        return gm.OffsetFetchResponse(answer.group_id, topics, answer.error)

    return _fetch(ctx, group_id, wanted, require_stable, member_id, member_epoch, respond)


def handle_offset_fetch(ctx: GroupContext, request: Request) -> Any:
    """OffsetFetch v1-v9 (v8+: several groups). Writes nothing. A missing group answers
    offset -1 for each requested partition, no error (client-compat 13). Errors:
    COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR per group, INVALID_GROUP_ID; with an
    authorizer GROUP_AUTHORIZATION_FAILED and TOPIC_AUTHORIZATION_FAILED
    (_authorized_fetch_one)."""
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.OFFSET_FETCH, version)
    if version >= 8:
        parts = [
            _fetch_one(
                ctx,
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
                ctx, body.group_id, body.topics, getattr(body, "require_stable", False), None, -1
            )
        ]

    def respond(answers: list[gm.OffsetFetchResponse]) -> Any:
        partition_cls = entity_class(
            m, "OffsetFetchResponsePartitions", "OffsetFetchResponsePartition"
        )
        topic_cls = entity_class(m, "OffsetFetchResponseTopics", "OffsetFetchResponseTopic")

        def topics_of(answer: gm.OffsetFetchResponse) -> tuple[Any, ...]:
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
            answer = gm.OffsetFetchResponse(
                answer.group_id,
                [
                    gm.OffsetFetchTopicResult(
                        t.name,
                        None,
                        [
                            gm.OffsetFetchPartition(i, error=answer.error)
                            for i in t.partition_indexes
                        ],
                    )
                    for t in body.topics
                ],
                answer.error,
            )
        return build(m.OffsetFetchResponse, topics=topics_of(answer), error_code=answer.error)

    return when_all(parts, respond)


# -- OffsetDelete ----------------------------------------------------------------------------


def handle_offset_delete(ctx: GroupContext, request: Request) -> Any:
    """OffsetDelete v0. Emits tombstones for the deleted offsets. Errors: top-level
    GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, INVALID_GROUP_ID; per partition
    GROUP_SUBSCRIBED_TO_TOPIC, UNKNOWN_TOPIC_OR_PARTITION (no such topic or partition).
    With an authorizer (Kafka's): GROUP_AUTHORIZATION_FAILED (top level, nothing deleted)
    without DELETE on the group; TOPIC_AUTHORIZATION_FAILED per partition without READ on
    its topic."""
    body = request.body
    m = response_types(ApiKey.OFFSET_DELETE, request.api_version)
    registry = ctx.topics
    wanted: dict[str, list[int]] = {}
    invalid: dict[str, list[tuple[int, ErrorCode]]] = {}
    unreadable: set[str] = set()
    if ctx.authorizer.enabled:
        api = ApiKey.OFFSET_DELETE
        if not allowed(ctx, api, DELETE, GROUP, body.group_id):
            return build(
                m.OffsetDeleteResponse, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=()
            )
        unreadable = {
            n
            for n in dict.fromkeys(t.name for t in body.topics)
            if not allowed(ctx, api, READ, TOPIC, n)
        }
    for t in body.topics:
        topic = registry.get(t.name)
        for p in t.partitions:
            if t.name in unreadable:
                invalid.setdefault(t.name, []).append(
                    (p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                )
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                invalid.setdefault(t.name, []).append(
                    (p.partition_index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                )
            else:
                wanted.setdefault(t.name, []).append(p.partition_index)

    def respond(answer: gm.OffsetDeleteResponse) -> Any:
        merged: dict[str, list[tuple[int, ErrorCode]]] = {}
        for t in answer.topics:
            merged.setdefault(t.name, []).extend((p.index, p.error) for p in t.partitions)
        if answer.error == ErrorCode.NONE:
            for name, refused in invalid.items():
                merged.setdefault(name, []).extend(refused)
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

    return ctx.groups.delete_offsets(
        body.group_id,
        wanted,
        ctx.read_at,
        respond,
        lambda error: respond(gm.OffsetDeleteResponse(error, [])),
    )

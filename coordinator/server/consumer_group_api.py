"""The consumer rebalance protocol's APIs (KIP-848): ConsumerGroupHeartbeat v0-v1 and
ConsumerGroupDescribe v0-v1, from kio requests to the shard's messages, run through the
gateway, and the shard's answers back to kio responses of the request's version.

A steady heartbeat's answer (no error, no assignment) repeats for the member until its
epoch moves: it is encoded once and reused, and steady v1 heartbeats come from the raw
frame (fast_paths.py) through the gateway's steady path, skipping the codec.
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

from groupcoord.protocol.acl_operations import GROUP_OPERATIONS_ALL
from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime import group_messages as gm
from ..topics.access import DESCRIBE, GROUP, READ, TOPIC, allowed, operations_bitfield, visible
from .context import GroupContext
from .encoded_responses import NO_THROTTLE, EncodedResponses, ms

# Encoded steady ConsumerGroupHeartbeat answers by (version, member, epoch, interval).
_STEADY_HEARTBEATS = EncodedResponses(ApiKey.CONSUMER_GROUP_HEARTBEAT)


@functools.lru_cache(maxsize=64)
def _interval(interval_ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=interval_ms)


def consumer_heartbeat_response(version: int, r: gm.ConsumerHeartbeatResponse) -> Any:
    """The ConsumerGroupHeartbeat response of `version` for the shard's answer. A steady
    answer (no error, no assignment) repeats for the member until its epoch moves, so it
    is encoded once and kept (bounded)."""
    if r.assignment is None and r.error_code == ErrorCode.NONE and r.member_id is not None:
        return _STEADY_HEARTBEATS.get(
            (version, r.member_id, r.member_epoch, r.heartbeat_interval_ms),
            lambda: _heartbeat_entity(version, r),
        )
    return _heartbeat_entity(version, r)


def _heartbeat_entity(version: int, r: gm.ConsumerHeartbeatResponse) -> Any:
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
        throttle_time=NO_THROTTLE,
        error_code=r.error_code,
        error_message=r.error_message,
        member_id=r.member_id,
        member_epoch=r.member_epoch,
        heartbeat_interval=_interval(r.heartbeat_interval_ms),
        assignment=assignment,
    )


class HeartbeatAnswers:
    """The ConsumerGroupHeartbeat response of one version: `respond(shard's answer)` and
    `failed(error)`, made once per version (the gateway's callbacks of every heartbeat,
    with no closure per request)."""

    __slots__ = ("version", "respond", "failed")

    def __init__(self, version: int) -> None:
        self.version = version
        self.respond = self._respond  # bound once
        self.failed = self._failed

    def _respond(self, r: gm.ConsumerHeartbeatResponse) -> Any:
        return consumer_heartbeat_response(self.version, r)

    def _failed(self, error: ErrorCode) -> Any:
        return consumer_heartbeat_response(
            self.version, gm.ConsumerHeartbeatResponse(error_code=error)
        )


# One per ConsumerGroupHeartbeat version served.
HEARTBEAT_ANSWERS = {version: HeartbeatAnswers(version) for version in (0, 1)}


def handle_consumer_group_heartbeat(ctx: GroupContext, request: Request) -> Any:
    """ConsumerGroupHeartbeat v0-v1 (KIP-848). Emits the consumer-group records the shard's
    pipeline writes (consumer/manager.py); the response goes after they are durable. Errors
    (top level, with Kafka's messages): INVALID_REQUEST, UNSUPPORTED_ASSIGNOR,
    GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
    FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID, INVALID_REGULAR_EXPRESSION,
    UNKNOWN_SERVER_ERROR, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR; with an authorizer
    GROUP_AUTHORIZATION_FAILED (no READ on the group) and TOPIC_AUTHORIZATION_FAILED (a
    subscribed name it may not DESCRIBE), a regex's topics filtered to those it may
    DESCRIBE (regex_refresh.py). Steady v1
    heartbeats rarely get here (fast_paths.py answers them from the raw frame); the shard's
    heartbeat tries its steady path first anyway."""
    body = request.body
    version = request.api_version
    owned = body.topic_partitions
    names = body.subscribed_topic_names
    beat = gm.ConsumerHeartbeatRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=ms(body.rebalance_timeout),
        subscribed_topic_names=None if names is None else list(names),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        topic_partitions=None
        if owned is None
        else [(tp.topic_id, list(tp.partitions)) for tp in owned],
        api_version=version,
        client_id=request.header.client_id or "",
        client_host=ctx.client_host,
    )
    answers = HEARTBEAT_ANSWERS[version]
    if ctx.authorizer.enabled:
        refused = _refused_heartbeat(ctx, body.group_id, names)
        if refused is not None:
            return answers.failed(refused)
        beat.topic_visible = functools.partial(visible, ctx, DESCRIBE, TOPIC)
    return ctx.groups.consumer_group_heartbeat(beat, ctx.read_at, answers.respond, answers.failed)


def _refused_heartbeat(ctx: GroupContext, group_id: str, names: Any) -> ErrorCode | None:
    """Kafka's checks of a ConsumerGroupHeartbeat: READ on the group, then DESCRIBE on
    every subscribed topic name (existing or not; no partial answer)."""
    api = ApiKey.CONSUMER_GROUP_HEARTBEAT
    if not allowed(ctx, api, READ, GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if names and not all([allowed(ctx, api, DESCRIBE, TOPIC, n) for n in dict.fromkeys(names)]):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return None


def handle_consumer_group_describe(ctx: GroupContext, request: Request) -> Any:
    """ConsumerGroupDescribe v0-v1: reads the groups' state; writes nothing. The groups of
    each shard are described by one event on that shard (consumer describe_groups): a read
    after pending writes, answered once the writes before it are durable, as Kafka reads at
    the last committed offset (D.2). Per group: GROUP_ID_NOT_FOUND for a missing or classic
    group (with Kafka's message), INVALID_GROUP_ID for "", COORDINATOR_LOAD_IN_PROGRESS /
    NOT_COORDINATOR while its shard is not active, NOT_COORDINATOR when a write before it
    failed; with an authorizer GROUP_AUTHORIZATION_FAILED (no DESCRIBE on the group, not
    read) and TOPIC_AUTHORIZATION_FAILED (a member's topic it may not DESCRIBE)."""
    m = response_types(ApiKey.CONSUMER_GROUP_DESCRIBE, request.api_version)
    include_ops = request.body.include_authorized_operations
    group_ids = list(request.body.group_ids)
    enabled = ctx.authorizer.enabled
    refused: set[str] = set()
    if enabled:
        refused = {
            g
            for g in dict.fromkeys(group_ids)
            if g and not allowed(ctx, ApiKey.CONSUMER_GROUP_DESCRIBE, DESCRIBE, GROUP, g)
        }

    def assignment(topics: list[gm.DescribedTopicPartitions]) -> Any:
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

    def described_group(group_id: str, described: gm.DescribedConsumerGroup) -> Any:
        if enabled and described.error_code == ErrorCode.NONE:
            described = _hiding_topics(ctx, described)
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
            # No authorizer: everything a group supports is allowed, as Kafka reports it.
            authorized_operations=operations_bitfield(ctx, GROUP, group_id, GROUP_OPERATIONS_ALL)
            if include_ops and described.error_code == ErrorCode.NONE
            else -(2**31),
        )

    def respond(described: dict[str, gm.DescribedConsumerGroup | ErrorCode]) -> Any:
        invalid = gm.DescribedConsumerGroup(
            "", ErrorCode.INVALID_GROUP_ID, "Group ID can't be empty."
        )
        denied = gm.DescribedConsumerGroup("", ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return build(
            m.ConsumerGroupDescribeResponse,
            groups=tuple(
                described_group(
                    g,
                    invalid
                    if not g
                    else denied
                    if g in refused
                    else _described_or_error(g, described[g]),
                )
                for g in group_ids
            ),
        )

    return ctx.groups.consumer_group_describe(
        (g for g in group_ids if g and g not in refused), ctx.read_at, respond
    )


_HIDDEN_TOPICS_MESSAGE = (
    "The group has described topic(s) that the client is not authorized to describe."
)


def _hiding_topics(
    ctx: GroupContext, described: gm.DescribedConsumerGroup
) -> gm.DescribedConsumerGroup:
    """Kafka's: a group whose members' assignments or target assignments name a topic the
    principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED, without members."""
    names = {
        p.topic_name
        for x in described.members
        for topics in (x.assignment, x.target_assignment)
        for p in topics
    }
    for name in names:
        if not allowed(ctx, ApiKey.CONSUMER_GROUP_DESCRIBE, DESCRIBE, TOPIC, name):
            return gm.DescribedConsumerGroup(
                described.group_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, _HIDDEN_TOPICS_MESSAGE
            )
    return described


def _described_or_error(
    group_id: str, answer: gm.DescribedConsumerGroup | ErrorCode
) -> gm.DescribedConsumerGroup:
    """The group's description, or one with its shard's error."""
    if isinstance(answer, ErrorCode):
        return gm.DescribedConsumerGroup(group_id, answer)
    return answer

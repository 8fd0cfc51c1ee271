"""Topic administration: CreateTopics v2-v7, DeleteTopics v1-v6, CreatePartitions v0-v3 and
DescribeConfigs v1-v4, answered as a single-node Kafka cluster would.

Replication is fixed at one replica on this node: a replication factor other than 1 (or -1,
"the default") and a manual assignment naming any other broker are refused. Topic configs
are the Kafka names in `configs.TOPIC_CONFIGS`; an unset one takes its value from the broker
setting it maps to (retention.ms <- log_retention_ms, ...), which DescribeConfigs reports
with Kafka's config sources: 1 (topic override), 4 (broker setting changed from its
default, i.e. static broker config) or 5 (default).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from groupcoord.protocol.api import ZERO_UUID, ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..config import Config
from ..observability.logging import get_logger
from ..runtime.partitioning import INTERNAL_TOPIC_NAMES
from ..security.acl_model import CLUSTER_NAME
from .access import (
    ALTER,
    CLUSTER,
    CREATE,
    DELETE,
    DENIED_MESSAGES,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    TOPIC,
    allowed,
    config_resource_denied,
    visible,
)
from .configs import TOPIC_CONFIG_BROKER_NAMES, TOPIC_CONFIGS, ConfigSpec
from .context import TopicsContext
from .kafka_broker_configs import DYNAMIC_BROKER_CONFIGS
from .registry import Topic, TopicError, check_topic_name, collision_key

log = get_logger("groupcoord.admin")

# An internal topic is the coordinator's own state (topics/internal_topics.py): Kafka 4.4
# (without an authorizer) deletes it or adds partitions to it when asked; its partition count
# is the shard count here, fixed by the data directory (runtime/shard_count.py).
_INTERNAL_REFUSED = "Cannot {verb} internal topic {name}: it holds the coordinator's state."

# DescribeConfigs ConfigSource values.
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG
SOURCE_BROKER = 2  # DYNAMIC_BROKER_CONFIG
SOURCE_CLUSTER_DEFAULT = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
SOURCE_STATIC_BROKER = 4  # STATIC_BROKER_CONFIG
SOURCE_DEFAULT = 5  # DEFAULT_CONFIG
SOURCE_GROUP = 8  # DYNAMIC_GROUP_CONFIG

# DescribeConfigs ConfigType values (v3+).
CONFIG_TYPES = {
    "BOOLEAN": 1,
    "STRING": 2,
    "INT": 3,
    "SHORT": 4,
    "LONG": 5,
    "DOUBLE": 6,
    "LIST": 7,
    "CLASS": 8,
    "PASSWORD": 9,
}

# ConfigResource types.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
_RESOURCE_NAMES = {
    RESOURCE_BROKER_LOGGER: "BROKER_LOGGER",
    RESOURCE_CLIENT_METRICS: "CLIENT_METRICS",
    RESOURCE_GROUP: "GROUP",
}

# Topic configs a Kafka 4 cluster holds as a dynamic cluster-wide default from its start.
_CLUSTER_DEFAULTS = frozenset({"min.insync.replicas"})
# Topic configs whose broker synonym Kafka leaves unset: DescribeConfigs lists no synonym
# but the topic's own override.
_NO_BROKER_SYNONYM = frozenset(
    {
        "errors.deadletterqueue.group.enable",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "remote.storage.enable",
        "segment.jitter.ms",
    }
)

_CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Config)}
_CONFIG_HELP = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(Config)}


def _text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _setting_source(config: Config, setting: str | None) -> int:
    """STATIC_BROKER_CONFIG when the server was configured with a non-default value."""
    if setting is not None and getattr(config, setting) != _CONFIG_DEFAULTS[setting]:
        return SOURCE_STATIC_BROKER
    return SOURCE_DEFAULT


@dataclass(frozen=True)
class _Entry:
    """One described config: what CreateTopics v5+ and DescribeConfigs both report."""

    name: str
    value: str
    source: int
    kind: str
    doc: str
    read_only: bool
    synonyms: tuple[tuple[str, str, int], ...]  # (name, value, source), most specific first


def _topic_entry(spec: ConfigSpec, topic: Topic, config: Config) -> _Entry:
    override = topic.configs.get(spec.name)
    broker_name = TOPIC_CONFIG_BROKER_NAMES.get(spec.name, spec.name)
    broker_value = spec.default(config)
    broker_source = _setting_source(config, spec.broker_setting)
    synonyms: list[tuple[str, str, int]] = []
    if override is not None:
        synonyms.append((spec.name, override, SOURCE_TOPIC))
    if spec.name in _CLUSTER_DEFAULTS and broker_source == SOURCE_DEFAULT:
        # Kafka 4's storage format writes min.insync.replicas as a cluster-wide dynamic
        # default (for eligible leader replicas): the reference broker reports it so.
        synonyms.append((broker_name, broker_value, SOURCE_CLUSTER_DEFAULT))
        broker_source = SOURCE_CLUSTER_DEFAULT
    if spec.name not in _NO_BROKER_SYNONYM:
        synonyms.append((broker_name, broker_value, _setting_source(config, spec.broker_setting)))
    if override is not None:
        value, source = override, SOURCE_TOPIC
    else:
        value, source = broker_value, broker_source
    return _Entry(spec.name, value, source, spec.kind, spec.doc, False, tuple(synonyms))


def group_config_entries(ctx: TopicsContext, group_id: str) -> list[_Entry]:
    """A group's configs: its dynamic override (source DYNAMIC_GROUP_CONFIG) else the
    broker's value (Kafka's group.* name as synonym)."""
    entries = []
    for c in ctx.groups.group_configs(group_id):
        broker = ("group." + c.name, c.broker_value, SOURCE_DEFAULT)
        if c.overridden:
            synonyms = ((c.name, c.value, SOURCE_GROUP), broker)
            entries.append(_Entry(c.name, c.value, SOURCE_GROUP, c.kind, c.doc, False, synonyms))
        else:
            entries.append(
                _Entry(c.name, c.broker_value, SOURCE_DEFAULT, c.kind, c.doc, False, (broker,))
            )
    return entries


def topic_config_entries(topic: Topic, config: Config) -> list[_Entry]:
    return [_topic_entry(TOPIC_CONFIGS[name], topic, config) for name in sorted(TOPIC_CONFIGS)]


@dataclass(frozen=True)
class _BrokerConfig:
    name: str
    kind: str
    setting: str | None  # the Config field it reflects (for its source and documentation)
    value: Callable[[TopicsContext], str]
    doc: str = ""


def _setting(name: str, kind: str, setting: str) -> _BrokerConfig:
    return _BrokerConfig(
        name,
        kind,
        setting,
        lambda ctx: _text(getattr(ctx.settings, setting)),
        _CONFIG_HELP[setting],
    )


def _fixed(name: str, kind: str, value: str, doc: str) -> _BrokerConfig:
    return _BrokerConfig(name, kind, None, lambda _ctx: value, doc)


BROKER_CONFIGS: tuple[_BrokerConfig, ...] = (
    _setting("auto.create.topics.enable", "BOOLEAN", "auto_create_topics"),
    _BrokerConfig(
        "advertised.listeners",
        "STRING",
        "advertised_listener",
        # The address of the listener the request came in on (the others are not told).
        lambda ctx: f"{ctx.listener_name}://{ctx.node.host}:{ctx.node.port}",
        _CONFIG_HELP["advertised_listener"],
    ),
    _setting("broker.id", "INT", "node_id"),
    _fixed("default.replication.factor", "INT", "1", "Every partition has one replica."),
    _fixed("log.cleanup.policy", "LIST", "delete", "Topics' default cleanup.policy."),
    _setting("log.cleaner.backoff.ms", "LONG", "log_cleaner_interval_ms"),
    _setting("log.dirs", "STRING", "data_dir"),
    _setting("log.message.timestamp.after.max.ms", "LONG", "log_message_timestamp_after_max_ms"),
    _setting("log.message.timestamp.before.max.ms", "LONG", "log_message_timestamp_before_max_ms"),
    _setting("log.message.timestamp.type", "STRING", "log_message_timestamp_type"),
    _setting("log.retention.bytes", "LONG", "log_retention_bytes"),
    _setting("log.retention.check.interval.ms", "LONG", "log_retention_check_interval_ms"),
    _setting("log.retention.ms", "LONG", "log_retention_ms"),
    _setting("log.roll.ms", "LONG", "log_segment_ms"),
    _setting("log.segment.bytes", "INT", "log_segment_bytes"),
    _BrokerConfig(
        "listeners",
        "STRING",
        "listen",
        lambda ctx: ctx.settings.listeners or f"PLAINTEXT://{ctx.settings.listen}",
        _CONFIG_HELP["listen"],
    ),
    _setting("max.connections", "INT", "connections_max"),
    _setting("message.max.bytes", "INT", "message_bytes_max"),
    _fixed("min.insync.replicas", "INT", "1", "A single node is always in sync."),
    _setting("node.id", "INT", "node_id"),
    _setting("num.partitions", "INT", "default_partitions"),
    _setting("offsets.topic.num.partitions", "INT", "offsets_partitions"),
    _fixed("offsets.topic.replication.factor", "SHORT", "1", "Offsets have one replica."),
    _setting("socket.request.max.bytes", "INT", "frame_bytes_max"),
)


def broker_config_entries(ctx: TopicsContext) -> list[_Entry]:
    """This broker's configs: the server's settings under Kafka's names (read-only unless
    Kafka updates them dynamically), each replaced by its dynamic value where one is set
    (source DYNAMIC_BROKER_CONFIG on this broker's resource, DYNAMIC_DEFAULT_BROKER_CONFIG
    on the cluster default ""), then the other dynamic configs set, in Kafka's order of
    precedence in the synonyms."""
    dynamic = ctx.topics.dynamic_broker_configs()
    defaults = ctx.topics.broker_configs.overrides("")
    entries = []
    described = set()
    for bc in BROKER_CONFIGS:
        described.add(bc.name)
        value = bc.value(ctx)
        source = _setting_source(ctx.settings, bc.setting)
        synonyms = _dynamic_synonyms(ctx, bc.name, defaults) + [(bc.name, value, source)]
        if bc.name in dynamic:
            value, source = synonyms[0][1], synonyms[0][2]
        read_only = bc.name not in DYNAMIC_BROKER_CONFIGS
        entries.append(_Entry(bc.name, value, source, bc.kind, bc.doc, read_only, tuple(synonyms)))
    for name in sorted(set(dynamic) - described):
        kind = DYNAMIC_BROKER_CONFIGS.get(name)
        if kind is None:
            continue  # unknown to Kafka: kept, not described (as Kafka does)
        synonyms = _dynamic_synonyms(ctx, name, defaults)
        entries.append(
            _Entry(name, synonyms[0][1], synonyms[0][2], kind, "", False, tuple(synonyms))
        )
    return entries


def _dynamic_synonyms(
    ctx: TopicsContext, name: str, defaults: Mapping[str, str]
) -> list[tuple[str, str, int]]:
    own = ctx.topics.broker_configs.overrides(str(ctx.node.node_id))
    synonyms = []
    if name in own:
        synonyms.append((name, own[name], SOURCE_BROKER))
    if name in defaults:
        synonyms.append((name, defaults[name], SOURCE_CLUSTER_DEFAULT))
    return synonyms


# CreateTopics -------------------------------------------------------------------------------


async def handle_create_topics(ctx: TopicsContext, request: Request) -> Any:
    """Creates each topic (or only checks it, validate_only) with one replica per partition on
    this node. Emits per topic the error, and from v5 the partition count, replication factor
    1 and every topic config with its value and source (an array, also for validate_only;
    -1/-1 and an empty array on error), and from v7 the topic id.
    Errors per topic: INVALID_REQUEST (named twice in the request; manual assignment together
    with a partition count or replication factor), INVALID_TOPIC_EXCEPTION (an illegal name, or
    one colliding with an existing topic or one earlier in the request once '.' and '_' are
    unified, as Kafka: "Topic 'a_b' collides with existing topics: a.b"), TOPIC_ALREADY_EXISTS,
    INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR (not -1 or 1), INVALID_REPLICA_ASSIGNMENT
    (a broker other than this node, or partitions not numbered 0..n-1), INVALID_CONFIG (also a
    number outside its Kafka type, e.g. segment.bytes above a Java int), UNKNOWN_SERVER_ERROR
    (the disk write failed, or a bug: nothing of that topic is left, and the other topics in
    the request are still created). Each topic's logs are opened in steps, after the topic
    changes before it (TopicRegistry.create_in_steps), so other requests are served meanwhile."""
    body = request.body
    m = response_types(ApiKey.CREATE_TOPICS, request.api_version)
    counts = Counter(t.name for t in body.topics)
    results = []
    answered: set[str] = set()
    # Names accepted earlier in this request, by collision key: a later colliding name is
    # refused as if the earlier topic existed -- also for validate_only, which creates none.
    accepted: dict[str, str] = {}
    # With an authorizer: CREATE on the cluster (a silent probe) allows every topic, else
    # CREATE on each topic (Kafka's).
    may_create = visible(ctx, CREATE, CLUSTER, CLUSTER_NAME) if ctx.authorizer.enabled else None
    for creatable in body.topics:
        name = creatable.name
        if name in answered:
            continue
        answered.add(name)
        if counts[name] > 1:
            results.append(
                _create_error(m, name, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            )
            continue
        if may_create is not None and not (
            may_create or allowed(ctx, ApiKey.CREATE_TOPICS, CREATE, TOPIC, name)
        ):
            results.append(
                _create_error(
                    m, name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
                )
            )
            continue
        try:
            topic, partitions = await _create_topic(ctx, creatable, body.validate_only, accepted)
        except TopicError as e:
            results.append(_create_error(m, name, ErrorCode(e.code), e.message))
            continue
        except Exception as e:
            # As Kafka's per-topic catch-all, a failure is this topic's answer, not the whole
            # request's (the registry undid whatever it had begun for the topic).
            _log_failure("create topic failed", name, e)
            results.append(
                _create_error(
                    m, name, ErrorCode.UNKNOWN_SERVER_ERROR, f"Creating topic '{name}' failed: {e}"
                )
            )
            continue
        configs = (
            tuple(
                build(
                    m.CreatableTopicConfigs,
                    name=e.name,
                    value=e.value,
                    read_only=e.read_only,
                    config_source=e.source,
                    is_sensitive=False,
                )
                for e in topic_config_entries(topic, ctx.topics.config)
            )
            if request.api_version >= 5
            else ()
        )
        accepted[collision_key(name)] = name
        if not body.validate_only:
            log.info("created topic", topic=name, partitions=partitions)
        results.append(
            build(
                m.CreatableTopicResult,
                name=name,
                # A validate_only topic was never created: it has no id.
                topic_id=ZERO_UUID if body.validate_only else topic.topic_id,
                error_code=ErrorCode.NONE,
                error_message=None,
                num_partitions=partitions,
                replication_factor=1,
                configs=configs,
            )
        )
    return build(m.CreateTopicsResponse, topics=tuple(results))


def _log_failure(event: str, topic: str, e: Exception) -> None:
    """Log a topic change that failed: an OSError is the disk failing (an error, its message
    enough), anything else a bug (with its traceback). Call it inside the except block."""
    if isinstance(e, OSError):
        log.error(event, topic=topic, error=str(e))
    else:
        log.exception(event, topic=topic)


def _create_error(m: Any, name: str, code: ErrorCode, message: str) -> Any:
    return build(
        m.CreatableTopicResult,
        name=name,
        topic_id=ZERO_UUID,
        error_code=code,
        error_message=message,
        num_partitions=-1,
        replication_factor=-1,
        configs=(),
    )


async def _create_topic(
    ctx: TopicsContext, creatable: Any, validate_only: bool, accepted: Mapping[str, str]
) -> tuple[Topic, int]:
    """Checks in Kafka's order (name, existence, collision with existing topics or the
    `accepted` ones of this request, assignment or counts, configs), then creates. Returns
    the topic and its partition count."""
    name = creatable.name
    check_topic_name(name)
    # The internal topics exist as the coordinators' shard logs (internal_topics.py).
    if ctx.topics.get(name) is not None or name in INTERNAL_TOPIC_NAMES:
        raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    ctx.topics.check_collision(name)
    earlier = accepted.get(collision_key(name))
    if earlier is not None:
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topics: {earlier}",
        )
    partitions = creatable.num_partitions
    replication = creatable.replication_factor
    if creatable.assignments:
        if replication != -1:
            raise TopicError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was "
                "specified, but replication factor was not set to -1.",
            )
        if partitions != -1:
            raise TopicError(
                ErrorCode.INVALID_REQUEST,
                "A manual partition assignment was specified, but numPartitions was not set to -1.",
            )
        indexes = sorted(a.partition_index for a in creatable.assignments)
        if indexes != list(range(len(indexes))):
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "Partitions should be a consecutive 0-based integer sequence.",
            )
        for assignment in creatable.assignments:
            _check_replicas(ctx.node.node_id, assignment.broker_ids)
        partitions = len(indexes)
    else:
        if replication != -1 and replication <= 0:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        if replication > 1:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor {replication} larger than available brokers 1",
            )
        if partitions == -1:
            partitions = ctx.settings.default_partitions
        elif partitions <= 0:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            )
    configs = {c.name: c.value for c in creatable.configs}
    topic = await ctx.topics.create_in_steps(name, partitions, configs, validate_only=validate_only)
    return topic, partitions


def _check_replicas(node: int, broker_ids: tuple[int, ...]) -> None:
    if not broker_ids:
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    for broker in broker_ids:
        if broker != node:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition "
                f"assignment includes broker {broker}, but no such broker is "
                "registered.",
            )
    if len(broker_ids) > 1:
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes the broker {node} more than once.",
        )


# DeleteTopics -------------------------------------------------------------------------------


async def handle_delete_topics(ctx: TopicsContext, request: Request) -> Any:
    """Deletes topics named in topic_names (v1-v5) or in topics by name or by id (v6), closing
    their logs and removing their data; then every coordinator shard tombstones the groups'
    offsets of those topics, as Kafka's onPartitionsDeleted. Emits per topic its name, id
    (v6) and error.
    Errors per topic: UNKNOWN_TOPIC_OR_PARTITION (by name), UNKNOWN_TOPIC_ID (by id),
    INVALID_REQUEST (named twice, both or neither of name and id given),
    INVALID_TOPIC_EXCEPTION (an internal topic: _INTERNAL_REFUSED says why),
    UNKNOWN_SERVER_ERROR (removing the data failed). Logs are closed and removed in steps
    (TopicRegistry.delete_in_steps)."""
    body = request.body
    m = response_types(ApiKey.DELETE_TOPICS, request.api_version)
    if request.api_version >= 6:
        wanted: list[tuple[str | None, uuid.UUID]] = [
            (t.name, t.topic_id or ZERO_UUID) for t in body.topics
        ]
    else:
        wanted = [(name, ZERO_UUID) for name in body.topic_names]

    def result(name: str | None, topic_id: uuid.UUID, code: ErrorCode, message: str | None) -> Any:
        return build(
            m.DeletableTopicResult,
            name=name,
            topic_id=topic_id,
            error_code=code,
            error_message=message,
        )

    names = Counter(name for name, topic_id in wanted if name is not None and topic_id == ZERO_UUID)
    ids = Counter(topic_id for name, topic_id in wanted if name is None and topic_id != ZERO_UUID)
    results = []
    answered: set[object] = set()
    deleted: dict[str, uuid.UUID] = {}  # their groups' offsets go too (topics_deleted)
    # With an authorizer: DELETE on the cluster (silent) allows every topic, else DESCRIBE
    # and DELETE on each (Kafka's); by name refused before existence is checked.
    check = ctx.authorizer.enabled and not visible(ctx, DELETE, CLUSTER, CLUSTER_NAME)

    def deletable(topic_name: str) -> bool:
        api = ApiKey.DELETE_TOPICS
        return allowed(ctx, api, DESCRIBE, TOPIC, topic_name) and allowed(
            ctx, api, DELETE, TOPIC, topic_name
        )

    for name, topic_id in wanted:
        if name is not None and topic_id != ZERO_UUID:
            results.append(
                result(
                    name,
                    topic_id,
                    ErrorCode.INVALID_REQUEST,
                    "You may not specify both topic name and topic id.",
                )
            )
            continue
        if name is None and topic_id == ZERO_UUID:
            results.append(
                result(
                    None,
                    ZERO_UUID,
                    ErrorCode.INVALID_REQUEST,
                    "Neither topic name nor id were specified.",
                )
            )
            continue
        key: object = name if name is not None else topic_id
        if key in answered:
            continue
        answered.add(key)
        if name is not None:
            if names[name] > 1:
                results.append(
                    result(name, ZERO_UUID, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
                )
                continue
            if check and not deletable(name):
                results.append(result(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
                continue
            topic = ctx.topics.get(name)
            if topic is None:
                results.append(
                    result(
                        name,
                        ZERO_UUID,
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        "This server does not host this topic-partition.",
                    )
                )
                continue
        else:
            if ids[topic_id] > 1:
                results.append(
                    result(None, topic_id, ErrorCode.INVALID_REQUEST, "Duplicate topic id.")
                )
                continue
            topic = ctx.topics.get_by_id(topic_id)
            if topic is None:
                results.append(
                    result(
                        None,
                        topic_id,
                        ErrorCode.UNKNOWN_TOPIC_ID,
                        "This server does not host this topic ID.",
                    )
                )
                continue
            if check and not deletable(topic.name):
                shown = topic.name if visible(ctx, DESCRIBE, TOPIC, topic.name) else None
                results.append(result(shown, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
                continue
        if topic.internal:
            results.append(
                result(
                    name,
                    ZERO_UUID if name is not None else topic.topic_id,
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    _INTERNAL_REFUSED.format(verb="delete", name=topic.name),
                )
            )
            continue
        try:
            await ctx.topics.delete_in_steps(topic)
        except TopicError as e:  # a request before this one deleted it meanwhile
            results.append(result(topic.name, topic.topic_id, ErrorCode(e.code), e.message))
            continue
        except OSError as e:
            log.error("delete topic failed", topic=topic.name, error=str(e))
            results.append(
                result(
                    topic.name,
                    topic.topic_id,
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"Deleting topic '{topic.name}' failed: {e}",
                )
            )
            continue
        log.info("deleted topic", topic=topic.name)
        deleted[topic.name] = topic.topic_id
        results.append(result(topic.name, topic.topic_id, ErrorCode.NONE, None))
    if deleted:
        ctx.groups.topics_deleted(deleted)
    return build(m.DeleteTopicsResponse, responses=tuple(results))


# CreatePartitions ---------------------------------------------------------------------------


async def handle_create_partitions(ctx: TopicsContext, request: Request) -> Any:
    """Raises each topic's partition count to `count` (validate_only: only checks). Emits per
    topic its error and message.
    Errors per topic: INVALID_REQUEST (named twice), UNKNOWN_TOPIC_OR_PARTITION,
    INVALID_TOPIC_EXCEPTION (an internal topic: _INTERNAL_REFUSED says why),
    INVALID_PARTITIONS (not an increase, or too many), INVALID_REPLICA_ASSIGNMENT (assignment
    count differs from the partitions added, or names a broker other than this node),
    UNKNOWN_SERVER_ERROR (the disk write failed: the topic keeps its partition count)."""
    body = request.body
    m = response_types(ApiKey.CREATE_PARTITIONS, request.api_version)
    counts = Counter(t.name for t in body.topics)
    results = []
    answered: set[str] = set()

    def result(name: str, code: ErrorCode, message: str | None) -> Any:
        return build(
            m.CreatePartitionsTopicResult, name=name, error_code=code, error_message=message
        )

    for wanted in body.topics:
        name = wanted.name
        if name in answered:
            continue
        answered.add(name)
        if counts[name] > 1:
            results.append(result(name, ErrorCode.INVALID_REQUEST, "Duplicate topic name."))
            continue
        if ctx.authorizer.enabled and not allowed(
            ctx, ApiKey.CREATE_PARTITIONS, ALTER, TOPIC, name
        ):
            results.append(result(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
            continue
        topic = ctx.topics.get(name)
        if topic is None:
            results.append(
                result(
                    name,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "This server does not host this topic-partition.",
                )
            )
            continue
        if topic.internal:
            results.append(
                result(
                    name,
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    _INTERNAL_REFUSED.format(verb="add partitions to", name=name),
                )
            )
            continue
        try:
            ctx.topics.check_add_partitions(topic, wanted.count)
            if wanted.assignments is not None:
                added = wanted.count - len(topic.partitions)
                if len(wanted.assignments) != added:
                    raise TopicError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Attempted to add {added} additional partition(s), but "
                        f"only {len(wanted.assignments)} assignment(s) were "
                        "specified.",
                    )
                for assignment in wanted.assignments:
                    _check_replicas(ctx.node.node_id, assignment.broker_ids)
            if not body.validate_only:
                before = len(topic.partitions)
                await ctx.topics.add_partitions_in_steps(topic, wanted.count)
                log.info("added partitions", topic=name, before=before, after=wanted.count)
        except TopicError as e:
            results.append(result(name, ErrorCode(e.code), e.message))
            continue
        except Exception as e:
            # Only this topic fails; the registry undid the partitions it had begun to add.
            _log_failure("create partitions failed", name, e)
            results.append(
                result(
                    name,
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"Adding partitions to '{name}' failed: {e}",
                )
            )
            continue
        results.append(result(name, ErrorCode.NONE, None))
    return build(m.CreatePartitionsResponse, results=tuple(results))


# DescribeConfigs ----------------------------------------------------------------------------


def handle_describe_configs(ctx: TopicsContext, request: Request) -> Any:
    """Emits per resource its configs (all, or only configuration_keys when given; unknown
    keys are left out), with value, source, read-only flag, synonyms (include_synonyms),
    type (v3+) and documentation (v3+, include_documentation). TOPIC: every topic config,
    the override else the broker default (source 1, else 4 or 5). BROKER "<node_id>" or "":
    the broker settings under their Kafka names (read-only; source 4 if configured, else 5).
    GROUP: the KIP-848 group configs, the group's override (source 8) else the broker's.
    Errors per resource: UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, INVALID_REQUEST
    (another broker's id, an empty group name, or a resource type not served)."""
    body = request.body
    version = request.api_version
    m = response_types(ApiKey.DESCRIBE_CONFIGS, version)
    synonyms_wanted = getattr(body, "include_synonyms", False)
    docs_wanted = getattr(body, "include_documentation", False)

    def entry(e: _Entry) -> Any:
        synonyms = (
            tuple(
                build(m.DescribeConfigsSynonym, name=n, value=v, source=s) for n, v, s in e.synonyms
            )
            if synonyms_wanted
            else ()
        )
        return build(
            m.DescribeConfigsResourceResult,
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            config_source=e.source,
            is_sensitive=False,
            synonyms=synonyms,
            config_type=CONFIG_TYPES.get(e.kind, 0),
            documentation=e.doc if docs_wanted else None,
        )

    results = []
    refused = []  # Kafka lists the resources it may not describe after the others
    for resource in body.resources:
        rtype, rname = resource.resource_type, resource.resource_name
        denied = config_resource_denied(
            ctx, ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS, rtype, rname
        )
        if denied is not None:
            refused.append(
                build(
                    m.DescribeConfigsResult,
                    error_code=denied,
                    error_message=DENIED_MESSAGES[denied],
                    resource_type=rtype,
                    resource_name=rname,
                    configs=(),
                )
            )
            continue
        error, message, entries = _describe_resource(ctx, rtype, rname)
        keys = resource.configuration_keys
        if keys:  # null or empty: every config
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        results.append(
            build(
                m.DescribeConfigsResult,
                error_code=error,
                # Kafka's schema default: '' on success (the field is nullable, never null).
                error_message="" if message is None else message,
                resource_type=rtype,
                resource_name=rname,
                configs=tuple(entry(e) for e in entries),
            )
        )
    return build(m.DescribeConfigsResponse, results=tuple(results + refused))


def _describe_resource(
    ctx: TopicsContext, rtype: int, rname: str
) -> tuple[ErrorCode, str | None, list[_Entry]]:
    if rtype == RESOURCE_TOPIC:
        try:
            check_topic_name(rname)
        except TopicError as e:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, e.message, []
        topic = ctx.topics.get(rname)
        if topic is None:
            return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{rname}' does not exist.", [])
        return ErrorCode.NONE, None, topic_config_entries(topic, ctx.topics.config)
    if rtype == RESOURCE_BROKER:
        if rname not in ("", str(ctx.node.node_id)):
            return (
                ErrorCode.INVALID_REQUEST,
                f"Unexpected broker id, expected "
                f"{ctx.node.node_id} or empty string, but received {rname}",
                [],
            )
        return ErrorCode.NONE, None, broker_config_entries(ctx)
    if rtype == RESOURCE_GROUP:
        if not rname:
            return ErrorCode.INVALID_REQUEST, "Group name can't be empty.", []
        return ErrorCode.NONE, None, group_config_entries(ctx, rname)
    kind = _RESOURCE_NAMES.get(rtype)
    if kind is not None:
        return ErrorCode.INVALID_REQUEST, f"{kind} configs are not supported by this server", []
    return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}", []

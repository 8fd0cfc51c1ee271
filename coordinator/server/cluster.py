"""ApiVersions, FindCoordinator and InitProducerId: the node's own answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime.partitioning import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, shard_for
from ..security.acl_model import CLUSTER_NAME
from ..topics.access import (
    CLUSTER,
    DESCRIBE,
    GROUP,
    IDEMPOTENT_WRITE,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    allowed,
    authorize_by_resource_type,
    visible,
)
from ..topics.context import Node
from .context import GroupContext
from .txn_api import init_transactional_producer_id

COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1
# The internal topic Kafka creates on the first FindCoordinator of each key type.
_INTERNAL_TOPIC_OF = {
    COORDINATOR_GROUP: OFFSETS_TOPIC,
    COORDINATOR_TRANSACTION: TRANSACTION_STATE_TOPIC,
}


def handle_api_versions(ctx: GroupContext, request: Request) -> Any:
    """Emits the served version range of every implemented API. Errors: none (an unknown
    ApiVersions version is answered at v0 with UNSUPPORTED_VERSION by the connection)."""
    return api_versions_response(ctx.supported_versions, request.api_version)


# The features this node serves (ApiVersions v3+: SupportedFeatures and FinalizedFeatures):
# transaction.version 2 (KIP-890 part 2), finalized at 2 as a Kafka 4 cluster formatted with
# its default metadata version has it. A Kafka 4 Java client uses transactions V2 (EndTxn
# v5, Produce v12 and TxnOffsetCommit v5 adding partitions implicitly) when the finalized
# level is 2 or more; every other client ignores it. The server decides a request's
# transaction version by the request's version, as Kafka does, so older clients keep
# transactions V1. The features never change here: their epoch is a constant (a Java client
# reads features whose epoch is above the -1 it starts from).
FEATURES: tuple[tuple[str, int, int], ...] = (("transaction.version", 0, 2),)
FINALIZED_FEATURES: tuple[tuple[str, int], ...] = (("transaction.version", 2),)
FINALIZED_FEATURES_EPOCH = 0


def api_versions_response(
    supported: Mapping[int, tuple[int, int]], version: int, error: ErrorCode = ErrorCode.NONE
) -> Any:
    """The ApiVersions response of `version` listing the `supported` ranges by API key, and
    (v3+) this node's features (FEATURES, FINALIZED_FEATURES)."""
    m = response_types(ApiKey.API_VERSIONS, version)
    keys = tuple(
        build(m.ApiVersion, api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(supported.items())
    )
    if version < 3 or error is not ErrorCode.NONE:
        return build(
            m.ApiVersionsResponse, error_code=error, api_keys=keys, finalized_features_epoch=-1
        )
    return build(
        m.ApiVersionsResponse,
        error_code=error,
        api_keys=keys,
        supported_features=tuple(
            build(m.SupportedFeatureKey, name=name, min_version=low, max_version=high)
            for name, low, high in FEATURES
        ),
        finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
        finalized_features=tuple(
            build(
                m.FinalizedFeatureKey, name=name, max_version_level=level, min_version_level=level
            )
            for name, level in FINALIZED_FEATURES
        ),
    )


def handle_find_coordinator(ctx: GroupContext, request: Request) -> Any:
    """Emits the node owning each key's shard: this node for every group key and every
    transactional id (key type 1: the node coordinates every `__transaction_state` shard),
    or with serve --workers the owner (ownership.py); v0-v3: one key; v4+: batched keys.
    The key type's internal topic (__consumer_offsets, __transaction_state) is listed from
    then on, as Kafka creates it then. Errors: INVALID_REQUEST for an unknown key type;
    with an authorizer GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    without DESCRIBE on the key (v4+: per key, node -1)."""
    here = ctx.node
    version = request.api_version
    body = request.body
    m = response_types(ApiKey.FIND_COORDINATOR, version)

    def answer(key_type: int, key: str) -> tuple[ErrorCode, str | None]:
        if key_type in (COORDINATOR_GROUP, COORDINATOR_TRANSACTION):
            if ctx.authorizer.enabled:
                # Kafka's: DESCRIBE on the group or the transactional id.
                denied = _find_coordinator_denied(ctx, key_type, key)
                if denied is not None:
                    return denied, None
            return ErrorCode.NONE, None
        return ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}"

    key_type = getattr(body, "key_type", COORDINATOR_GROUP)
    internal_topic = _INTERNAL_TOPIC_OF.get(key_type)
    if internal_topic is not None:  # listed by Metadata from now on, as Kafka's
        ctx.topics.mark_internal_created(internal_topic)
    shards = (
        ctx.settings.transaction_state_partitions
        if key_type == COORDINATOR_TRANSACTION
        else ctx.settings.offsets_partitions
    )
    if version < 4:
        error, message = answer(key_type, body.key)
        ok = error == ErrorCode.NONE
        node = _coordinator(here, body.key, shards)
        return build(
            m.FindCoordinatorResponse,
            error_code=error,
            # Kafka's v0-v3 answer carries Errors.message(): "NONE" when there is no error.
            error_message="NONE" if ok else message,
            node_id=node.node_id if ok else -1,
            host=node.host if ok else "",
            port=node.port if ok else -1,
        )
    coordinators = []
    for key in body.coordinator_keys:
        error, message = answer(key_type, key)
        ok = error == ErrorCode.NONE
        node = _coordinator(here, key, shards)
        coordinators.append(
            build(
                m.Coordinator,
                key=key,
                node_id=node.node_id if ok else -1,
                host=node.host if ok else "",
                port=node.port if ok else -1,
                error_code=error,
                # Kafka's v4+ answer never sets a coordinator's message: "" by default.
                error_message="" if ok else message,
            )
        )
    return build(m.FindCoordinatorResponse, coordinators=tuple(coordinators))


def _find_coordinator_denied(ctx: GroupContext, key_type: int, key: str) -> ErrorCode | None:
    if key_type == COORDINATOR_GROUP:
        if allowed(ctx, ApiKey.FIND_COORDINATOR, DESCRIBE, GROUP, key):
            return None
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if allowed(ctx, ApiKey.FIND_COORDINATOR, DESCRIBE, TRANSACTIONAL_ID, key):
        return None
    return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _coordinator(here: Node, key: str, shards: int) -> Node:
    """The node coordinating `key` (a group id or transactional id) among `shards` shards:
    this node, or with serve --workers the owner of the key's shard (ownership.py) at its
    address on this listener."""
    ownership = here.ownership
    if ownership is None:
        return here
    owner = ownership.shard_owner(shard_for(key, shards))
    for node_id, host, port in here.brokers:
        if node_id == owner:
            return Node(node_id, host, port)
    return here  # pragma: no cover - brokers lists every owner


def handle_init_producer_id(ctx: GroupContext, request: Request) -> Any:
    """Emits a new producer id with epoch 0, or (v3+, KIP-360) the same id with its epoch
    bumped when the producer passes its current id and epoch. With a transactional id:
    the transaction coordinator's answer (txn_api.init_transactional_producer_id, which
    says what it emits and its errors)."""
    body = request.body
    if body.transactional_id is not None:
        return init_transactional_producer_id(ctx, request)
    m = response_types(ApiKey.INIT_PRODUCER_ID, request.api_version)
    if (
        ctx.authorizer.enabled
        and not visible(ctx, IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME)
        and not authorize_by_resource_type(ctx, WRITE, TOPIC)
    ):
        # Kafka's: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE
        # on some topic.
        ctx.metrics.authorization_denied(ApiKey.INIT_PRODUCER_ID.name, CLUSTER.name)
        return build(
            m.InitProducerIdResponse,
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    producer_id = getattr(body, "producer_id", -1)
    epoch = getattr(body, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < 32766:
        return build(
            m.InitProducerIdResponse,
            error_code=ErrorCode.NONE,
            producer_id=producer_id,
            producer_epoch=epoch + 1,
        )
    return build(
        m.InitProducerIdResponse,
        error_code=ErrorCode.NONE,
        producer_id=ctx.allocate_producer_id(),
        producer_epoch=0,
    )

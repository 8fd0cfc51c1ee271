"""The transaction coordinator's admin reads: DescribeTransactions v0 and ListTransactions
v0-v2, through the transaction gateway. Reads are events of the shards: each is answered
once the writes before it are durable."""

from __future__ import annotations

import datetime
from typing import Any

import re2

from groupcoord.protocol.api import ApiKey, Request, build, response_types
from groupcoord.protocol.errors import ErrorCode

from ..runtime.txn_gateway import DescribedTransaction, ListFilters
from ..topics.access import DESCRIBE, TOPIC, TRANSACTIONAL_ID, allowed, visible
from .context import GroupContext
from .txn_api import txns


async def handle_describe_transactions(ctx: GroupContext, request: Request) -> Any:
    """DescribeTransactions: each id's state, producer id and epoch, timeout, start time
    (-1 after InitProducerId) and partitions; writes nothing. Errors per id:
    INVALID_REQUEST (empty id), TRANSACTIONAL_ID_NOT_FOUND, and its shard's
    COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR; with an authorizer
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED without DESCRIBE on the id, and its topics the
    principal may not DESCRIBE left out (Kafka's)."""
    read_at = ctx.read_at
    ids = list(request.body.transactional_ids)
    m = response_types(ApiKey.DESCRIBE_TRANSACTIONS, request.api_version)
    enabled = ctx.authorizer.enabled
    refused: set[str] = set()
    if enabled:
        api = ApiKey.DESCRIBE_TRANSACTIONS
        refused = {
            t
            for t in dict.fromkeys(ids)
            if t and not allowed(ctx, api, DESCRIBE, TRANSACTIONAL_ID, t)
        }
    answers = await txns(ctx).describe_transactions([t for t in ids if t not in refused], read_at)
    states = []
    for txn_id in ids:
        answer = (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            if txn_id in refused
            else answers[txn_id]
        )
        if isinstance(answer, ErrorCode):
            answer = DescribedTransaction(txn_id, answer)
        by_topic: dict[str, list[int]] = {}
        for topic, index in answer.partitions:
            # Kafka's: topics the principal may not DESCRIBE are left out silently.
            if not enabled or visible(ctx, DESCRIBE, TOPIC, topic):
                by_topic.setdefault(topic, []).append(index)
        states.append(
            build(
                m.TransactionState,
                error_code=answer.error,
                transactional_id=txn_id,
                transaction_state=answer.state,
                transaction_timeout=datetime.timedelta(milliseconds=answer.timeout_ms),
                transaction_start_time=_time(answer.start_ms),
                producer_id=answer.producer_id,
                producer_epoch=answer.producer_epoch,
                topics=tuple(
                    build(m.TopicData, topic=topic, partitions=tuple(indexes))
                    for topic, indexes in by_topic.items()
                ),
            )
        )
    return build(m.DescribeTransactionsResponse, transaction_states=tuple(states))


async def handle_list_transactions(ctx: GroupContext, request: Request) -> Any:
    """ListTransactions: the transactions of every shard matching the filters (ANDed):
    states by name (unknown names echoed in UnknownStateFilters, matching nothing),
    producer ids, v1+ running longer than DurationFilter, v2+ TransactionalIdPattern (a
    full match, RE2). Errors: COORDINATOR_LOAD_IN_PROGRESS while a shard loads,
    INVALID_REGULAR_EXPRESSION for a bad pattern. With an authorizer, only the ids the
    principal may DESCRIBE are listed (Kafka's)."""
    read_at = ctx.read_at
    body = request.body
    m = response_types(ApiKey.LIST_TRANSACTIONS, request.api_version)
    known = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit"}
    known |= {"CompleteAbort", "PrepareEpochFence", "Dead"}
    unknown = tuple(s for s in body.state_filters if s not in known)
    pattern = getattr(body, "transactional_id_pattern", None)
    id_matches = None
    if pattern:
        try:
            compiled = re2.compile(pattern)
        except re2.error:
            return build(
                m.ListTransactionsResponse,
                error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                unknown_state_filters=(),
                transaction_states=(),
            )
        id_matches = lambda txn_id: compiled.fullmatch(txn_id) is not None  # noqa: E731
    filters = ListFilters(
        frozenset(body.state_filters),
        frozenset(body.producer_id_filters),
        getattr(body, "duration_filter", -1),
        id_matches,
    )
    listed = await txns(ctx).list_transactions(filters, read_at)
    if isinstance(listed, ErrorCode):
        return build(
            m.ListTransactionsResponse,
            error_code=listed,
            unknown_state_filters=unknown,
            transaction_states=(),
        )
    if ctx.authorizer.enabled:  # Kafka's: ids it may not DESCRIBE left out silently
        listed = [t for t in listed if visible(ctx, DESCRIBE, TRANSACTIONAL_ID, t.transactional_id)]
    return build(
        m.ListTransactionsResponse,
        error_code=ErrorCode.NONE,
        unknown_state_filters=unknown,
        transaction_states=tuple(
            build(
                m.TransactionState,
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                transaction_state=t.state,
            )
            for t in listed
        ),
    )


def _time(ms: int) -> datetime.datetime:
    """A codec timestamp of `ms` since the epoch (-1 too: the codec writes it back as -1)."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)

"""The transaction coordinator's gateway (Kafka's TransactionCoordinator facade): the only way
the network layer (coordinator/server/) and the marker router reach the transaction shards.

One typed coroutine per request kind; each runs as one event on the shard that owns the
transactional id (ShardCall / run_on_shard, as the group gateway's), reads included, and
returns the shard's answer once the records it depends on are durable. Errors every method
shares: COORDINATOR_LOAD_IN_PROGRESS while the id's shard loads, NOT_COORDINATOR when it
failed or closed, or when a write the answer waited for failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from groupcoord.protocol.errors import ErrorCode

from ..groups.result import Result
from ..transactions.messages import (
    DescribedTransaction,
    EndTxnAnswer,
    InitProducerIdAnswer,
    ListedTransaction,
    ListFilters,
    MarkerJob,
)
from ..transactions.metadata import TopicPartition
from ..transactions.shard import TxnShard
from .log_runner import NotActive
from .pending import Pending
from .shard_calls import ShardCall, not_active_error, run_by_shard, run_on_shard, when_all
from .txn_service import TxnCoordinatorService


class TxnCoordinatorGateway:
    """The typed door into the transaction coordinator."""

    __slots__ = ("_concurrent_wait_s", "_service")

    def __init__(self, service: TxnCoordinatorService, concurrent_wait_ms: int = 0) -> None:
        """`concurrent_wait_ms`: how long add_partitions waits for the id's previous
        transaction to complete before answering CONCURRENT_TRANSACTIONS (0: at once)."""
        self._service = service
        self._concurrent_wait_s = concurrent_wait_ms / 1000

    @property
    def shard_count(self) -> int:
        return self._service.shard_count

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        read_at: float,
    ) -> InitProducerIdAnswer:
        """TxnShard.init_producer_id of the id's shard."""
        request = (transactional_id, timeout_ms, producer_id, producer_epoch)
        return await _answer(  # type: ignore[no-any-return]
            self._on_shard(transactional_id, _init_producer_id, request, read_at, _init_failed)
        )

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        read_at: float,
        client_transaction_version: int = 0,
    ) -> ErrorCode:
        """TxnShard.add_partitions (AddPartitionsToTxn, AddOffsetsToTxn, the implicit add
        of transactions V2). CONCURRENT_TRANSACTIONS (the id's previous transaction is
        still writing its markers) is not answered at once: the call waits, up to
        `concurrent_wait_ms`, for that transaction to complete and asks again. A client
        told CONCURRENT_TRANSACTIONS backs off 20 ms (librdkafka and the Java client
        alike) where the markers take about one fsync round, and a producer that begins
        its next transaction right after EndTxn's answer would otherwise pay that backoff
        on most transactions; the answer it gets is the one its retry would get."""
        request = (
            transactional_id,
            producer_id,
            producer_epoch,
            tuple(partitions),
            client_transaction_version,
        )
        error: ErrorCode = await _answer(
            self._on_shard(transactional_id, _add_partitions, request, read_at, _same)
        )
        if error is ErrorCode.CONCURRENT_TRANSACTIONS and self._concurrent_wait_s > 0:
            return await self._add_once_completed(transactional_id, request, read_at)
        return error

    async def _add_once_completed(
        self, transactional_id: str, request: Any, read_at: float
    ) -> ErrorCode:
        """add_partitions' wait: the waiter is registered before the shard is asked again,
        so a completion between the two answers is never missed."""
        service = self._service
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._concurrent_wait_s
        while True:
            waiter = service.completion_waiter(transactional_id)
            try:
                error: ErrorCode = await _answer(
                    self._on_shard(transactional_id, _add_partitions, request, read_at, _same)
                )
                remaining_s = deadline - loop.time()
                if error is not ErrorCode.CONCURRENT_TRANSACTIONS or remaining_s <= 0:
                    return error
                try:
                    await asyncio.wait_for(waiter, remaining_s)
                except TimeoutError:
                    pass  # asked once more, then answered as it stands
            finally:
                service.drop_completion_waiter(transactional_id, waiter)

    async def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        read_at: float,
    ) -> Mapping[TopicPartition, ErrorCode] | ErrorCode:
        """TxnShard.verify_partitions (AddPartitionsToTxn v4+ VerifyOnly)."""
        request = (transactional_id, producer_id, producer_epoch, tuple(partitions))
        return await _answer(  # type: ignore[no-any-return]
            self._on_shard(transactional_id, _verify_partitions, request, read_at, _same)
        )

    async def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        read_at: float,
    ) -> ErrorCode:
        """TxnShard.end_transaction (EndTxn v0-v4): answered once Prepare* is durable."""
        request = (transactional_id, producer_id, producer_epoch, commit)
        return await _answer(  # type: ignore[no-any-return]
            self._on_shard(transactional_id, _end_transaction, request, read_at, _same)
        )

    async def end_transaction_v2(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        read_at: float,
    ) -> EndTxnAnswer:
        """TxnShard.end_transaction_v2 (EndTxn v5): answered once Prepare* is durable."""
        request = (transactional_id, producer_id, producer_epoch, commit)
        return await _answer(  # type: ignore[no-any-return]
            self._on_shard(transactional_id, _end_transaction_v2, request, read_at, _end_failed)
        )

    async def complete_transaction(self, job: MarkerJob) -> ErrorCode:
        """The marker router's last step: TxnShard.complete_transaction, answered once
        written, not once durable (runner.call_unawaited: nothing waits on it; a crash
        before it is durable leaves the transaction prepared and its load completes it)."""
        call = ShardCall(job, _same, _same)
        try:
            self._service.runner_for(job.transactional_id).call_unawaited(
                _complete_transaction, call
            )
        except NotActive as e:
            return not_active_error(e)
        error: ErrorCode = await _answer(call.value if call.done else call)
        if error is ErrorCode.NONE:
            self._service.transaction_completed(job.transactional_id)
        return error

    async def describe_transactions(
        self, transactional_ids: list[str], read_at: float
    ) -> dict[str, DescribedTransaction | ErrorCode]:
        """DescribeTransactions: one read event per shard owning some of the ids (each
        once); {id: described, or its shard's error}."""
        return await _answer(  # type: ignore[no-any-return]
            run_by_shard(
                self._service.runner_for,
                transactional_ids,
                _describe,
                None,
                read_at,
                _by_id,
                _same,
            )
        )

    async def list_transactions(
        self, filters: ListFilters, read_at: float
    ) -> list[ListedTransaction] | ErrorCode:
        """ListTransactions: one read event per active shard, every match in shard order.
        COORDINATOR_LOAD_IN_PROGRESS while any shard loads (as Kafka); a failed shard is
        skipped."""
        if self._service.any_loading():
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        parts = [
            run_on_shard(runner, _list, ShardCall(filters, _same, _none_listed), read_at)
            for runner in self._service.active_runners()
        ]
        return await _answer(  # type: ignore[no-any-return]
            when_all(parts, lambda listed: [txn for part in listed for txn in part])
        )

    def _on_shard(
        self,
        transactional_id: str,
        event: Callable[[TxnShard, ShardCall, int], Result],
        request: Any,
        read_at: float,
        failed: Callable[[ErrorCode], Any],
    ) -> Any:
        return run_on_shard(
            self._service.runner_for(transactional_id),
            event,
            ShardCall(request, _same, failed),
            read_at,
        )


async def _answer(value: Any) -> Any:
    """The answer itself, or awaited when pending."""
    if isinstance(value, Pending) or hasattr(value, "__await__"):
        return await value
    return value


# -- the events: module functions, as the group gateway's --------------------------------------


def _init_producer_id(shard: TxnShard, call: ShardCall, now_ms: int) -> Result:
    txn_id, timeout_ms, producer_id, producer_epoch = call.request
    return shard.init_producer_id(txn_id, timeout_ms, producer_id, producer_epoch, call, now_ms)


def _add_partitions(shard: TxnShard, call: ShardCall, now_ms: int) -> Result:
    txn_id, producer_id, producer_epoch, partitions, version = call.request
    return shard.add_partitions(
        txn_id, producer_id, producer_epoch, partitions, call, now_ms, version
    )


def _verify_partitions(shard: TxnShard, call: ShardCall, now_ms: int) -> Result:
    txn_id, producer_id, producer_epoch, partitions = call.request
    return shard.verify_partitions(txn_id, producer_id, producer_epoch, partitions, call)


def _end_transaction(shard: TxnShard, call: ShardCall, now_ms: int) -> Result:
    txn_id, producer_id, producer_epoch, commit = call.request
    return shard.end_transaction(txn_id, producer_id, producer_epoch, commit, call, now_ms)


def _end_transaction_v2(shard: TxnShard, call: ShardCall, now_ms: int) -> Result:
    txn_id, producer_id, producer_epoch, commit = call.request
    return shard.end_transaction_v2(txn_id, producer_id, producer_epoch, commit, call, now_ms)


def _complete_transaction(shard: TxnShard, call: ShardCall, now_ms: int) -> Result:
    return shard.complete_transaction(call.request, call, now_ms)


def _describe(shard: TxnShard, call: ShardCall, now_ms: int) -> Result:
    return shard.describe(call.request[0], call)


def _list(shard: TxnShard, call: ShardCall, now_ms: int) -> Result:
    return shard.list_transactions(call.request, call, now_ms)


def _init_failed(error: ErrorCode) -> InitProducerIdAnswer:
    return InitProducerIdAnswer(error)


def _end_failed(error: ErrorCode) -> EndTxnAnswer:
    return EndTxnAnswer(error)


def _same(answer: Any) -> Any:
    return answer


def _none_listed(error: ErrorCode) -> list[ListedTransaction]:
    return []


def _by_id(described: list[DescribedTransaction]) -> dict[str, DescribedTransaction]:
    return {d.transactional_id: d for d in described}


__all__ = [
    "DescribedTransaction",
    "EndTxnAnswer",
    "InitProducerIdAnswer",
    "ListFilters",
    "ListedTransaction",
    "MarkerJob",
    "TxnCoordinatorGateway",
]

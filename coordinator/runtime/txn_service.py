"""The transaction coordinator service: one TxnShardRunner per `__transaction_state-N` log,
routing of a transactional id to its shard (Kafka's abs(hashCode) % partitions), the marker
jobs handed to the marker router, and the coordinator's periodic work: aborting
transactions past their timeout (transaction.abort.timed.out.transaction.cleanup.interval.ms)
and expiring idle transactional ids (transactional.id.expiration.ms, scanned every
transaction.remove.expired.transaction.cleanup.interval.ms). The network layer reaches it
only through txn_gateway.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from groupcoord.storage import GroupCommitter, LogConfig

from ..observability.logging import get_logger
from ..transactions.counters import TxnCounters
from ..transactions.messages import MarkerJob
from .log_runner import ShardState
from .partitioning import TRANSACTION_STATE_TOPIC
from .shard_family import ShardFamily
from .txn_runner import TxnShardRunner

log = get_logger("groupcoord.transactions")


class TxnCoordinatorService(ShardFamily[TxnShardRunner]):
    """`producer_ids()`: a new producer id. `max_timeout_ms`: transaction.max.timeout.ms.
    Marker jobs wait in `held_jobs` until `set_marker_sink` names their consumer (the
    marker router, made after the service)."""

    logs = "transaction coordinator"

    def __init__(
        self,
        data_dir: Path,
        shard_count: int,
        log_config: LogConfig,
        committer: GroupCommitter,
        producer_ids: Callable[[], int],
        max_timeout_ms: int,
    ) -> None:
        self._sink: Callable[[MarkerJob], None] | None = None
        self.held_jobs: list[MarkerJob] = []
        # Requests waiting for a transactional id's transaction to complete (its markers
        # written): see TxnCoordinatorGateway.add_partitions.
        self._completion_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self.counters = TxnCounters()  # every shard's outcomes (the metrics read them)
        super().__init__(
            [
                TxnShardRunner(
                    i,
                    data_dir / f"{TRANSACTION_STATE_TOPIC}-{i}",
                    log_config,
                    committer,
                    producer_ids,
                    self._hand_over,
                    max_timeout_ms,
                    counters=self.counters,
                )
                for i in range(shard_count)
            ]
        )

    def set_marker_sink(self, sink: Callable[[MarkerJob], None]) -> None:
        """Where marker jobs go from now on (the jobs held so far go there first)."""
        self._sink = sink
        held, self.held_jobs = self.held_jobs, []
        for job in held:
            sink(job)

    def _hand_over(self, job: MarkerJob) -> None:
        if self._sink is None:
            self.held_jobs.append(job)
        else:
            self._sink(job)

    def completion_waiter(self, transactional_id: str) -> asyncio.Future[None]:
        """A future set once the id's transaction in PrepareCommit/PrepareAbort completes
        (`transaction_completed`); the caller removes it with `drop_completion_waiter` if
        it stops waiting first."""
        waiter = asyncio.get_running_loop().create_future()
        self._completion_waiters.setdefault(transactional_id, []).append(waiter)
        return waiter

    def drop_completion_waiter(self, transactional_id: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._completion_waiters.get(transactional_id)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._completion_waiters[transactional_id]

    def transaction_completed(self, transactional_id: str) -> None:
        """The id's CompleteCommit/CompleteAbort is replayed: wake its waiters."""
        for waiter in self._completion_waiters.pop(transactional_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    def loaded_counts(self) -> dict[str, int]:
        return {"transactions": sum(r.shard.transaction_count() for r in self.runners)}

    def open_transactions(self) -> int:
        """Transactions started and not completed, over every shard (loaded so far)."""
        return sum(r.shard.open_count() for r in self.runners)

    def abort_timed_out(self) -> None:
        """One pass of the timeout abort over every active shard."""
        for runner in self.active_runners():
            runner.run(runner.shard.abort_timed_out)

    def expire_transactional_ids(self, expiration_ms: int) -> None:
        """One pass of the transactional id expiration over every active shard."""
        for runner in self.active_runners():
            expire = runner.shard.expire_transactional_ids
            runner.run(lambda now_ms, expire=expire: expire(now_ms, expiration_ms))

    async def maintenance_loop(
        self, abort_interval_ms: int, expire_interval_ms: int, expiration_ms: int
    ) -> None:
        """The two periodic passes, once loaded, until cancelled."""
        await self.loaded.wait()
        await asyncio.gather(
            _every(abort_interval_ms, self.abort_timed_out, "abort timed-out transactions"),
            _every(
                expire_interval_ms,
                lambda: self.expire_transactional_ids(expiration_ms),
                "expire transactional ids",
            ),
        )

    def any_loading(self) -> bool:
        return any(r.state is ShardState.LOADING for r in self.runners)


async def _every(interval_ms: int, one_pass: Callable[[], None], what: str) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            one_pass()
        except Exception as e:  # a pass that fails is logged; the next one runs as usual
            log.error("transaction coordinator pass failed", task=what, error=repr(e))


__all__ = ["TRANSACTION_STATE_TOPIC", "TxnCoordinatorService"]

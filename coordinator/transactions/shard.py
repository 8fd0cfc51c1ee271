"""TxnShard: the pure state machine of one transaction coordinator shard (one
`__transaction_state` partition): Kafka's TransactionCoordinator + TransactionMetadata.

Theory of operation. A handler reads the shard's TransactionMetadata, computes the target
state (checked against VALID_PREVIOUS_STATES) and returns a Result whose records are
(TransactionLogKey, TransactionLogValue or None); the runtime replays them (`replay`, the
only mutator of durable state), appends them and delivers the replies once durable. Kafka
keeps a `pendingState` while an append is in flight and answers CONCURRENT_TRANSACTIONS
meanwhile; here the target is replayed at once and any later request of the shard is
answered only after the write it follows is durable (a failed write reloads the shard), so
the requests see Kafka's order without that state.

A transaction that reaches PrepareCommit/PrepareAbort hands a MarkerJob to the injected
`markers` reply (delivered, like a response, once the Prepare record is durable, after the
client's answer): the marker router writes the markers, then calls `complete_transaction`,
which writes CompleteCommit/CompleteAbort. `on_loaded` hands over the jobs of the
transactions loaded in a Prepare state (recovery). Server-side aborts (a producer fenced by
InitProducerId, a transaction past its timeout) take Ongoing -> PrepareEpochFence ->
PrepareAbort with the epoch bumped and lastProducerEpoch -1, as Kafka does for clients
below transaction version 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from groupcoord.protocol.errors import ErrorCode
from groupcoord.protocol.txn_records import TransactionLogKey, TransactionLogValue

from ..groups.result import Reply, Result
from .counters import TxnCounters
from .messages import (
    DescribedTransaction,
    EndTxnAnswer,
    InitProducerIdAnswer,
    ListedTransaction,
    ListFilters,
    MarkerJob,
)
from .metadata import (
    EPOCH_MAX,
    NO_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    epoch_exhausted,
)
from .state import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    COMPLETED,
    DEAD,
    EMPTY,
    EXPIRABLE,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    PREPARING,
    TxnState,
    check_transition,
)

# The epoch of this node's leadership of every transaction state partition, stamped into
# the markers (Kafka: the partition's leader epoch). One node leads forever: constant.
COORDINATOR_EPOCH = 0
# AddPartitionsToTxn v4+ (from a partition leader, not verify-only) is transaction
# version 2 (KIP-890): the client's version is recorded with the transaction.
TV2 = 2


class TxnShard:
    """`producer_ids()`: a new producer id (the server's allocator). `markers`: where the
    marker jobs go (the marker router), once their Prepare record is durable.
    `max_timeout_ms`: transaction.max.timeout.ms. `counters`: outcome counts shared by
    every shard (counters.py)."""

    def __init__(
        self,
        shard_id: int,
        producer_ids: Callable[[], int],
        markers: Reply,
        max_timeout_ms: int,
        counters: TxnCounters | None = None,
    ) -> None:
        self.counters = TxnCounters() if counters is None else counters
        self.shard_id = shard_id
        self.producer_ids = producer_ids
        self.markers = markers
        self.max_timeout_ms = max_timeout_ms
        self.txns: dict[str, TransactionMetadata] = {}

    # -- InitProducerId ---------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        reply: Reply,
        now_ms: int,
    ) -> Result:
        """InitProducerId with a transactional id (TransactionCoordinator.handleInitProducerId):
        writes Empty with a new producer id, or the epoch bumped (KIP-360: `producer_id` /
        `producer_epoch` of the caller, -1 for none), or fences an Ongoing transaction
        (PrepareAbort at epoch + 1, markers) and answers CONCURRENT_TRANSACTIONS so the
        client retries. Errors: INVALID_REQUEST (an empty id, or only one of producer id
        and epoch), INVALID_TRANSACTION_TIMEOUT, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS."""
        result = Result()
        if (producer_id == -1) != (producer_epoch == -1):
            result.reply(reply, InitProducerIdAnswer(ErrorCode.INVALID_REQUEST))
            return result
        if not transactional_id:
            result.reply(reply, InitProducerIdAnswer(ErrorCode.INVALID_REQUEST))
            return result
        if not 0 < timeout_ms <= self.max_timeout_ms:
            result.reply(reply, InitProducerIdAnswer(ErrorCode.INVALID_TRANSACTION_TIMEOUT))
            return result
        expected = producer_id != -1
        meta = self.txns.get(transactional_id)
        if meta is None:
            # A new entry (Kafka caches it before anything is written): epoch -1, Empty.
            meta = TransactionMetadata(
                transactional_id, self.producer_ids(), NO_EPOCH, timeout_ms, last_update_ms=now_ms
            )
        elif expected and not (
            meta.producer_epoch == NO_EPOCH
            or producer_id == meta.producer_id
            or (producer_id == meta.prev_producer_id and epoch_exhausted(producer_epoch))
        ):
            result.reply(reply, InitProducerIdAnswer(ErrorCode.PRODUCER_FENCED))
            return result
        state = meta.state
        if state in PREPARING:
            result.reply(reply, InitProducerIdAnswer(ErrorCode.CONCURRENT_TRANSACTIONS))
            return result
        if state is ONGOING:
            self._fence(meta, result, now_ms)
            result.reply(reply, InitProducerIdAnswer(ErrorCode.CONCURRENT_TRANSACTIONS))
            return result
        assert state is EMPTY or state in COMPLETED
        if epoch_exhausted(meta.producer_epoch) and (
            not expected or producer_epoch == meta.producer_epoch
        ):
            # Rotate: a new producer id at epoch 0.
            new_id, new_epoch = self.producer_ids(), 0
            last_epoch = meta.producer_epoch if expected else NO_EPOCH
        else:
            new_id = meta.producer_id
            if not expected:
                new_epoch, last_epoch = meta.producer_epoch + 1, NO_EPOCH
            elif meta.producer_epoch == NO_EPOCH or producer_epoch == meta.producer_epoch:
                new_epoch, last_epoch = meta.producer_epoch + 1, meta.producer_epoch
            elif producer_epoch == meta.last_producer_epoch:
                # A retry of a call that succeeded: the same epoch again.
                new_epoch, last_epoch = meta.producer_epoch, meta.last_producer_epoch
            else:
                result.reply(reply, InitProducerIdAnswer(ErrorCode.PRODUCER_FENCED))
                return result
        value = self._transit(
            meta,
            EMPTY,
            now_ms,
            producer_id=new_id,
            producer_epoch=new_epoch,
            timeout_ms=timeout_ms,
            partitions=(),
            start_ms=-1,
        )
        if transactional_id in self.txns:
            meta.last_producer_epoch = last_epoch  # memory only, as Kafka's
        result.records.append((TransactionLogKey(transactional_id), value))
        result.reply(reply, InitProducerIdAnswer(ErrorCode.NONE, new_id, new_epoch))
        return result

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        reply: Reply,
        now_ms: int,
        client_transaction_version: int = 0,
    ) -> Result:
        """Adds `partitions` (handleAddPartitionsToTransaction): Ongoing with the union of
        the sets written, nothing when all are in an Ongoing transaction already. Answers
        one error for all. Errors: INVALID_REQUEST (empty id), INVALID_PRODUCER_ID_MAPPING
        (unknown id, other producer id), PRODUCER_FENCED (other epoch),
        CONCURRENT_TRANSACTIONS (PrepareCommit/PrepareAbort)."""
        result = Result()
        meta = self.txns.get(transactional_id)
        error = self._check_producer(transactional_id, meta, producer_id, producer_epoch)
        if error is not ErrorCode.NONE or meta is None:
            result.reply(reply, error)
            return result
        if meta.state in PREPARING:
            result.reply(reply, ErrorCode.CONCURRENT_TRANSACTIONS)
            return result
        added = set(partitions)
        if meta.state is ONGOING and added <= meta.partitions:
            result.reply(reply, ErrorCode.NONE)
            return result
        starting = meta.state is EMPTY or meta.state in COMPLETED
        value = self._transit(
            meta,
            ONGOING,
            now_ms,
            partitions=(meta.partitions | added) if not starting else added,
            start_ms=now_ms if starting else meta.start_ms,
            client_transaction_version=max(
                client_transaction_version, meta.client_transaction_version
            ),
        )
        result.records.append((TransactionLogKey(transactional_id), value))
        result.reply(reply, ErrorCode.NONE)
        if starting:
            self.counters.started += 1
        return result

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        reply: Reply,
    ) -> Result:
        """AddPartitionsToTxn v4+ with VerifyOnly (handleVerifyPartitionsInTransaction):
        writes nothing; answers {partition: NONE if in the transaction, else
        TRANSACTION_ABORTABLE}, or one error for all: INVALID_REQUEST,
        INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS."""
        result = Result()
        meta = self.txns.get(transactional_id)
        error = self._check_producer(transactional_id, meta, producer_id, producer_epoch)
        if error is ErrorCode.NONE and meta is not None and meta.state in PREPARING:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        if error is not ErrorCode.NONE or meta is None:
            result.reply(reply, error)
            return result
        result.reply(
            reply,
            {
                tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE
                for tp in partitions
            },
        )
        return result

    # -- EndTxn ----------------------------------------------------------------------------

    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        reply: Reply,
        now_ms: int,
    ) -> Result:
        """EndTxn v0-v4 (endTransactionWithTV1): Ongoing writes PrepareCommit/PrepareAbort
        and answers NONE once it is durable, then hands the markers over; a retry of a
        completed end answers NONE. Errors: INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING,
        PRODUCER_FENCED, CONCURRENT_TRANSACTIONS (the same end in progress),
        INVALID_TXN_STATE (Empty, or the other end)."""
        result = Result()
        meta = self.txns.get(transactional_id)
        error = self._check_producer(transactional_id, meta, producer_id, producer_epoch)
        if error is not ErrorCode.NONE or meta is None:
            result.reply(reply, error)
            return result
        state = meta.state
        same_prepare, same_complete = (
            (PREPARE_COMMIT, COMPLETE_COMMIT) if commit else (PREPARE_ABORT, COMPLETE_ABORT)
        )
        if state is ONGOING:
            # The end's transaction version is the request's (Kafka's
            # transactionVersionForEndTxn: 0 below EndTxn v5), whatever added the
            # partitions: its markers are version 0 markers, at the transaction's epoch.
            self._prepare(
                replace_meta(meta, client_transaction_version=0), same_prepare, result, now_ms
            )
            # The client's answer first, then the markers (both once durable), as Kafka.
            result.replies.insert(0, (reply, ErrorCode.NONE))
        elif state is same_prepare:
            result.reply(reply, ErrorCode.CONCURRENT_TRANSACTIONS)
        elif state is same_complete:
            result.reply(reply, ErrorCode.NONE)  # a retry of an end that completed
        else:
            result.reply(reply, ErrorCode.INVALID_TXN_STATE)
        return result

    def end_transaction_v2(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        reply: Reply,
        now_ms: int,
    ) -> Result:
        """EndTxn v5 (transaction version 2, Kafka's `endTransaction`): every end bumps the
        epoch. Ongoing writes PrepareCommit/PrepareAbort at epoch + 1 (an exhausted epoch:
        at MAX, with a next producer id the Complete record rotates to) and answers the
        producer id and epoch the client continues with; an abort from Empty, CompleteCommit
        or CompleteAbort at the current epoch is an empty abort (PrepareAbort at epoch + 1,
        no partitions). A retry (the epoch before the bump, or the last epoch of the id
        before a rotation) of a completed end answers NONE with the current id and epoch.
        Errors: INVALID_REQUEST, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (an epoch that
        is neither the current one nor, where a retry is possible, the one before it),
        CONCURRENT_TRANSACTIONS (a retry while the same end completes), INVALID_TXN_STATE."""
        result = Result()
        meta = self.txns.get(transactional_id)
        if not transactional_id:
            result.reply(reply, EndTxnAnswer(ErrorCode.INVALID_REQUEST))
            return result
        if meta is None:
            result.reply(reply, EndTxnAnswer(ErrorCode.INVALID_PRODUCER_ID_MAPPING))
            return result
        state = meta.state
        current = meta.producer_epoch
        retry_on_bump = current == producer_epoch + 1
        retry_on_overflow = (
            producer_id == meta.prev_producer_id
            and producer_epoch == EPOCH_MAX - 1
            and current == 0
        )
        retry = retry_on_bump or retry_on_overflow
        if state in PREPARING:
            valid_epoch = retry_on_bump
        elif state in COMPLETED:
            valid_epoch = retry or producer_epoch == current
        else:
            valid_epoch = producer_epoch == current
        if producer_id != meta.producer_id and not retry_on_overflow:
            error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
        elif not valid_epoch:
            error = ErrorCode.PRODUCER_FENCED
        elif state is ONGOING or (not commit and not retry and state in EXPIRABLE):
            answer = self._prepare_v2(meta, commit, result, now_ms)
            # The client's answer first, then the markers (both once durable), as Kafka.
            result.replies.insert(0, (reply, answer))
            return result
        elif state in PREPARING:
            same = state is (PREPARE_COMMIT if commit else PREPARE_ABORT)
            error = ErrorCode.CONCURRENT_TRANSACTIONS if same else ErrorCode.INVALID_TXN_STATE
        elif state is (COMPLETE_COMMIT if commit else COMPLETE_ABORT) and retry:
            # A retry of an end that completed: the id and epoch it answered.
            result.reply(reply, EndTxnAnswer(ErrorCode.NONE, meta.producer_id, current))
            return result
        else:
            error = ErrorCode.INVALID_TXN_STATE
        result.reply(reply, EndTxnAnswer(error))
        return result

    def complete_transaction(self, job: MarkerJob, reply: Reply, now_ms: int) -> Result:
        """Every marker of `job` is written: CompleteCommit/CompleteAbort (no partitions),
        answered NONE (the gateway does not wait for it to be durable: a crash before leaves
        the transaction prepared, and the load hands its markers over again). A
        transaction no longer in that Prepare state with that producer id and epoch
        (reloaded, expired) writes nothing and answers NONE."""
        result = Result()
        meta = self.txns.get(job.transactional_id)
        prepared = PREPARE_COMMIT if job.commit else PREPARE_ABORT
        if (
            meta is not None
            and meta.state is prepared
            and meta.producer_id == job.producer_id
            and meta.producer_epoch == job.producer_epoch
        ):
            changes: dict[str, Any] = {}
            if meta.client_transaction_version >= TV2 and meta.next_producer_id != NO_PRODUCER_ID:
                # The epoch was exhausted: the transaction completes under the next id.
                changes = {"producer_id": meta.next_producer_id, "producer_epoch": 0}
            value = self._transit(
                meta,
                COMPLETE_COMMIT if job.commit else COMPLETE_ABORT,
                now_ms,
                partitions=(),
                next_producer_id=NO_PRODUCER_ID,
                **changes,
            )
            result.records.append((TransactionLogKey(job.transactional_id), value))
            if job.commit:
                self.counters.committed += 1
            else:
                self.counters.aborted += 1
        result.reply(reply, ErrorCode.NONE)
        return result

    # -- timeouts and expiration ------------------------------------------------------------

    def abort_timed_out(self, now_ms: int) -> Result:
        """Kafka's abortTimedOutTransactions: every Ongoing transaction started more than its
        timeout ago is fenced and aborted (PrepareAbort at epoch + 1, markers)."""
        result = Result()
        for meta in list(self.txns.values()):
            if meta.state is ONGOING and meta.start_ms + meta.timeout_ms < now_ms:
                self._fence(meta, result, now_ms)
                self.counters.timed_out += 1
        return result

    def expire_transactional_ids(self, now_ms: int, expiration_ms: int) -> Result:
        """transactional.id.expiration.ms: tombstones for the ids in Empty, CompleteCommit
        or CompleteAbort not updated for `expiration_ms` (Dead: removed on replay)."""
        result = Result()
        for txn_id, meta in self.txns.items():
            if meta.state in EXPIRABLE and meta.last_update_ms <= now_ms - expiration_ms:
                check_transition(meta.state, DEAD)
                result.records.append((TransactionLogKey(txn_id), None))
        return result

    # -- reads -----------------------------------------------------------------------------

    def describe(self, transactional_ids: list[str], reply: Reply) -> Result:
        """DescribeTransactions: each id's state; errors per id: INVALID_REQUEST (empty),
        TRANSACTIONAL_ID_NOT_FOUND."""
        described = []
        for txn_id in transactional_ids:
            meta = self.txns.get(txn_id)
            if not txn_id:
                described.append(DescribedTransaction(txn_id, ErrorCode.INVALID_REQUEST))
            elif meta is None:
                described.append(DescribedTransaction(txn_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
            else:
                described.append(
                    DescribedTransaction(
                        txn_id,
                        ErrorCode.NONE,
                        meta.state.state_name,
                        meta.producer_id,
                        meta.producer_epoch,
                        meta.timeout_ms,
                        meta.start_ms,
                        tuple(sorted(meta.partitions)),
                    )
                )
        result = Result()
        result.reply(reply, described)
        return result

    def list_transactions(self, filters: ListFilters, reply: Reply, now_ms: int) -> Result:
        """ListTransactions of this shard (filters ANDed, see ListFilters)."""
        listed = []
        for txn_id, meta in self.txns.items():
            if filters.states and meta.state.state_name not in filters.states:
                continue
            if filters.producer_ids and meta.producer_id not in filters.producer_ids:
                continue
            if filters.duration_ms >= 0 and not now_ms - meta.start_ms > filters.duration_ms:
                continue
            if filters.id_matches is not None and not filters.id_matches(txn_id):
                continue
            listed.append(ListedTransaction(txn_id, meta.producer_id, meta.state.state_name))
        result = Result()
        result.reply(reply, listed)
        return result

    # -- loading and replay ----------------------------------------------------------------

    def replay(
        self, key: TransactionLogKey, value: TransactionLogValue | None, now_ms: int
    ) -> None:
        """The only mutator of durable state: the value becomes the id's state (a tombstone
        removes it). `last_producer_epoch` is kept for a live entry, -1 for a loaded one."""
        txn_id = key.transactional_id
        if value is None:
            self.txns.pop(txn_id, None)
            return
        meta = self.txns.get(txn_id)
        if meta is None:
            self.txns[txn_id] = TransactionMetadata.from_value(txn_id, value)
        else:
            meta.apply(value)

    def on_loaded(self, now_ms: int) -> Result:
        """After a load: the transactions in a Prepare state resume their markers."""
        result = Result()
        for meta in self.txns.values():
            if meta.state in PREPARING:
                result.reply(self.markers, self._marker_job(meta, recovered=True))
        return result

    def take_parked_replies(self) -> list[Reply]:
        return []  # nothing waits in a transaction shard between events

    def transaction_count(self) -> int:
        return len(self.txns)

    def open_count(self) -> int:
        """Transactions started and not completed (Ongoing, PrepareCommit, PrepareAbort)."""
        return sum(
            1 for meta in self.txns.values() if meta.state is ONGOING or meta.state in PREPARING
        )

    # -- helpers ---------------------------------------------------------------------------

    def _check_producer(
        self,
        transactional_id: str,
        meta: TransactionMetadata | None,
        producer_id: int,
        producer_epoch: int,
    ) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.NONE

    def _fence(self, meta: TransactionMetadata, result: Result, now_ms: int) -> None:
        """prepareFenceProducerEpoch then an abort at the fence epoch (transaction version
        below 2): Ongoing -> PrepareEpochFence -> PrepareAbort, epoch + 1 (MAX stays MAX),
        lastProducerEpoch -1 so the fenced producer cannot pass as a retry."""
        check_transition(meta.state, PREPARE_EPOCH_FENCE)
        epoch = meta.producer_epoch
        fence_epoch = epoch if epoch >= EPOCH_MAX else epoch + 1
        next_id = NO_PRODUCER_ID
        if meta.client_transaction_version >= TV2 and epoch_exhausted(epoch):
            # A transaction of version 2 rotates its producer id when the fence exhausts
            # the epoch (KAFKA-20090), as its own ends do.
            next_id = self.producer_ids()
        fenced = replace_meta(
            meta, state=PREPARE_EPOCH_FENCE, producer_epoch=fence_epoch, next_producer_id=next_id
        )
        self._prepare(fenced, PREPARE_ABORT, result, now_ms)
        meta.last_producer_epoch = NO_EPOCH

    def _prepare(
        self, meta: TransactionMetadata, target: TxnState, result: Result, now_ms: int
    ) -> None:
        """Write PrepareCommit/PrepareAbort and hand its marker job over once durable."""
        value = self._transit(meta, target, now_ms)
        result.records.append((TransactionLogKey(meta.transactional_id), value))
        job = MarkerJob(
            meta.transactional_id,
            value.producer_id,
            value.producer_epoch,
            target is PREPARE_COMMIT,
            tuple(sorted(meta.partitions)),
            COORDINATOR_EPOCH,
            transaction_version=value.client_transaction_version,
        )
        result.reply(self.markers, job)

    def _prepare_v2(
        self, meta: TransactionMetadata, commit: bool, result: Result, now_ms: int
    ) -> EndTxnAnswer:
        """prepareAbortOrCommit of transaction version 2: PrepareCommit/PrepareAbort at
        epoch + 1 (an abort at MAX stays at MAX), a next producer id when the epoch is
        exhausted, the start time now for an empty abort; returns what the client is
        answered (the values the Complete record will hold)."""
        epoch = meta.producer_epoch
        next_id = self.producer_ids() if epoch_exhausted(epoch) else NO_PRODUCER_ID
        bumped = epoch if epoch >= EPOCH_MAX and not commit else epoch + 1
        changes: dict[str, Any] = {}
        if meta.state is not ONGOING:
            changes = {"partitions": set(), "start_ms": now_ms}
        self._prepare(
            replace_meta(
                meta,
                producer_epoch=bumped,
                next_producer_id=next_id,
                client_transaction_version=TV2,
                **changes,
            ),
            PREPARE_COMMIT if commit else PREPARE_ABORT,
            result,
            now_ms,
        )
        meta.last_producer_epoch = epoch  # memory only, as Kafka's
        if next_id != NO_PRODUCER_ID:
            return EndTxnAnswer(ErrorCode.NONE, next_id, 0)
        return EndTxnAnswer(ErrorCode.NONE, meta.producer_id, bumped)

    def _marker_job(self, meta: TransactionMetadata, recovered: bool) -> MarkerJob:
        return MarkerJob(
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            meta.state is PREPARE_COMMIT,
            tuple(sorted(meta.partitions)),
            COORDINATOR_EPOCH,
            recovered=recovered,
            transaction_version=meta.client_transaction_version,
        )

    def _transit(
        self, meta: TransactionMetadata, target: TxnState, now_ms: int, **changes: Any
    ) -> TransactionLogValue:
        """The log value of `meta` moved to `target` (prepareTransitionTo): the previous
        producer id is the one current now, the update time is `now_ms`."""
        check_transition(meta.state, target)
        partitions = changes.pop("partitions", None)
        transit = replace_meta(
            meta,
            state=target,
            prev_producer_id=meta.producer_id,
            last_update_ms=now_ms,
            **changes,
        )
        if partitions is not None:
            transit.partitions = set(partitions)
        return transit.to_value()


def replace_meta(meta: TransactionMetadata, **changes: Any) -> TransactionMetadata:
    """A copy of `meta` with `changes` (its partition set copied, not shared)."""
    copy = replace(meta, **changes)
    if "partitions" not in changes:
        copy.partitions = set(meta.partitions)
    return copy


__all__ = ["COORDINATOR_EPOCH", "DEAD", "TV2", "TxnShard"]

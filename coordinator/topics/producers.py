"""Producer state per partition: for each producer id its epoch, the last five batches it
wrote (sequence range and offsets), its coordinator epoch, last timestamp and the first
offset of its open transaction, as Kafka's ProducerStateManager keeps them; and the
partition's open transactions, the last stable offset and the aborted-transactions index.

Data batches (Kafka's appendDataBatch, CLIENT origin), checked by `check`:
- a batch without a producer id is not checked;
- an epoch below the known one -> INVALID_PRODUCER_EPOCH;
- a batch whose sequence range equals one of the last five at the same epoch -> a
  duplicate: nothing is appended and the original offsets are returned;
- a new epoch must start at sequence 0, a known epoch must continue at last sequence + 1
  -> otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
- a producer the partition knows nothing of may start at any sequence: retention may have
  deleted every batch it wrote (Kafka's checkSequence accepts it for the same reason; a
  long-lived producer would otherwise be refused after a restart);
- a non-transactional batch while the producer's transaction is open -> INVALID_TXN_STATE.
The first transactional batch of a producer opens its transaction at the batch's base
offset.

Markers (Kafka's appendEndTxnMarker), checked by `check_marker`: an epoch below the
producer's -> INVALID_PRODUCER_EPOCH (TV2 markers: also an equal epoch while a transaction
is open); a coordinator epoch below the last marker's -> TRANSACTION_COORDINATOR_FENCED.
A marker ends the open transaction (a marker for none is still appended and changes
nothing but the epochs: a coordinator's retry), takes its epoch (the batches kept are
forgotten when it changes) and coordinator epoch; an ABORT adds an index entry
(aborted_txns.py) with the last stable offset at that moment. The last marker's result is
kept (`marker_written`), so a marker job resumed after a crash skips the partitions whose
marker is already in the log.

Last stable offset (Kafka's firstUnstableOffset): the first offset of the earliest open
transaction, or of a transaction whose marker is not yet durable (at or above the high
watermark), whichever is lower; else the high watermark; never below the log start.

Theory of operation: `check*` decide, `record*` mutate, and the state rebuilt at start-up
(`rebuild`) is what `record*` make of the log's batches in order (the checks skipped, as
Kafka's REPLICATION origin): live state equals rebuilt state, and everything survives a
crash exactly as far as the data does. Marker batches are read whole at rebuild (their
record says COMMIT or ABORT); a marker that cannot be read leaves its transaction open,
so its data stays hidden from read_committed readers rather than shown.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from groupcoord.protocol.batches import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader, InvalidBatch
from groupcoord.protocol.control_batches import marker_of
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import PartitionLog
from groupcoord.storage.control_scan import headers_and_controls

from .aborted_txns import AbortedTxns

BATCHES_KEPT = 5
SEQUENCE_MODULUS = 2**31
EPOCH_MAX = 32767
NO_TXN = -1


@dataclass(slots=True)
class _Entry:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int
    # The batch's max timestamp as stored: a retry answers it as its log_append_time.
    max_timestamp: int = -1


@dataclass(slots=True)
class ProducerState:
    epoch: int
    batches: deque[_Entry] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    # First offset of the open transaction, NO_TXN when none is open.
    txn_first_offset: int = NO_TXN
    # The result of the last marker (True: COMMIT), None before any.
    last_marker_commit: bool | None = None

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def take_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()  # sequences restart with a new epoch


class SequenceError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ProducerStates:
    __slots__ = ("producers", "open_txns", "unstable", "aborted", "verifying")

    def __init__(self) -> None:
        self.producers: dict[int, ProducerState] = {}
        # producer id -> first offset of its open transaction. Transactions open in offset
        # order, so the dict's order is first-offset order: the first value is the lowest.
        self.open_txns: dict[int, int] = {}
        # (first offset, marker offset) of transactions ended by a marker that may not be
        # durable yet, in marker order: they hold the last stable offset until it is.
        self.unstable: deque[tuple[int, int]] = deque()
        self.aborted = AbortedTxns()
        # KIP-890 verification guards (Kafka's VerificationStateEntry), memory only:
        # producer id -> (guard, epoch), set before the transaction coordinator is asked
        # whether the partition is in the producer's transaction and dropped by the
        # producer's next transactional append or marker, so an answer that arrives after
        # a marker ended the transaction cannot open a new one (see `verified`).
        self.verifying: dict[int, tuple[object, int]] = {}

    @classmethod
    def rebuild(cls, log: PartitionLog) -> ProducerStates:
        """The state `record*` leave after the log's batches, read from their headers (and
        the markers' records)."""
        return cls.from_headers(headers_and_controls(log))

    @classmethod
    def from_headers(cls, batches: Iterable[tuple[BatchHeader, bytes | None]]) -> ProducerStates:
        """The state `record*` leave after `batches`: (header, the whole batch if it is a
        control batch, else None) in offset order, e.g. a cluster partition's rows."""
        states = cls()
        for header, control in batches:
            if header.is_control:
                marker = _marker(control)
                if marker is not None and header.producer_id != NO_PRODUCER_ID:
                    commit, coordinator_epoch = marker
                    states.record_marker(header, header.base_offset, coordinator_epoch, commit)
            else:
                states.record(header, header.base_offset)
        # Everything read back is durable: nothing holds the LSO but open transactions.
        states.unstable.clear()
        return states

    # -- data batches ---------------------------------------------------------------------

    def check(self, header: BatchHeader, epoch_bump_verified: bool = False) -> _Entry | None:
        """Validate a data batch; returns the original entry for a duplicate, else None.

        Raises SequenceError for a fenced epoch, a gap in the sequence, or a
        non-transactional batch inside an open transaction. `epoch_bump_verified`: the
        batch opens its transaction here after a transactions V2 verification (Produce
        v12+): with no batch of the producer here (unknown, or none since its last epoch
        change) it must start at sequence 0 (Kafka's checkSequence, KIP-890 part 2).
        """
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence == NO_SEQUENCE:
            return None
        state = self.producers.get(header.producer_id)
        first = header.base_sequence
        if state is None:
            if epoch_bump_verified and first != 0:
                raise SequenceError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"a transactions V2 producer with no state here must start at sequence 0, "
                    f"got {first}",
                )
            return None
        if header.producer_epoch < state.epoch:
            raise SequenceError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"epoch {header.producer_epoch} is older than the current epoch {state.epoch}",
            )
        if header.producer_epoch > state.epoch:
            if first != 0:
                raise SequenceError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"a new epoch must start at sequence 0, got {first}",
                )
        else:
            last = header.last_sequence
            for entry in state.batches:
                if entry.first_sequence == first and entry.last_sequence == last:
                    return entry
            expected = (state.last_sequence + 1) % SEQUENCE_MODULUS
            if first != expected:
                raise SequenceError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"expected sequence {expected}, got {first}",
                )
        if state.txn_first_offset != NO_TXN and not header.is_transactional:
            raise SequenceError(
                ErrorCode.INVALID_TXN_STATE,
                f"a non-transactional batch from producer {header.producer_id} while its "
                f"transaction (from offset {state.txn_first_offset}) is open",
            )
        return None

    def record(self, header: BatchHeader, base_offset: int) -> None:
        """Remember a data batch that was appended at `base_offset` (nothing for a batch
        without producer id, or without sequence outside a transaction)."""
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID or (
            header.base_sequence == NO_SEQUENCE and not header.is_transactional
        ):
            return
        state = self.producers.get(producer_id)
        if state is None:
            state = self.producers[producer_id] = ProducerState(header.producer_epoch)
        else:
            state.take_epoch(header.producer_epoch)
        if header.base_sequence != NO_SEQUENCE:
            state.batches.append(
                _Entry(
                    header.base_sequence,
                    header.last_sequence,
                    base_offset,
                    base_offset + header.last_offset_delta,
                    header.max_timestamp,
                )
            )
        state.last_timestamp = header.max_timestamp
        if header.is_transactional:
            if self.verifying:
                self.verifying.pop(producer_id, None)
            if state.txn_first_offset == NO_TXN:
                state.txn_first_offset = base_offset
                self.open_txns[producer_id] = base_offset

    # -- markers --------------------------------------------------------------------------

    def check_marker(
        self, producer_id: int, epoch: int, coordinator_epoch: int, tv2: bool = False
    ) -> None:
        """Validate a marker (see the module docstring); raises SequenceError."""
        state = self.producers.get(producer_id)
        if state is None:
            return
        stale = epoch < state.epoch
        if tv2 and epoch == state.epoch and state.txn_first_offset != NO_TXN:
            # KIP-890: a TV2 marker carries the bumped epoch; an equal one is a retry only
            # when no transaction is open (KAFKA-19999), or when the epoch is exhausted.
            stale = epoch != EPOCH_MAX
        if stale:
            raise SequenceError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker epoch {epoch} is older than producer {producer_id}'s epoch {state.epoch}",
            )
        if coordinator_epoch < state.coordinator_epoch:
            raise SequenceError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"coordinator epoch {coordinator_epoch} is older than "
                f"{state.coordinator_epoch}, seen in an earlier marker",
            )

    def record_marker(
        self,
        header: BatchHeader,
        offset: int,
        coordinator_epoch: int,
        commit: bool,
        transaction_version: int = 0,
    ) -> None:
        """Remember a marker batch appended at `offset`."""
        producer_id = header.producer_id
        verifying = self.verifying.get(producer_id)
        if verifying is not None and not (
            transaction_version >= 2 and verifying[1] == header.producer_epoch
        ):
            # A version 2 marker at the verified epoch ends the transaction before it: the
            # verification is the next one's, begun at the bumped epoch (as Kafka keeps it).
            del self.verifying[producer_id]
        state = self.producers.get(producer_id)
        if state is None:
            state = self.producers[producer_id] = ProducerState(header.producer_epoch)
        first = state.txn_first_offset
        if first != NO_TXN:
            del self.open_txns[producer_id]
            self.unstable.append((first, offset))
            if not commit:
                others = self.open_txns
                stable = next(iter(others.values())) if others else offset + 1
                self.aborted.append(producer_id, first, offset, stable)
        state.take_epoch(header.producer_epoch)
        state.coordinator_epoch = coordinator_epoch
        state.txn_first_offset = NO_TXN
        state.last_timestamp = header.max_timestamp
        state.last_marker_commit = commit

    def marker_written(self, producer_id: int, epoch: int, commit: bool) -> bool:
        """Whether this partition's last marker of `producer_id` is this one (`epoch`,
        `commit`) and no transaction of it opened since: a resumed marker job's write would
        end nothing (see server/txn_markers.py)."""
        state = self.producers.get(producer_id)
        return (
            state is not None
            and state.epoch == epoch
            and state.txn_first_offset == NO_TXN
            and state.last_marker_commit is commit
        )

    # -- KIP-890 verification -------------------------------------------------------------

    def opens_transaction(self, header: BatchHeader) -> bool:
        """A transactional batch that would open its producer's transaction here (none is
        open at the batch's epoch): Kafka asks the transaction coordinator first."""
        state = self.producers.get(header.producer_id)
        if state is None:
            return True
        if header.producer_epoch < state.epoch:
            return False  # refused as fenced by `check`, without asking
        return state.txn_first_offset == NO_TXN or header.producer_epoch != state.epoch

    def start_verification(self, producer_id: int, epoch: int) -> object:
        """The guard of a verification of `producer_id` at `epoch` (an existing one reused,
        as Kafka's maybeStartTransactionVerification)."""
        entry = self.verifying.get(producer_id)
        if entry is None or entry[1] != epoch:
            entry = self.verifying[producer_id] = (object(), epoch)
        return entry[0]

    def verified(self, producer_id: int, guard: object) -> bool:
        """Whether the verification `guard` still stands (no transactional append or marker
        of the producer since it began)."""
        entry = self.verifying.get(producer_id)
        return entry is not None and entry[0] is guard

    def end_verification(self, producer_id: int, guard: object) -> None:
        """A verification that failed: its guard goes (the append is not made)."""
        if self.verified(producer_id, guard):
            del self.verifying[producer_id]

    # -- reads ----------------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        """Offsets below it hold no record of an undecided transaction (see the module
        docstring)."""
        if not self.open_txns and not self.unstable:
            return high_watermark
        first = high_watermark
        unstable = self.unstable
        while unstable and unstable[0][1] < high_watermark:
            unstable.popleft()  # its marker is durable now
        for txn_first, _ in unstable:
            first = min(first, txn_first)
        if self.open_txns:
            first = min(first, next(iter(self.open_txns.values())))
        return max(first, log_start_offset)

    def aborted_between(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions a read of
        [fetch_offset, upper_bound) overlaps."""
        return self.aborted.between(fetch_offset, upper_bound)

    def forget_below(self, log_start_offset: int) -> None:
        """Retention moved the log start: index entries wholly below it go."""
        self.aborted.drop_below(log_start_offset)

    def describe(self) -> Iterable[tuple[int, ProducerState]]:
        return self.producers.items()


def _marker(batch: bytes | None) -> tuple[bool, int] | None:
    """(commit, coordinator epoch) of a stored control batch; None when it is no marker or
    could not be read (damage: its transaction stays open)."""
    if batch is None:
        return None
    try:
        return marker_of(batch)
    except InvalidBatch:
        return None

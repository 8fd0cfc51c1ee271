"""Idempotent-producer state per partition: for each producer id, its epoch and the last five
batches it wrote (sequence range and offsets), as Kafka keeps them.

Rules (Kafka's ProducerStateManager, without transactions):
- a batch without a producer id is not checked;
- an epoch below the known one -> INVALID_PRODUCER_EPOCH;
- a batch whose sequence range equals one of the last five -> a duplicate: nothing is
  appended and the original offsets are returned;
- a new epoch must start at sequence 0, a known epoch must continue at last sequence + 1
  -> otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
- a producer the partition knows nothing of may start at any sequence: retention may have
  deleted every batch it wrote (Kafka's checkSequence accepts it for the same reason; a
  long-lived producer would otherwise be refused after a restart).
State is rebuilt at start-up from the batch headers in the log, so it survives a crash
exactly as far as the data does.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from groupcoord.protocol.batches import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from groupcoord.protocol.errors import ErrorCode

BATCHES_KEPT = 5
SEQUENCE_MODULUS = 2**31


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

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE


class SequenceError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class ProducerStates:
    __slots__ = ("producers",)

    def __init__(self) -> None:
        self.producers: dict[int, ProducerState] = {}

    @classmethod
    def rebuild(cls, log: object) -> ProducerStates:
        states = cls()
        for header in log.batch_headers():  # type: ignore[attr-defined]
            if header.producer_id != NO_PRODUCER_ID and header.base_sequence != NO_SEQUENCE:
                states.record(header, header.base_offset)
        return states

    def check(self, header: BatchHeader) -> _Entry | None:
        """Validate a batch; returns the original entry for a duplicate, else None.

        Raises SequenceError for a fenced epoch or a gap in the sequence.
        """
        if header.producer_id == NO_PRODUCER_ID or header.base_sequence == NO_SEQUENCE:
            return None
        state = self.producers.get(header.producer_id)
        first = header.base_sequence
        if state is None:
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
            return None
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
        return None

    def record(self, header: BatchHeader, base_offset: int) -> None:
        """Remember a batch that was appended at `base_offset`."""
        state = self.producers.get(header.producer_id)
        if state is None or header.producer_epoch > state.epoch:
            state = ProducerState(header.producer_epoch)
            self.producers[header.producer_id] = state
        state.batches.append(
            _Entry(
                header.base_sequence,
                header.last_sequence,
                base_offset,
                base_offset + header.last_offset_delta,
                header.max_timestamp,
            )
        )

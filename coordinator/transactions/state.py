"""Transaction states and their legal transitions (Kafka's TransactionState.java).

The id is the TransactionStatus byte of the log value; the name is what
DescribeTransactions and ListTransactions show. Dead and PrepareEpochFence are never
written: Dead is a tombstone, and PrepareEpochFence is the step a fence takes from Ongoing
before its PrepareAbort (here it exists only inside the handler that fences, as Kafka's
pending state).
"""

from __future__ import annotations

from enum import Enum


class TxnState(Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    def __init__(self, state_id: int, state_name: str) -> None:
        self.id = state_id
        self.state_name = state_name

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        state = _BY_ID.get(state_id)
        if state is None:
            raise ValueError(f"unknown transaction state id {state_id}")
        return state

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_BY_ID = {s.id: s for s in TxnState}
_BY_NAME = {s.state_name: s for s in TxnState}

EMPTY = TxnState.EMPTY
ONGOING = TxnState.ONGOING
PREPARE_COMMIT = TxnState.PREPARE_COMMIT
PREPARE_ABORT = TxnState.PREPARE_ABORT
COMPLETE_COMMIT = TxnState.COMPLETE_COMMIT
COMPLETE_ABORT = TxnState.COMPLETE_ABORT
DEAD = TxnState.DEAD
PREPARE_EPOCH_FENCE = TxnState.PREPARE_EPOCH_FENCE

# TransactionState.VALID_PREVIOUS_STATES. PrepareAbort from Empty/Complete* is TV2's empty
# abort (EndTxn v5), which this coordinator does not serve yet: kept as Kafka's table.
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset(
        {ONGOING, PREPARE_EPOCH_FENCE, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}
    ),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}

PREPARING = frozenset({PREPARE_COMMIT, PREPARE_ABORT})
COMPLETED = frozenset({COMPLETE_COMMIT, COMPLETE_ABORT})
# States whose transactional id may expire (transactional.id.expiration.ms).
EXPIRABLE = frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT})


class IllegalTransition(Exception):
    """A transition Kafka's prepareTransitionTo refuses (IllegalStateException): a bug."""


def check_transition(current: TxnState, target: TxnState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalTransition(f"{current.state_name} -> {target.state_name}")

"""The differential conformance suite: every registered sequence, played against Apache Kafka
and groupcoord, answers field by field the same after normalise.py's rules (README: the list
of normalised fields and the count of sequences).

Most sequences spend their time in Kafka's 3 s initial rebalance delay, so the module plays
them a few at a time (each has its own groups) and each test then judges one outcome."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import tests.conformance.sequences  # noqa: F401  (registers every sequence)
from tests.conformance.conftest import Peers
from tests.conformance.known_divergences import KNOWN_DIVERGENCES
from tests.conformance.runner import SEQUENCES, Outcome, run_both

pytestmark = [pytest.mark.jvm, pytest.mark.integration]

# Sequences played at once: they mostly wait (rebalance delays), and 2 cores also run both
# servers; more makes the "B joins after A" orderings of some sequences timing sensitive.
PARALLEL = int(os.environ.get("GROUPCOORD_CONFORMANCE_PARALLEL", "4"))


def _params() -> list[Any]:
    unknown = set(KNOWN_DIVERGENCES) - set(SEQUENCES)
    assert not unknown, f"known divergences name no sequence: {sorted(unknown)}"
    return [
        pytest.param(
            name,
            id=name,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_DIVERGENCES[name])]
            if name in KNOWN_DIVERGENCES
            else [],
        )
        for name in SEQUENCES
    ]


@pytest.fixture(scope="module")
def outcomes(peers: Peers) -> dict[str, Outcome | BaseException]:
    def play(name: str) -> Outcome | BaseException:
        try:
            return run_both(name, peers.kafka, peers.ours, peers.nonce)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(PARALLEL, thread_name_prefix="sequence") as pool:
        return dict(zip(SEQUENCES, pool.map(play, SEQUENCES), strict=True))


@pytest.mark.parametrize("name", _params())
def test_same_answers_as_kafka(outcomes: dict[str, Outcome | BaseException], name: str) -> None:
    outcome = outcomes[name]
    if isinstance(outcome, BaseException):
        raise outcome
    if outcome.divergences:
        pytest.fail(outcome.report(), pytrace=False)

"""The differential conformance suite: every registered sequence, played against Apache Kafka
and groupcoord, answers field by field the same after normalise.py's rules (README: the list
of normalised fields and the count of sequences)."""

from __future__ import annotations

from typing import Any

import pytest

import tests.conformance.sequences  # noqa: F401  (registers every sequence)
from tests.conformance.conftest import Peers
from tests.conformance.known_divergences import KNOWN_DIVERGENCES
from tests.conformance.runner import SEQUENCES, run_both

pytestmark = [pytest.mark.jvm, pytest.mark.integration]


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


@pytest.mark.parametrize("name", _params())
def test_same_answers_as_kafka(peers: Peers, name: str) -> None:
    outcome = run_both(name, peers.kafka, peers.ours, peers.nonce)
    if outcome.divergences:
        pytest.fail(outcome.report(), pytrace=False)

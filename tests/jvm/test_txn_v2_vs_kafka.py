"""The raw-client transactions V2 / KIP-890 scenarios of tests/integration/test_txn_v2.py,
played against groupcoord and Apache Kafka 4.4 with the same assertions: EndTxn v5's epoch
bumps and answers, Produce v12 and TxnOffsetCommit v5 adding partitions, and the V1
verification refusals are Kafka's."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.test_txn_v2 import SCENARIOS
from tests.jvm.test_java_clients import on_both, targets  # noqa: F401 (fixture)

pytestmark = [pytest.mark.jvm]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_transactions_v2_as_kafka(targets: dict[str, str], name: str) -> None:  # noqa: F811
    on_both(targets, lambda _target, bootstrap: SCENARIOS[name](bootstrap, uuid.uuid4().hex[:8]))

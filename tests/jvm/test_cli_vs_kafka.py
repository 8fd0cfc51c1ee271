"""The command line against Apache Kafka 4.4 and against groupcoord: the same scenario (a
real member of a classic and of a KIP-848 group, committed offsets on owned and unowned
partitions, reset-offsets before and after the member) gives the same describe output,
the same reset plans and the same exit codes on both, member ids and hosts normalised."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_support import produce_topics, run_scenario
from tests.jvm.kafka_broker import KafkaBroker
from tests.support import serving

pytestmark = [pytest.mark.jvm]


@pytest.mark.timeout(900)  # two servers, two groups each, a 3 s initial rebalance delay
def test_the_cli_says_the_same_of_kafka_and_of_groupcoord(
    reference_kafka: KafkaBroker, tmp_path: Path
) -> None:
    with serving(tmp_path / "data") as ours:
        seen: dict[str, dict[str, object]] = {}
        for name, bootstrap in (("kafka", reference_kafka.bootstrap), ("ours", ours.bootstrap)):
            produce_topics(bootstrap)
            for protocol in ("classic", "consumer"):
                seen[f"{name}-{protocol}"] = run_scenario(bootstrap, f"cli-{protocol}", protocol)
    for protocol in ("classic", "consumer"):
        assert seen[f"ours-{protocol}"] == seen[f"kafka-{protocol}"], protocol

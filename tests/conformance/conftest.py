"""Two servers per test module: the reference Apache Kafka and groupcoord, with the same
topics, for the conformance sequences to be played against both."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conformance.ops import TOPICS
from tests.jvm.kafka_broker import KafkaBroker, reference_kafka  # noqa: F401  (fixture)
from tests.support import ServerProcess, serving


@dataclass(frozen=True)
class Peers:
    kafka: str
    ours: str
    nonce: str  # makes this run's group ids unique on both servers


def _create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1) for name, partitions in TOPICS.items()],
        operation_timeout=30,
    )
    for future in futures.values():
        future.result(30)


@pytest.fixture(scope="module")
def groupcoord_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("conformance") / "data") as proc:
        yield proc


@pytest.fixture(scope="module")
def peers(reference_kafka: KafkaBroker, groupcoord_server: ServerProcess) -> Peers:  # noqa: F811
    for bootstrap in (reference_kafka.bootstrap, groupcoord_server.bootstrap):
        _create_topics(bootstrap)
    return Peers(reference_kafka.bootstrap, groupcoord_server.bootstrap, uuid.uuid4().hex[:8])

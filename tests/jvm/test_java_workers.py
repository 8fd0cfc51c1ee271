"""The Java client (kafka-clients 4.x) against `serve --workers 2`: the churn scenario of
test_java_clients.py (members leave and join while a producer writes to every partition)
in a classic group and a KIP-848 group, each coordinated by a different worker, the
partitions led by both. The same checks: nothing consumed twice or lost, every record
consumed by its partition's owner at the time, everything consumed committed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupcoord.coordinator.ownership import shard_owner_index
from groupcoord.coordinator.runtime.partitioning import shard_for
from tests.jvm.java_programs import run_program
from tests.jvm.test_java_clients import (
    COOPERATIVE,
    GROUP_SETTINGS,
    PROGRAM_TIMEOUT_S,
    check_owned_and_exactly_once,
)
from tests.jvm.test_java_clients import classes as classes  # noqa: F401  (module fixture)
from tests.support import WorkersProcess, serving_workers

pytestmark = [pytest.mark.jvm]

WORKERS = 2
SHARDS = 50


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkersProcess]:
    settings = {name: value for name, value in GROUP_SETTINGS.values()}
    data = tmp_path_factory.mktemp("java-workers") / "data"
    with serving_workers(data, WORKERS, **settings) as proc:
        yield proc


def group_on(worker: int, prefix: str) -> str:
    while True:
        group = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if shard_owner_index(WORKERS, shard_for(group, SHARDS)) == worker:
            return group


@pytest.mark.parametrize(
    ("protocol", "assignor", "worker"),
    [
        pytest.param("classic", COOPERATIVE, 1, id="classic-cooperative-sticky"),
        pytest.param("consumer", "uniform", 0, id="consumer-uniform"),
    ],
)
def test_java_members_churn_across_workers(
    classes: Path,  # noqa: F811
    cluster: WorkersProcess,
    tmp_path: Path,
    protocol: str,
    assignor: str,
    worker: int,
) -> None:
    topic, group = f"workers-t-{uuid.uuid4().hex[:8]}", group_on(worker, "workers-g")
    # Bootstrapped at the worker that does not coordinate the group.
    run = run_program(
        classes,
        "Churn",
        [cluster.bootstrap_of(1 - worker), topic, group, protocol, assignor],
        tmp_path,
        f"workers-churn-{protocol}",
        PROGRAM_TIMEOUT_S,
    )
    run.assert_completed()
    phases = [e["name"] for e in run.of("phase")]
    for phase in ("three members", "c1 left", "c4 joined", "all consumed"):
        assert phase in phases, f"{run.label}: never reached {phase!r}"
    check_owned_and_exactly_once(run)

"""Transactions with the Java client and Kafka Streams (issue 18).

- consume-transform-produce with sendOffsetsToTransaction(offsets, consumer.groupMetadata()),
  classic and consumer protocol, one transaction aborted: the group's committed offsets equal
  the input's ends, and the output read with read_committed holds each input exactly once
  (against groupcoord and Apache Kafka, the same checks);
- Kafka Streams word count with exactly_once_v2 (a repartition and a changelog topic) while
  groupcoord is SIGKILLed and restarted twice: the final counts are exact.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jvm.java_programs import ProgramRun, run_program, start_program
from tests.jvm.test_java_clients import (  # noqa: F401 (fixtures)
    GROUP_SETTINGS,
    _name,
    classes,
    on_both,
    targets,
)
from tests.support import ServerProcess, serving

pytestmark = [pytest.mark.jvm]

PROGRAM_TIMEOUT_S = 150.0


def check_transformed_exactly_once(run: ProgramRun) -> None:
    ends = {int(p): o for p, o in run.one("ends")["offsets"].items()}
    committed = {int(p): o for p, o in run.one("committed")["offsets"].items()}
    assert committed == ends, f"{run.label}: committed {committed} != input ends {ends}"
    per_partition = ends[0]
    expected = Counter({f"V{i}": len(ends) for i in range(per_partition)})
    output = Counter(run.one("out_committed")["values"])
    assert output == expected, f"{run.label}: read_committed output {output} != {expected}"
    aborted = run.one("aborted")["count"]
    assert aborted > 0
    uncommitted = run.one("out_uncommitted")["values"]
    assert len(uncommitted) == sum(expected.values()) + aborted, (
        f"{run.label}: read_uncommitted saw {len(uncommitted)} records, expected the "
        f"committed {sum(expected.values())} and the aborted {aborted}"
    )


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consume_transform_produce_with_one_abort(
    classes: Path,  # noqa: F811
    targets: dict[str, str],  # noqa: F811
    tmp_path: Path,
    protocol: str,
) -> None:
    def scenario(target: str, bootstrap: str) -> None:
        run = run_program(
            classes,
            "TxnLoop",
            [
                bootstrap,
                _name("ctp-in"),
                _name("ctp-out"),
                _name("ctp-g"),
                protocol,
                _name("ctp-txn"),
            ],
            tmp_path,
            f"txnloop-{protocol}-{target}",
            PROGRAM_TIMEOUT_S,
        )
        run.assert_completed()
        check_transformed_exactly_once(run)

    on_both(targets, scenario)


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[ServerProcess]:
    ours = {name: value for name, value in GROUP_SETTINGS.values()}
    with serving(tmp_path / "data", **ours) as server:
        yield server


def test_streams_exactly_once_word_count_survives_two_sigkills(
    classes: Path,  # noqa: F811
    restartable: ServerProcess,
    tmp_path: Path,
) -> None:
    program = start_program(
        classes,
        "WordCountEos",
        [restartable.bootstrap, _name("wc-in"), _name("wc-out"), _name("wc-app"), "3000"],
        tmp_path,
        "wordcount-eos",
    )
    deadline = time.monotonic() + 90
    while not any(e.get("name") == "running" for e in program.events()):
        assert program.proc.poll() is None, f"exited early: {program.events()[-5:]}"
        assert time.monotonic() < deadline, "Streams never reached RUNNING"
        time.sleep(0.2)
    kills = 0
    for pause_s in (4.0, 5.0):
        time.sleep(pause_s)
        restartable.restart()  # SIGKILL, then start on the same data directory
        kills += 1
    run = program.finish(PROGRAM_TIMEOUT_S)
    run.assert_completed()
    assert kills == 2
    fed = run.one("fed")["counts"]
    counts = run.one("counts")["counts"]
    assert sum(fed.values()) == 9000
    assert counts == fed, f"final counts {counts} != fed {fed}"

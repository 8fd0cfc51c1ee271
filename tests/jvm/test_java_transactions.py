"""Transactions with the Java client and Kafka Streams (issue 18).

- consume-transform-produce with sendOffsetsToTransaction(offsets, consumer.groupMetadata()),
  classic and consumer protocol, one transaction aborted: the group's committed offsets equal
  the input's ends, and the output read with read_committed holds each input exactly once
  (against groupcoord and Apache Kafka, the same checks); the same with kafka-clients 3.9
  (transactions V1);
- Kafka Streams word count with exactly_once_v2 (a repartition and a changelog topic) while
  groupcoord is SIGKILLed and restarted twice: the final counts are exact.

Both run with transactions V2 (KIP-890 part 2): the Java client 4.x uses it because the
broker advertises the finalized feature transaction.version 2, and every transaction's end
bumps the producer epoch, which DescribeTransactions shows afterwards.
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
from tests.rawclient import RawClient, request_class
from tests.support import ServerProcess, serving

pytestmark = [pytest.mark.jvm]

PROGRAM_TIMEOUT_S = 150.0
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66


def producer_epochs(bootstrap: str, prefix: str) -> dict[str, int]:
    """{transactional id: producer epoch} of the broker's transactions whose id starts with
    `prefix` (ListTransactions, then DescribeTransactions; one node coordinates them all)."""
    with RawClient(bootstrap) as c:
        listed = c.request(
            LIST_TRANSACTIONS,
            1,
            request_class(LIST_TRANSACTIONS, 1)(
                state_filters=(), producer_id_filters=(), duration_filter=-1
            ),
        )
        ids = tuple(t.transactional_id for t in listed.transaction_states)
        ids = tuple(i for i in ids if i.startswith(prefix))
        described = c.request(
            DESCRIBE_TRANSACTIONS,
            0,
            request_class(DESCRIBE_TRANSACTIONS, 0)(transactional_ids=ids),
        )
    return {s.transactional_id: s.producer_epoch for s in described.transaction_states}


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
        txn_id = _name("ctp-txn")
        run = run_program(
            classes,
            "TxnLoop",
            [
                bootstrap,
                _name("ctp-in"),
                _name("ctp-out"),
                _name("ctp-g"),
                protocol,
                txn_id,
            ],
            tmp_path,
            f"txnloop-{protocol}-{target}",
            PROGRAM_TIMEOUT_S,
        )
        run.assert_completed()
        check_transformed_exactly_once(run)
        # Transactions V2 in use: each end (the commits and the abort) bumped the epoch of
        # the producer initialised at epoch 0 (transactions V1 would have left it at 0).
        ended = run.one("transactions")["count"]
        assert ended > 1
        epochs = producer_epochs(bootstrap, txn_id)
        assert epochs == {txn_id: ended}, f"{target}: epochs {epochs} after {ended} transactions"

    on_both(targets, scenario)


def test_java_3_9_client_keeps_transactions_v1(
    classes: Path,  # noqa: F811
    targets: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    """The same loop with kafka-clients 3.9, which knows no transactions V2: it adds its
    partitions itself and EndTxn v4 leaves the epoch where InitProducerId put it, while the
    broker advertises transaction.version 2 (on groupcoord as on Kafka)."""

    def scenario(target: str, bootstrap: str) -> None:
        txn_id = _name("ctp39-txn")
        run = run_program(
            classes,
            "TxnLoop",
            [
                bootstrap,
                _name("ctp39-in"),
                _name("ctp39-out"),
                _name("ctp39-g"),
                "classic",
                txn_id,
            ],
            tmp_path,
            f"txnloop39-{target}",
            PROGRAM_TIMEOUT_S,
            clients="clients39",
        )
        run.assert_completed()
        check_transformed_exactly_once(run)
        assert run.one("transactions")["count"] > 1
        epochs = producer_epochs(bootstrap, txn_id)
        assert epochs == {txn_id: 0}, f"{target}: epochs {epochs} (transactions V1: unbumped)"

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
    app_id = _name("wc-app")
    program = start_program(
        classes,
        "WordCountEos",
        [restartable.bootstrap, _name("wc-in"), _name("wc-out"), app_id, "3000"],
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
    # Transactions V2 in use: Streams commits every 200 ms and every commit bumps its
    # producer's epoch; with transactions V1 only the few InitProducerIds (start, restarts,
    # rebalances) would have.
    epochs = producer_epochs(restartable.bootstrap, app_id)
    assert epochs and max(epochs.values()) >= 20, f"producer epochs {epochs}"

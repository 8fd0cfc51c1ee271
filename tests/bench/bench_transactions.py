"""Transactions against Apache Kafka 4.4 in the same run (issue 18's targets).

(a) One transactional producer: transactions of 10 records over 2 partitions plus
    send_offsets_to_transaction (AddOffsetsToTxn + TxnOffsetCommit), committed
    transactions/s and the commit's p50/p99 (the EndTxn round trip: the records are
    flushed before the offsets are sent and the commit is timed alone).
    Targets: >= 1,000 transactions/s, EndTxn p99 < 20 ms, a rate >= Kafka's.
(b) `--producers` (100) concurrent transactional producers, each committing
    `--txns-per-producer` transactions of 10 records: the committed rate, then a
    read_committed consumer reads the topic whole and every record must be there exactly
    once (a lost or duplicated transaction is reported as such).

The client is confluent-kafka (librdkafka, C): it drives the same request sequence as the
Java producer (AddPartitionsToTxn, Produce, AddOffsetsToTxn, TxnOffsetCommit, EndTxn) from
C threads, so the Python driving it costs a call per transaction step and what is timed is
mostly the server's answers; a Java program would add a JVM per run and its own warm-up,
and in (b) 100 JVM producers would outweigh either server on a 2-core machine.

    python -m tests.bench.bench_transactions [--quick] [--peers ours,kafka]
    python -m tests.bench.bench_transactions --peers ours,ours-fsync-free,kafka

(`ours-fsync-free`: our server with its fsyncs made no-ops, tests/bench/fsync_free/: what
the disk costs, and the rate this client reaches with durability free.)

(as a module from the checkout's root, so this checkout's server is what runs). Prints
figures and ratios (ours / Kafka), asserts nothing but the exactly-once count of (b).
Peers run one after the other on the same machine; on a loaded machine the figures are
noisy, the ratio of one run less so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import KAFKA_PEERS, free_port, run_groupcoord, run_kafka  # noqa: E402

TIMEOUT_S = 60
RECORDS_PER_TXN = 10
# ours: the many connections of (b) come from one address.
OURS_ARGS = ["--set", "connections_max_per_ip=10000"]


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics.items()]
    )
    for future in futures.values():
        future.result(TIMEOUT_S)


def txn_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 0,
            "enable.idempotence": True,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_producer(bootstrap: str, seconds: float) -> dict[str, float]:
    """(a): transactions of 10 records over 2 partitions plus offsets for `seconds`."""
    create_topics(bootstrap, {"bench-out": 2, "bench-in": 1})
    producer = txn_producer(bootstrap, "bench-single")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-single-group"})
    group = consumer.consumer_group_metadata()
    commit_s: list[float] = []
    # Where the time goes: produce + flush (AddPartitionsToTxn, Produce), send_offsets
    # (AddOffsetsToTxn, TxnOffsetCommit), commit (EndTxn).
    phases_s = {"produce": 0.0, "offsets": 0.0, "commit": 0.0}

    def transaction(i: int) -> None:
        t0 = time.perf_counter()
        producer.begin_transaction()
        for r in range(RECORDS_PER_TXN):
            producer.produce("bench-out", value=b"%d-%d" % (i, r), partition=r % 2)
        producer.flush(TIMEOUT_S)
        t1 = time.perf_counter()
        producer.send_offsets_to_transaction(
            [TopicPartition("bench-in", 0, i + 1)], group, TIMEOUT_S
        )
        t2 = time.perf_counter()
        producer.commit_transaction(TIMEOUT_S)
        t3 = time.perf_counter()
        commit_s.append(t3 - t2)
        phases_s["produce"] += t1 - t0
        phases_s["offsets"] += t2 - t1
        phases_s["commit"] += t3 - t2

    for i in range(20):  # warm-up: connections, coordinator lookups, the JIT of the JVM
        transaction(-1 - i)
    commit_s.clear()
    phases_s.update(dict.fromkeys(phases_s, 0.0))
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        transaction(count)
        count += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return {
        "txn_per_s": count / elapsed,
        "commit_p50_ms": 1000 * statistics.median(commit_s),
        "commit_p99_ms": 1000 * percentile(commit_s, 0.99),
        "transactions": count,
        **{f"{phase}_ms_per_txn": 1000 * t / max(count, 1) for phase, t in phases_s.items()},
    }


def one_producer_java(bootstrap: str, seconds: float, logs: Path) -> dict[str, float]:
    """(a) with the Java client (kafka-clients 4.x, tests/jvm/java/TxnRate.java): transactions
    V2 where the server offers it, so no AddPartitionsToTxn or AddOffsetsToTxn and no 1 ms
    timer before the first Produce; the same transactions, timed the same way."""
    from tests.jvm.java_programs import compiled, run_program

    run = run_program(
        compiled(),
        "TxnRate",
        [bootstrap, "bench-java-out", "bench-java-in", "bench-java-group", "bench-java"]
        + [str(seconds)],
        logs,
        "txn-rate",
        timeout_s=seconds + 180,
    )
    run.assert_completed()
    rate = run.one("rate")
    return {key: float(value) for key, value in rate.items() if key not in ("e", "t")}


def many_producers(bootstrap: str, producers: int, txns_each: int) -> dict[str, Any]:
    """(b): `producers` threads, each its own transactional producer; then a read_committed
    count of every value."""
    topic = "bench-many"
    create_topics(bootstrap, {topic: 4})
    made = [txn_producer(bootstrap, f"bench-many-{n}") for n in range(producers)]
    errors: list[str] = []
    barrier = threading.Barrier(producers + 1)

    def run(n: int, producer: Producer) -> None:
        barrier.wait()
        try:
            for t in range(txns_each):
                producer.begin_transaction()
                for r in range(RECORDS_PER_TXN):
                    producer.produce(topic, value=b"%d/%d/%d" % (n, t, r), partition=(t + r) % 4)
                producer.commit_transaction(TIMEOUT_S)
        except KafkaException as e:
            errors.append(f"producer {n}: {e}")

    threads = [threading.Thread(target=run, args=(n, p)) for n, p in enumerate(made)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    expected = producers * txns_each * RECORDS_PER_TXN
    seen = read_committed_values(bootstrap, topic, 4, expected)
    distinct = set(seen)
    wanted = {
        b"%d/%d/%d" % (n, t, r)
        for n in range(producers)
        for t in range(txns_each)
        for r in range(RECORDS_PER_TXN)
    }
    return {
        "txn_per_s": producers * txns_each / elapsed,
        "lost": len(wanted - distinct),
        "duplicated": len(seen) - len(distinct),
        "unexpected": len(distinct - wanted),
        "errors": errors,
    }


def read_committed_values(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    """Every value a read_committed consumer gets, reading until it has `expected` and
    nothing more comes for 3 s (or 120 s pass)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-verify-{time.time_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + 120
    quiet_until = time.monotonic() + 3
    while time.monotonic() < deadline:
        msgs = consumer.consume(1000, 0.5)
        got = [m.value() for m in msgs if m.error() is None]
        values.extend(got)
        if got:
            quiet_until = time.monotonic() + 3
        elif len(values) >= expected and time.monotonic() > quiet_until:
            break
    consumer.close()
    return values


def measure(name: str, runner: Callable[..., Any], work: Path, args: argparse.Namespace) -> dict:
    data = work / name
    with runner(free_port(), data) as peer:
        print(f"[{name}] (a) one producer, {args.seconds} s ...", flush=True)
        single = one_producer(peer, args.seconds)
        if args.java:
            print(f"[{name}] (a) one producer, Java client, {args.seconds} s ...", flush=True)
            java = one_producer_java(peer, args.seconds, data.with_name(f"{name}-java"))
            single.update({f"java_{key}": value for key, value in java.items()})
        print(f"[{name}] (b) {args.producers} producers x {args.txns_per_producer} ...", flush=True)
        many = many_producers(peer, args.producers, args.txns_per_producer)
        refused, server_ms = server_figures(peer)
    return {"single": single, "many": many, "refused": refused, "server_ms": server_ms}


TXN_APIS = (
    "ADD_PARTITIONS_TO_TXN",
    "PRODUCE",
    "ADD_OFFSETS_TO_TXN",
    "TXN_OFFSET_COMMIT",
    "END_TXN",
)


def server_figures(peer: Any) -> tuple[dict[str, float], dict[str, float]]:
    """From our server's /metrics (({}, {}) for a peer without them): its answers with an
    error by API and error (the retries the clients made), and the mean time it took to
    answer each transactional API, arrival to response written (the server's share of
    the client's figures, over both parts of the run)."""
    if getattr(peer, "metrics_url", None) is None:
        return {}, {}
    with urllib.request.urlopen(peer.metrics_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    refused: dict[str, float] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            api = sample.labels.get("api")
            if sample.name == "groupcoord_requests_total" and sample.labels["error"] != "0":
                key = f"{api} error {sample.labels['error']}"
                refused[key] = refused.get(key, 0) + sample.value
            elif api in TXN_APIS and sample.name == "groupcoord_request_latency_seconds_sum":
                sums[api] = sample.value
            elif api in TXN_APIS and sample.name == "groupcoord_request_latency_seconds_count":
                counts[api] = sample.value
    server_ms = {api: 1000 * sums[api] / counts[api] for api in sums if counts.get(api)}
    return refused, server_ms


def runners(args: argparse.Namespace) -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {}
    for name in args.peers.split(","):
        if name == "ours":
            found[name] = lambda port, data: run_groupcoord(port, data, OURS_ARGS)
        elif name == "ours-fsync-free":  # the ceiling without the disk (see peers.py)
            found[name] = lambda port, data: run_groupcoord(port, data, OURS_ARGS, True)
        elif name in KAFKA_PEERS:
            overrides = KAFKA_PEERS[name]
            found[name] = lambda port, data, o=overrides, n=name: run_kafka(port, data, o, name=n)
        else:
            raise SystemExit(
                f"unknown peer {name!r} (ours, ours-fsync-free, {', '.join(KAFKA_PEERS)})"
            )
    return found


def report(results: dict[str, dict], args: argparse.Namespace) -> None:
    names = list(results)
    rows = [
        ("(a) committed transactions/s", ("single", "txn_per_s"), "higher"),
        ("(a) EndTxn (commit) p50 ms", ("single", "commit_p50_ms"), "lower"),
        ("(a) EndTxn (commit) p99 ms", ("single", "commit_p99_ms"), "lower"),
        ("(a) ms/txn in produce + flush", ("single", "produce_ms_per_txn"), "lower"),
        ("(a) ms/txn in send_offsets", ("single", "offsets_ms_per_txn"), "lower"),
        ("(a) ms/txn in commit", ("single", "commit_ms_per_txn"), "lower"),
        (f"(b) {args.producers} producers: transactions/s", ("many", "txn_per_s"), "higher"),
    ]
    if args.java:
        rows[-1:-1] = [
            ("(a) Java client: transactions/s", ("single", "java_txn_per_s"), "higher"),
            ("(a) Java client: EndTxn p50 ms", ("single", "java_commit_p50_ms"), "lower"),
            ("(a) Java client: EndTxn p99 ms", ("single", "java_commit_p99_ms"), "lower"),
            ("(a) Java: ms/txn in produce + flush", ("single", "java_produce_ms_per_txn"), "lower"),
            ("(a) Java: ms/txn in send_offsets", ("single", "java_offsets_ms_per_txn"), "lower"),
            ("(a) Java: ms/txn in commit", ("single", "java_commit_ms_per_txn"), "lower"),
        ]
    print()
    header = f"{'metric':<40}" + "".join(f"{n:>16}" for n in names)
    if "ours" in results and len(names) > 1:
        header += "".join(f"{'ours/' + n:>21}" for n in names if n != "ours")
    print(header)
    for label, (part, key), better in rows:
        line = f"{label:<40}" + "".join(f"{results[n][part][key]:>16.2f}" for n in names)
        if "ours" in results:
            ours = results["ours"][part][key]
            for n in names:
                if n != "ours":
                    other = results[n][part][key]
                    line += f"{(ours / other if other else float('nan')):>20.2f}x"
        print(f"{line}   ({better} is better)")
    print()
    for n in names:
        many = results[n]["many"]
        verdict = (
            "exact"
            if not (many["lost"] or many["duplicated"] or many["unexpected"] or many["errors"])
            else "WRONG"
        )
        print(
            f"{n}: (b) read_committed check {verdict}: lost {many['lost']}, duplicated "
            f"{many['duplicated']}, unexpected {many['unexpected']}, producer errors "
            f"{len(many['errors'])} {many['errors'][:3]}"
        )
    for n in names:
        if results[n]["server_ms"]:
            means = ", ".join(f"{api} {ms:.2f}" for api, ms in results[n]["server_ms"].items())
            print(f"{n}: mean ms from a request's arrival to its answer: {means}")
        if results[n]["refused"]:
            print(f"{n}: answers with an error (api error code: count): {results[n]['refused']}")
    if "ours" in results:
        single = results["ours"]["single"]
        print(
            f"targets (ours): >= 1,000 txn/s: {single['txn_per_s']:.0f}; EndTxn p99 < 20 ms: "
            f"{single['commit_p99_ms']:.1f} ms"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--peers",
        default="ours,kafka",
        help="ours, ours-fsync-free (fsyncs made no-ops: the ceiling without the disk), "
        "kafka, kafka-fsync",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="(a)'s measuring time")
    parser.add_argument(
        "--java",
        action="store_true",
        help="(a) with the Java client too (kafka-clients 4.x, transactions V2; a JVM per peer)",
    )
    parser.add_argument("--producers", type=int, default=100)
    parser.add_argument("--txns-per-producer", type=int, default=20)
    parser.add_argument(
        "--quick", action="store_true", help="2 s of (a), 10 producers x 5 in (b): a smoke run"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.producers, args.txns_per_producer = 2.0, 10, 5
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-txn-") as tmp:
        for name, runner in runners(args).items():
            results[name] = measure(name, runner, Path(tmp), args)
    report(results, args)
    exact = all(
        not (r["many"]["lost"] or r["many"]["duplicated"] or r["many"]["unexpected"])
        for r in results.values()
    )
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())

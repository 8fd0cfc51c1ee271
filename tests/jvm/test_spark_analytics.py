"""The pipeline's analytics job (issue 19 items 2b, 2c) with real Spark and Spark's Kafka
connector against groupcoord: groups with known histories (commits with known offsets, a
classic group that rebalances three times, a KIP-848 group with joins and leaves, a deleted
group) are driven through real clients; the job (run by the `groupcoord-pipeline` command,
availableNow) leaves exactly those rows in offset_commits, group_events (the timeline the
server itself serves once it has replayed its log) and lag; run again from its checkpoint
after more activity, it adds exactly the new rows; the report draws a PNG.

One server and one SparkSession for the module (Spark starts slowly)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from groupcoord.pipeline import cli
from groupcoord.pipeline.analytics import start_analytics
from groupcoord.pipeline.commit_files import ARROW_SETTINGS
from tests.integration.test_clients import create_topic
from tests.jvm.spark_session import require_spark, spark_session_or_fail
from tests.support import ServerProcess, serving

pytestmark = [pytest.mark.jvm, pytest.mark.timeout(600)]

TOPIC = "analytics-data"
PARTITIONS = 3
PER_PARTITION = 20
TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    require_spark()
    # Three coordinator shards: the job reads every partition of __consumer_offsets (a
    # Spark task each); the groups' histories do not need fifty.
    settings = {
        "offsets_partitions": 3,
        "group_initial_rebalance_delay_ms": 0,
        "group_consumer_heartbeat_interval_ms": 500,
    }
    with serving(tmp_path_factory.mktemp("groupcoord") / "data", **settings) as proc:
        yield proc


@pytest.fixture(scope="module")
def spark(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with spark_session_or_fail(tmp_path_factory.mktemp("spark")) as session:
        yield session


def wait_for(condition: Any, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    """A simple group's commit (no member): offsets per partition of TOPIC."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


def member(bootstrap: str, group: str, protocol: str) -> Consumer:
    """A subscribed member of `group` (classic or KIP-848 `consumer` protocol)."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    consumer = Consumer(config)
    consumer.subscribe([TOPIC])
    return consumer


def poll_until(consumers: list[Consumer], condition: Any, what: str) -> None:
    def polled() -> bool:
        for consumer in consumers:
            consumer.poll(0.1)
        return bool(condition())

    wait_for(polled, what)


def timeline(server: ServerProcess, group: str) -> list[dict[str, Any]]:
    url = (
        f"http://127.0.0.1:{server.metrics_port}/api/groups/"
        f"{urllib.parse.quote(group, safe='')}/timeline"
    )
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return list(json.loads(response.read())["events"])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # a group with no event (a simple group's commits derive none)
            return []
        raise


def table(output: Path, name: str) -> list[dict[str, Any]]:
    return list(
        ds.dataset(output / name, format="parquet", partitioning="hive").to_table().to_pylist()
    )


def run_job(bootstrap: str, output: Path) -> None:
    assert (
        cli.main(["analytics", "--bootstrap-server", bootstrap, "--output", str(output), "--once"])
        == 0
    )


def drive_classic(bootstrap: str, group: str) -> None:
    """Three completed rebalances (one member; two; one again), then the group emptied."""
    first = member(bootstrap, group, "classic")
    poll_until([first], lambda: first.assignment(), "the first member's assignment")
    second = member(bootstrap, group, "classic")
    poll_until(
        [first, second],
        lambda: first.assignment() and second.assignment(),
        "both classic members assigned",
    )
    second.close()
    poll_until(
        [first], lambda: len(first.assignment()) == PARTITIONS, "the first member alone again"
    )
    first.commit(
        offsets=[TopicPartition(TOPIC, p, 2) for p in range(PARTITIONS)], asynchronous=False
    )
    first.close()


def drive_consumer(bootstrap: str, group: str) -> None:
    """KIP-848: two members join, one leaves, then the other."""
    first = member(bootstrap, group, "consumer")
    poll_until([first], lambda: len(first.assignment()) == PARTITIONS, "the KIP-848 member")
    second = member(bootstrap, group, "consumer")
    poll_until(
        [first, second],
        lambda: second.assignment() and len(first.assignment()) < PARTITIONS,
        "the second KIP-848 member assigned",
    )
    second.close()
    poll_until(
        [first], lambda: len(first.assignment()) == PARTITIONS, "the first KIP-848 member alone"
    )
    first.close()


def test_analytics_tables_restart_and_report(
    server: ServerProcess, spark: Any, tmp_path: Path
) -> None:
    bootstrap = server.bootstrap
    create_topic(bootstrap, TOPIC, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(TOPIC, f"v{i}".encode(), partition=partition)
    assert producer.flush(30) == 0

    commit(bootstrap, "known", {0: 5, 1: 7, 2: 9})
    commit(bootstrap, "known", {0: 10, 1: 11, 2: 12})
    commit(bootstrap, "doomed", {0: 3, 1: 4})
    drive_classic(bootstrap, "classic")
    drive_consumer(bootstrap, "kip848")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_consumer_groups(["doomed"])["doomed"].result(30)

    # The server's own timelines, as rebuilt from its log (what the job must derive too).
    server.restart()
    expected_events = {g: timeline(server, g) for g in ("known", "classic", "kip848", "doomed")}
    output = tmp_path / "analytics"
    run_job(bootstrap, output)

    commits = table(output, "offset_commits")
    assert sorted(
        (r["group"], r["partition"], -1 if r["offset"] is None else r["offset"], r["deleted"])
        for r in commits
        if r["group"] in ("known", "doomed")
    ) == sorted(
        [("known", p, o, False) for p, o in ((0, 5), (1, 7), (2, 9), (0, 10), (1, 11), (2, 12))]
        + [("doomed", 0, 3, False), ("doomed", 1, 4, False)]
        + [("doomed", 0, -1, True), ("doomed", 1, -1, True)]
    )
    assert all(
        r["topic"] == TOPIC and r["commit_timestamp_ms"] > 0 for r in commits if not r["deleted"]
    )

    events = table(output, "group_events")
    for group, expected in expected_events.items():
        got = sorted(
            (e for e in events if e["group"] == group),
            key=lambda e: (e["log_partition"], e["log_offset"]),
        )
        assert [
            (e["event"], e["generation_or_epoch"], e["member_id"], e["cause"]) for e in got
        ] == [
            (e["event"], e["generation_or_epoch"], e["member_id"], e["cause"]) for e in expected
        ], group
    classic = [e["event"] for e in events if e["group"] == "classic"]
    assert classic.count("rebalance_completed") == 3 and classic[-1] == "group_emptied", classic
    kip848 = [(e["event"], e["member_id"]) for e in events if e["group"] == "kip848"]
    assert [e for e, _ in kip848].count("member_joined") == 2, kip848
    assert [e for e, _ in kip848].count("member_left") == 2, kip848
    assert [e["event"] for e in events if e["group"] == "doomed"] == ["group_deleted"]

    lag = {(r["group"], r["partition"]): r for r in table(output, "lag")}
    assert {
        p: (r["committed_offset"], r["end_offset"], r["lag_records"])
        for (g, p), r in lag.items()
        if g == "known"
    } == {
        0: (10, PER_PARTITION, PER_PARTITION - 10),
        1: (11, PER_PARTITION, PER_PARTITION - 11),
        2: (12, PER_PARTITION, PER_PARTITION - 12),
    }
    assert all(lag[("known", p)]["lag_seconds"] > 0 for p in range(PARTITIONS))
    assert not [k for k in lag if k[0] == "doomed"]

    # More activity, then the same job again from its checkpoint: exactly the new rows.
    batches_before = {r["batch_id"] for r in commits}
    commit(bootstrap, "known", {0: PER_PARTITION})
    commit(bootstrap, "late", {2: 1})
    more = member(bootstrap, "classic", "classic")
    poll_until([more], lambda: more.assignment(), "the classic group again")
    more.commit(
        offsets=[TopicPartition(TOPIC, p, 15) for p in range(PARTITIONS)], asynchronous=False
    )
    more.close()
    run_job(bootstrap, output)
    commits_after = table(output, "offset_commits")
    new = [r for r in commits_after if r["batch_id"] not in batches_before]
    assert sorted((r["group"], r["partition"], r["offset"]) for r in new) == [
        ("classic", p, 15) for p in range(PARTITIONS)
    ] + [("known", 0, PER_PARTITION), ("late", 2, 1)]
    assert len(commits_after) == len(commits) + len(new)
    events_after = table(output, "group_events")
    new_events = [e for e in events_after if e["batch_id"] not in batches_before]
    assert len(events_after) == len(events) + len(new_events)
    assert [e["event"] for e in new_events if e["group"] == "classic"] == [
        "member_joined",
        "rebalance_completed",
        "member_left",
        "group_emptied",
    ], new_events
    lag_after = {
        (r["group"], r["partition"]): r
        for r in table(output, "lag")
        if r["batch_id"] not in batches_before
    }
    assert (
        lag_after[("known", 0)]["lag_records"] == 0 and lag_after[("known", 0)]["lag_seconds"] == 0
    )
    assert lag_after[("late", 2)]["lag_records"] == PER_PARTITION - 1

    # A run that died after writing its last batch but before Spark recorded it as done:
    # the restarted job runs that batch again, and the tables hold no duplicate row.
    commit_log = output / "_checkpoint" / "commits"
    last = max((f for f in commit_log.iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    lag_rows = len(table(output, "lag"))
    last.unlink()
    (commit_log / f".{last.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of it
    run_job(bootstrap, output)
    assert len(table(output, "lag")) == lag_rows  # measured again, not added
    assert last.exists(), "the batch did not run again"
    for name, before in (("offset_commits", commits_after), ("group_events", events_after)):
        again = table(output, name)
        assert sorted(map(repr, again)) == sorted(map(repr, before)), name

    assert [r["lag_records"] for r in table(output, "lag") if r["group"] == "classic"] == [
        PER_PARTITION - 2
    ] * PARTITIONS + [PER_PARTITION - 15] * PARTITIONS
    # The same log with every log partition split over several tasks (the job splits a
    # busy group's shard so, MAX_RECORDS_PER_TASK), in one batch: the same rows.
    split = tmp_path / "split"
    query = start_analytics(
        spark, bootstrap, split, once=True, options={"maxRecordsPerPartition": "4"}
    )
    query.awaitTermination()
    query.stop()
    assert query.exception() is None, query.exception()
    for name in ("offset_commits", "group_events"):
        assert unbatched(table(split, name)) == unbatched(table(output, name)), name
    # The job's Spark settings went to its micro-batches' session, not the user's.
    for name, value in ARROW_SETTINGS.items():
        assert spark.conf.get(name) != value, name

    png = tmp_path / "classic.png"
    assert (
        cli.main(["report", "--output", str(output), "--group", "classic", "--png", str(png)]) == 0
    )
    assert_drawn(png)


def unbatched(rows: list[dict[str, Any]]) -> list[str]:
    """The rows of the test's groups without their batch id, comparable across runs (each
    run's connector also joins a group of its own, which a later run reads)."""
    return sorted(
        repr({k: v for k, v in r.items() if k != "batch_id"})
        for r in rows
        if r["group"] in ("known", "doomed", "classic", "kip848", "late")
    )


def assert_drawn(png: Path) -> None:
    """A PNG with more than one colour in it."""
    import matplotlib.image

    assert png.stat().st_size > 5000
    pixels = matplotlib.image.imread(str(png))
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert (pixels != pixels[0, 0]).any()


def requests_by_api(server: ServerProcess) -> dict[str, float]:
    """Requests the server has answered so far, per API (every version and error)."""
    counts: dict[str, float] = {}
    for line in server.metrics_text().splitlines():
        if line.startswith("groupcoord_requests_total{"):
            labels, _, value = line.rpartition(" ")
            api = labels.split('api="', 1)[1].split('"', 1)[0]
            counts[api] = counts.get(api, 0.0) + float(value)
    return counts


def test_the_job_reads_a_long_log_in_few_fetches(
    server: ServerProcess, spark: Any, tmp_path: Path
) -> None:
    """Spark's consumer lists a partition's offsets (two ListOffsets) after every poll: the
    job polls in large pieces (and fetches in pieces as large), so a log of 20,000 more
    commits is read with a few ListOffsets and Fetches (Kafka's consumer default, 500
    records a poll, made it some eighty ListOffsets), and the table holds every commit
    once."""
    bootstrap = server.bootstrap
    create_topic(bootstrap, "fetch-pieces", 100)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fetch-pieces"})
    try:
        for round_ in range(200):
            consumer.commit(
                offsets=[TopicPartition("fetch-pieces", p, round_ + 1) for p in range(100)],
                asynchronous=False,
            )
    finally:
        consumer.close()
    before = requests_by_api(server)
    output = tmp_path / "pieces"
    query = start_analytics(spark, bootstrap, output, once=True)
    query.awaitTermination()
    query.stop()
    assert query.exception() is None, query.exception()
    after = requests_by_api(server)
    fetches = after.get("FETCH", 0) - before.get("FETCH", 0)
    list_offsets = after.get("LIST_OFFSETS", 0) - before.get("LIST_OFFSETS", 0)
    commits = [r for r in table(output, "offset_commits") if r["group"] == "fetch-pieces"]
    assert len(commits) == 20_000
    assert len({(r["partition"], r["offset"]) for r in commits}) == 20_000
    assert fetches <= 12, (fetches, list_offsets)
    assert list_offsets <= 24, (fetches, list_offsets)

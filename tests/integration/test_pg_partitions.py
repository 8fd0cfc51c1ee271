"""Topic partitions stored in a real PostgreSQL (issue 22 item 2b): appends and reads
round-trip byte for byte, one transaction per round, fencing by the lease epoch, delete
records and retention, the producer state loaded at takeover, a writer SIGKILLed under load
and PostgreSQL restarted under load losing nothing acknowledged.

One PostgreSQL for the module; each test uses its own topic names.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from groupcoord.coordinator.cluster.partition_log import PartitionFenced, PgPartitionLog
from groupcoord.coordinator.cluster.partition_store import (
    PgPartitionStore,
    ensure_partition_schema,
)
from groupcoord.coordinator.cluster.schema import partition_resource
from groupcoord.coordinator.topics.producers import ProducerStates
from groupcoord.protocol.batches import (
    parse_header,
    set_base_offset_and_leader_epoch,
    split_batches,
)
from groupcoord.protocol.control_batches import marker_batch
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import LogConfig, OffsetOutOfRange
from tests.integration.txn_support import txn_batch
from tests.postgres_server import PostgresServer, postgres_server
from tests.support import client_batch, make_batch
from tests.unit.server_support import produce, started_server

pytestmark = pytest.mark.integration

NODE = 1


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture
async def pool(pg: PostgresServer) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(pg.dsn, min_size=1, max_size=4)
    async with pool.acquire() as connection:
        await ensure_partition_schema(connection)
    yield pool
    await pool.close()


async def grant(pool: asyncpg.Pool, topic: str, partition: int, node: int, epoch: int) -> None:
    """What pg-core's lease code does when `node` acquires the partition at `epoch`."""
    await pool.execute(
        "INSERT INTO leases VALUES ($1, $2, $3, now() + interval '1 hour')"
        " ON CONFLICT (resource) DO UPDATE SET owner_node = $2, epoch = $3",
        partition_resource(topic, partition),
        node,
        epoch,
    )


def batch(count: int, **kwargs: Any) -> bytearray:
    return bytearray(make_batch(count, **kwargs))


def append(log_: PgPartitionLog, buffer: bytearray) -> tuple[int, int]:
    header = parse_header(buffer)
    base = log_.append(buffer, [header])
    return base, base + header.last_offset_delta


async def rows(pool: asyncpg.Pool, topic: str) -> int:
    return int(
        await pool.fetchval("SELECT count(*) FROM partition_batches WHERE topic = $1", topic)
    )


async def read_all(store: PgPartitionStore, log_: PgPartitionLog, offset: int = -1) -> bytes:
    """Everything from `offset` (default: the log start) to the high watermark, through
    the store (the rows, or memory when it holds them)."""
    offset = log_.log_start_offset if offset < 0 else offset
    out = b""
    while offset < log_.durable_offset:
        chunk = await store.read(log_, offset, 1 << 20)
        assert chunk
        out += chunk
        offset = split_batches(chunk)[-1].last_offset + 1
    return out


async def test_appends_round_trip_byte_for_byte_in_one_round(pool: asyncpg.Pool) -> None:
    store = PgPartitionStore(pool, NODE)
    logs = []
    for p in range(3):
        await grant(pool, "rt", p, NODE, 1)
        logs.append((await store.load("rt", p, 1)).log)
    sent: dict[int, list[bytes]] = {p: [] for p in range(3)}
    waits = []
    for i in range(4):
        for p, log_ in enumerate(logs):
            buffer = batch(3 + i, start_ts_ms=10_000 + i)
            _, last = append(log_, buffer)
            sent[p].append(bytes(buffer))  # as stored: base offset stamped in
            waits.append(store.wait_durable(log_, last))
    await asyncio.gather(*waits)
    # Every partition's appends went in one transaction (the first waiter's round).
    assert store.rounds == 1
    assert [log_.durable_offset for log_ in logs] == [3 + 4 + 5 + 6] * 3
    for p, log_ in enumerate(logs):
        expected = b"".join(sent[p])
        assert log_.read(0, 1 << 20) == expected  # memory
        reloaded = (await PgPartitionStore(pool, NODE, tail_cache_bytes=0).load("rt", p, 1)).log
        assert reloaded.next_offset == log_.next_offset
        assert await read_all(store, reloaded) == expected  # the rows
        # A read from an offset inside a batch starts with that batch; max bytes is kept
        # except for the first batch (KIP-74).
        second = sent[p][1]
        assert await store.read(reloaded, 4, 1) == second
        assert await store.read(reloaded, 3, len(second) + len(sent[p][2])) == b"".join(
            sent[p][1:3]
        )
    assert await rows(pool, "rt") == 12
    # ListOffsets by timestamp over the rows: batch i holds 3 + i records stamped
    # 10_000 + i + k (k: the record's index), so 10_004 is first reached by batch 1's
    # record 3 (offset 3 + 3) and the largest, 10_008, by batch 3's last record.
    assert await store.offset_for_timestamp(reloaded, 10_004) == (6, 10_004)
    assert await store.offset_for_timestamp(reloaded, 10_009) is None
    assert await store.max_timestamp(reloaded) == (17, 10_008)


async def test_a_stale_epoch_is_refused_and_nothing_it_sent_is_stored(pool: asyncpg.Pool) -> None:
    store = PgPartitionStore(pool, NODE)
    await grant(pool, "fence", 0, NODE, 1)
    await grant(pool, "fence", 1, NODE, 1)
    moved = (await store.load("fence", 0, 1)).log
    kept = (await store.load("fence", 1, 1)).log
    _, last = append(moved, batch(5))
    await store.wait_durable(moved, last)
    # The lease moves to node 2 (this node paused past it); this node still appends.
    await grant(pool, "fence", 0, 2, 2)
    _, last_moved = append(moved, batch(7))
    _, last_kept = append(kept, batch(2))
    results = await asyncio.gather(
        store.wait_durable(moved, last_moved),
        store.wait_durable(kept, last_kept),
        return_exceptions=True,
    )
    assert isinstance(results[0], PartitionFenced)
    assert results[1] is None  # the other partition of the same round committed
    assert moved.fenced and moved.next_offset == moved.durable_offset == 5
    with pytest.raises(PartitionFenced):
        append(moved, batch(1))
    stored = await pool.fetch(
        "SELECT partition, base_offset, last_offset FROM partition_batches"
        " WHERE topic = 'fence' ORDER BY partition, base_offset"
    )
    assert [tuple(r) for r in stored] == [(0, 0, 4), (1, 0, 1)]
    # Delete records under the stale epoch is refused too.
    with pytest.raises(PartitionFenced):
        await store.delete_records(moved, 2)
    # The new owner continues at the committed end.
    other = (await PgPartitionStore(pool, 2).load("fence", 0, 2)).log
    assert other.next_offset == 5


async def test_produce_to_a_partition_whose_lease_moved_answers_not_leader(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    """The data plane's answer for a fenced partition: NOT_LEADER_OR_FOLLOWER (the client
    refreshes its metadata and goes to the new leader), not KAFKA_STORAGE_ERROR."""
    store = PgPartitionStore(pool, NODE)
    await grant(pool, "plane", 0, NODE, 1)
    stored = (await store.load("plane", 0, 1)).log
    await grant(pool, "plane", 0, 2, 2)
    _, last = append(stored, batch(2))
    with pytest.raises(PartitionFenced):
        await store.wait_durable(stored, last)
    async for server in started_server(tmp_path / "data"):
        server.topics.create("plane", 1, {})
        topic = server.topics.get("plane")
        assert topic is not None
        partition = topic.partitions[0]
        local, partition.log = partition.log, stored  # type: ignore[assignment]
        try:
            answer = await produce(server, "plane", make_batch(3))
        finally:
            partition.log = local
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert await rows(pool, "plane") == 0


async def test_delete_records_and_retention_delete_rows(pool: asyncpg.Pool) -> None:
    store = PgPartitionStore(pool, NODE)
    await grant(pool, "ret", 0, NODE, 1)
    config = LogConfig(retention_ms=-1, retention_bytes=-1)
    log_ = (await store.load("ret", 0, 1, config)).log
    sizes = []
    for i in range(10):
        buffer = batch(10, start_ts_ms=1_000 * (i + 1))
        sizes.append(len(buffer))
        _, last = append(log_, buffer)
    await store.wait_durable(log_, last)
    assert await store.delete_records(log_, 25) == 25
    with pytest.raises(OffsetOutOfRange):
        await store.delete_records(log_, 101)
    assert await rows(pool, "ret") == 8  # batches 20..29 onward stay (25 is inside one)
    with pytest.raises(OffsetOutOfRange):
        log_.read(10, 100)
    reloaded = (await store.load("ret", 0, 1)).log
    assert (reloaded.log_start_offset, reloaded.next_offset) == (25, 100)
    assert split_batches(await store.read(reloaded, 25, 1))[0].base_offset == 20
    # Time: batches whose max timestamp is below now - retention.ms go, in offset order.
    log_.reconfigure(LogConfig(retention_ms=5_000, retention_bytes=-1))
    assert await store.apply_retention(log_, now_ms=10_000) == 40  # max ts 5009 is kept
    # Bytes: the oldest go while what stays after them is at least retention.bytes.
    log_.reconfigure(LogConfig(retention_ms=-1, retention_bytes=sum(sizes[7:]) + 1))
    assert await store.apply_retention(log_, now_ms=10_000) == 60
    assert await rows(pool, "ret") == 4
    # Deleting every row keeps the log end: the next load continues at 100.
    assert await store.delete_records(log_, 100) == 100
    reloaded = (await store.load("ret", 0, 1)).log
    assert (reloaded.log_start_offset, reloaded.next_offset) == (100, 100)
    assert await rows(pool, "ret") == 0


async def test_takeover_loads_the_producer_state(pool: asyncpg.Pool) -> None:
    store = PgPartitionStore(pool, NODE)
    await grant(pool, "idem", 0, NODE, 1)
    log_ = (await store.load("idem", 0, 1)).log
    last = -1
    for seq in range(0, 30, 5):
        buffer = batch(5, producer_id=7, epoch=0, seq=seq)
        _, last = append(log_, buffer)
        append(log_, batch(3))  # no producer id: not read at load
    await store.wait_durable(log_, last + 3)
    await grant(pool, "idem", 0, 2, 2)
    loaded = await PgPartitionStore(pool, 2).load("idem", 0, 2)
    assert len(loaded.producer_headers) == 6
    states = ProducerStates.from_headers(loaded.producer_headers)
    # The last batch sent again is a duplicate answered with its original offsets.
    retry = parse_header(batch(5, producer_id=7, epoch=0, seq=25))
    duplicate = states.check(retry)
    assert duplicate is not None and (duplicate.base_offset, duplicate.last_offset) == (40, 44)
    assert states.check(parse_header(batch(5, producer_id=7, epoch=0, seq=30))) is None


@pytest.mark.timeout(180)
async def test_a_writer_sigkilled_under_load_loses_nothing_acknowledged(
    pool: asyncpg.Pool, pg: PostgresServer
) -> None:
    await grant(pool, "killed", 0, NODE, 1)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.pg_partition_writer", pg.dsn, "killed", str(NODE), "1"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    acked: dict[int, bytes] = {}
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 120
        while len(acked) < 400 and time.monotonic() < deadline:
            line = await asyncio.to_thread(child.stdout.readline)
            if line.startswith("ack "):
                _, base, hexed = line.split()
                acked[int(base)] = bytes.fromhex(hexed)
        os.kill(child.pid, signal.SIGKILL)
        # Acknowledgements printed before the kill but not read yet count too.
        rest = await asyncio.to_thread(child.stdout.read)
    finally:
        child.kill()
        child.wait()
    for line in rest.splitlines():
        if line.startswith("ack "):
            _, base, hexed = line.split()
            acked[int(base)] = bytes.fromhex(hexed)
    assert len(acked) >= 400
    log_ = (await PgPartitionStore(pool, NODE).load("killed", 0, 1)).log
    stored = {
        r["base_offset"]: bytes(r["batch"])
        for r in await pool.fetch(
            "SELECT base_offset, batch FROM partition_batches WHERE topic = 'killed'"
        )
    }
    assert {base: stored.get(base) for base in acked} == acked
    assert log_.next_offset >= max(acked) + 5


@pytest.mark.timeout(180)
async def test_appends_wait_through_a_postgres_restart_and_lose_nothing(
    pool: asyncpg.Pool, pg: PostgresServer
) -> None:
    store = PgPartitionStore(pool, NODE)
    await grant(pool, "restart", 0, NODE, 1)
    log_ = (await store.load("restart", 0, 1)).log
    acked: dict[int, bytes] = {}
    stop = asyncio.Event()

    async def writer(k: int) -> None:
        i = 0
        while not stop.is_set():
            buffer = batch(4, start_ts_ms=k * 1_000_000 + i)
            base, last = append(log_, buffer)
            await store.wait_durable(log_, last)
            acked[base] = bytes(buffer)
            i += 1

    writers = [asyncio.create_task(writer(k)) for k in range(4)]
    while len(acked) < 100:
        await asyncio.sleep(0.01)
    await asyncio.to_thread(pg.restart)
    before = len(acked)
    deadline = time.monotonic() + 60
    while len(acked) < before + 100 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*writers)
    assert len(acked) >= before + 100  # appends resumed after the restart
    assert store.retries > 0  # and some waited through it
    stored = {
        r["base_offset"]: bytes(r["batch"])
        for r in await pool.fetch(
            "SELECT base_offset, batch FROM partition_batches WHERE topic = 'restart'"
        )
    }
    assert {base: stored.get(base) for base in acked} == acked
    assert len(stored) == len(acked)  # offsets contiguous, none written twice


async def test_a_backlog_is_written_in_rounds_of_bounded_size(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends far ahead of the database go in several rounds of at most ROUND_BYTES_MAX
    (never one round growing past the round timeout), each log's batches in order."""
    from groupcoord.coordinator.cluster import partition_store

    size = len(batch(5))
    monkeypatch.setattr(partition_store, "ROUND_BYTES_MAX", 3 * size)
    store = PgPartitionStore(pool, NODE)
    logs = []
    for p in range(2):
        await grant(pool, "backlog", p, NODE, 1)
        logs.append((await store.load("backlog", p, 1)).log)
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    waits = []
    for _ in range(6):
        for p, log_ in enumerate(logs):
            buffer = batch(5)
            _, last = append(log_, buffer)
            sent[p].append(bytes(buffer))
            waits.append(store.wait_durable(log_, last))
    await asyncio.gather(*waits)
    assert store.rounds >= 4  # 12 batches, 3 a round
    assert await rows(pool, "backlog") == 12
    for p, log_ in enumerate(logs):
        assert log_.durable_offset == 30
        reloaded = (
            await PgPartitionStore(pool, NODE, tail_cache_bytes=0).load("backlog", p, 1)
        ).log
        assert await read_all(store, reloaded) == b"".join(sent[p])


async def decoded(
    store: PgPartitionStore, log_: PgPartitionLog
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the log start to the high watermark, read
    as a consumer reads (gaps skipped), CRCs checked."""
    from aiokafka.record.default_records import DefaultRecordBatch

    out = []
    offset = log_.log_start_offset
    while offset < log_.durable_offset:
        data = await store.read(log_, offset, 1 << 20)
        assert data
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            records = DefaultRecordBatch(data[pos : pos + header.size_bytes])
            assert records.validate_crc()
            if not header.is_control:
                out += [(r.offset, r.key, r.value) for r in records]
            pos += header.size_bytes
            offset = header.last_offset + 1
    return out


async def test_compaction_keeps_the_latest_value_of_each_key_at_its_offset(
    pool: asyncpg.Pool,
) -> None:
    """Rows shrink, offsets stay, the memory tail follows, tombstones are stamped then go,
    the last batch (the log end) stays, and a stale epoch rewrites nothing."""
    store = PgPartitionStore(pool, NODE)
    await grant(pool, "cmp", 0, NODE, 1)
    # A tail of one batch: the rest are read from the rows.
    log_ = (await store.load("cmp", 0, 1)).log
    log_._tail_cache_bytes = 1
    last = -1
    expected: dict[bytes, tuple[int, bytes | None]] = {}
    for round_ in range(20):
        records = [(b"k%d" % (i % 5), b"v%d-%d" % (round_, i), 1_000 + round_) for i in range(5)]
        if round_ == 18:
            records[0] = (b"k0", None, 1_000 + round_)  # a tombstone of k0
        if round_ == 19:
            del records[0]  # the last batch: k1..k4
        first, last = append(log_, bytearray(client_batch(records)))
        for i, (key, value, _) in enumerate(records):
            expected[key] = (first + i, value)
    await store.wait_durable(log_, last)
    before = await decoded(store, log_)
    assert await rows(pool, "cmp") == 20
    span = await store.cleanable_range(log_, -1, 10_000, 0, 2**63 - 1)
    assert span.dirty_bytes > 0 and span.end_offset == 95  # the last batch is never cleaned
    assert not span.overdue and span.due(0.5)
    # min.compaction.lag.ms: batches newer than now - 10 ms (round 11 on) wait.
    assert (await store.cleanable_range(log_, -1, 1_020, 10, 2**63 - 1)).end_offset == 55
    # max.compaction.lag.ms: the first dirty batch (1_000) is older than now - 1_000.
    assert (await store.cleanable_range(log_, -1, 10_000, 0, 1_000)).overdue
    # Nothing dirty past where the last pass ended: not due, whatever the ratio.
    clean = await store.cleanable_range(log_, 95, 10_000, 0, 2**63 - 1)
    assert (clean.dirty_bytes, clean.due(0.0)) == (0, False)
    # A pass by a node whose lease moved writes nothing.
    await grant(pool, "cmp", 0, NODE, 2)
    with pytest.raises(PartitionFenced):
        await store.compact(log_, 10_000, 1_000, span.end_offset, [])
    assert await decoded(store, (await store.load("cmp", 0, 2)).log) == before
    log_ = (await store.load("cmp", 0, 2)).log
    done = await store.compact(log_, 10_000, 1_000, span.end_offset, [])
    assert done.stats.records_dropped == 19 * 5 - 1 and done.end_offset == 95
    # Batch 90..94 keeps k0's tombstone (stamped, kept until 11_000) and nothing else
    # survives below 95: that row and the last batch's stay.
    assert await rows(pool, "cmp") == 2
    after = await decoded(store, log_)
    assert after == [(90, b"k0", None)] + [(94 + i, b"k%d" % i, b"v19-%d" % i) for i in range(1, 5)]
    assert {key: (offset, value) for offset, key, value in after} == expected
    reloaded = (await store.load("cmp", 0, 2)).log
    assert (reloaded.log_start_offset, reloaded.next_offset) == (0, 99)
    # Past the delete horizon, the tombstone goes; the log end stays.
    await store.compact(log_, 11_000, 1_000, 95, [])
    assert await decoded(store, log_) == after[1:]
    assert await rows(pool, "cmp") == 1
    assert (await store.load("cmp", 0, 2)).log.next_offset == 99


async def test_lag_timestamps_after_a_takeover_are_read_from_the_rows(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    """A new owner holds no batch in memory: the lag scrape reads the first unconsumed
    records' timestamps from the rows in the background and has them at the next scrape
    (cached: not read again)."""
    from groupcoord.coordinator.config import load_config
    from groupcoord.coordinator.topics.lag_reads import PartitionEnds
    from groupcoord.coordinator.topics.registry import TopicRegistry

    await grant(pool, "lag", 0, NODE, 1)
    writer = (await PgPartitionStore(pool, NODE).load("lag", 0, 1)).log
    last = -1
    for i in range(10):
        _, last = append(writer, batch(10, start_ts_ms=1_000 * (i + 1)))
    await writer.store.wait_durable(writer, last)
    await grant(pool, "lag", 0, 2, 2)
    overrides = {"data_dir": str(tmp_path), "metrics_listen": ""}
    topics = TopicRegistry(load_config(overrides=overrides, environ={}))
    topics.load()
    try:
        topics.create("lag", 1, {})
        partition = topics.partition("lag", 0)
        assert partition is not None
        partition.log = (await PgPartitionStore(pool, 2).load("lag", 0, 2)).log  # type: ignore[assignment]
        ends = PartitionEnds(topics)
        offsets = [0, 35, 99]
        expected = [1_000, 4_000, 10_000]  # each batch's first record's timestamp
        read: list[int | None] = [None] * 3
        deadline = time.monotonic() + 30
        while read != expected and time.monotonic() < deadline:
            ends.begin_scrape()
            read = ends.timestamps_ms("lag", 0, offsets)
            await asyncio.sleep(0.05)
        assert read == expected
        ends.begin_scrape()
        assert ends.timestamps_ms("lag", 0, offsets) == expected
        assert not ends._stored_reads  # cached: no read of the rows started
    finally:
        topics.close()


# The partition tables as session 17 created them: rows keyed by topic name.
_NAME_KEYED_DDL = """
CREATE TABLE partition_batches (
    topic text NOT NULL, partition integer NOT NULL, base_offset bigint NOT NULL,
    last_offset bigint NOT NULL, max_timestamp bigint NOT NULL, producer_id bigint NOT NULL,
    batch bytea NOT NULL, PRIMARY KEY (topic, partition, base_offset));
CREATE TABLE partition_starts (
    topic text NOT NULL, partition integer NOT NULL, log_start_offset bigint NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE topics (
    name text PRIMARY KEY, topic_id uuid NOT NULL UNIQUE, partitions integer NOT NULL);
"""


async def test_a_database_keyed_by_topic_name_is_migrated_to_topic_ids(
    pg: PostgresServer,
) -> None:
    """ensure_partition_schema gives the rows of a name-keyed database the id of their topic
    in the metadata store, drops those of topics it no longer holds, and keys the tables by
    topic id: the partition loads as before, and a topic of the same name with another id
    meets none of its rows."""
    admin = await asyncpg.connect(pg.dsn)
    try:
        await admin.execute("DROP DATABASE IF EXISTS migrated")
        await admin.execute("CREATE DATABASE migrated")
    finally:
        await admin.close()
    dsn = pg.dsn.rsplit("/", 1)[0] + "/migrated"
    connection = await asyncpg.connect(dsn)
    kept_id = uuid.uuid4()
    try:
        await connection.execute(_NAME_KEYED_DDL)
        await connection.execute("INSERT INTO topics VALUES ('kept', $1, 1)", kept_id)
        for topic in ("kept", "gone"):  # "gone" was deleted, its rows never dropped
            for base in (0, 10):
                data = batch(10, start_ts_ms=base + 1)
                set_base_offset_and_leader_epoch(data, 0, base, len(data) - 12, 0)
                await connection.execute(
                    "INSERT INTO partition_batches VALUES ($1, 0, $2, $3, $4, -1, $5)",
                    topic,
                    base,
                    base + 9,
                    base + 10,
                    bytes(data),
                )
            await connection.execute("INSERT INTO partition_starts VALUES ($1, 0, 5)", topic)
        await ensure_partition_schema(connection)
        await ensure_partition_schema(connection)  # idempotent
        found = await connection.fetch(
            "SELECT topic, topic_id, base_offset FROM partition_batches ORDER BY base_offset"
        )
        assert [tuple(r) for r in found] == [("kept", kept_id, 0), ("kept", kept_id, 10)]
        starts = await connection.fetch("SELECT topic, topic_id FROM partition_starts")
        assert [tuple(r) for r in starts] == [("kept", kept_id)]
        keys = await connection.fetchval(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'partition_batches'::regclass AND contype = 'p'"
        )
        assert keys == "PRIMARY KEY (topic_id, partition, base_offset)"
    finally:
        await connection.close()
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        await grant(pool, "kept", 0, NODE, 1)
        store = PgPartitionStore(pool, NODE)
        log_ = (await store.load("kept", 0, 1, topic_id=kept_id)).log
        assert (log_.log_start_offset, log_.next_offset) == (5, 20)
        _, last = append(log_, batch(3))
        await store.wait_durable(log_, last)
        assert [h.base_offset for h in split_batches(await store.read(log_, 5, 1 << 20))] == [
            0,
            10,
            20,
        ]
        other = (await store.load("kept", 0, 1, topic_id=uuid.uuid4())).log
        assert (other.log_start_offset, other.next_offset) == (0, 0)
    finally:
        await pool.close()


async def test_compaction_drops_aborted_data_and_compacts_committed_data(
    pool: asyncpg.Pool,
) -> None:
    """Kafka's transactional rules over the rows (storage/txn_cleaning.py): an aborted
    transaction's records go and never supersede anything, a committed one's are compacted
    like any record, the markers of transactions whose data the pass traversed stay."""
    store = PgPartitionStore(pool, NODE)
    await grant(pool, "txncmp", 0, NODE, 1)
    log_ = (await store.load("txncmp", 0, 1)).log
    now_ms = int(time.time() * 1000)
    append(log_, bytearray(client_batch([(b"k1", b"a", now_ms)])))  # 0
    append(log_, bytearray(txn_batch([b"b", b"x"], 7, 0, 0, keys=[b"k1", b"k2"])))  # 1-2
    append(log_, marker_batch(7, 0, 0, False, now_ms)[0])  # 3: ABORT
    append(log_, bytearray(txn_batch([b"c"], 8, 0, 0, keys=[b"k1"])))  # 4
    append(log_, marker_batch(8, 0, 0, True, now_ms)[0])  # 5: COMMIT
    _, last = append(log_, bytearray(client_batch([(b"k3", b"z", now_ms)])))  # 6
    await store.wait_durable(log_, last)
    span = await store.cleanable_range(log_, -1, now_ms, 0, 2**63 - 1)
    assert span.end_offset == 6
    done = await store.compact(log_, now_ms, 1_000, span.end_offset, [(7, 1, 3)])
    assert done.stats.records_dropped == 3  # a (superseded), b and x (aborted)
    assert await decoded(store, log_) == [(4, b"k1", b"c"), (6, b"k3", b"z")]
    bases = [
        r[0]
        for r in await pool.fetch(
            "SELECT base_offset FROM partition_batches WHERE topic = 'txncmp' ORDER BY 1"
        )
    ]
    assert bases == [3, 4, 5, 6]  # the markers stay

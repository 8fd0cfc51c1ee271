"""Topic partitions in PostgreSQL (coordinator/cluster/partition_store.py) against the local
log, in the same run (issue 22's cluster target: produce MB/s at least 30% of local), and
the takeover load rate. Storage alone, no server, one process; prints figures, asserts
nothing.

Produce: `--producers` coroutines append batches of `--batch-bytes` (one batch per append,
as a Produce of one partition carries) round-robin over `--partitions` partitions and wait
until each is durable, for `--seconds`: into PartitionLog + GroupCommitter (fsync rounds)
and into PgPartitionStore (one transaction per round) on a throwaway PostgreSQL with fsync
on. Figures: MB/s of batches acknowledged durable, appends/s, rounds, CPU seconds of this
process per MB (the database's CPU is not counted: it is another process).

Takeover: a partition of `--takeover-batches` idempotent batches of `--takeover-records`
records each (written by the store's own rounds) is loaded by a new owner: tail state and
producer state (`load` + ProducerStates.from_headers); batches/s and records/s.

    python -m tests.bench.bench_pg_partitions [--seconds 10] [--partitions 8]
        [--producers 32] [--batch-bytes 16384] [--takeover-batches 20000]
        [--takeover-records 50]

(as a module from the checkout's root).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

from groupcoord.coordinator.cluster.partition_store import (
    PgPartitionStore,
    ensure_partition_schema,
)
from groupcoord.coordinator.cluster.schema import partition_resource
from groupcoord.coordinator.topics.producers import ProducerStates
from groupcoord.protocol.batches import DefaultRecordBatchBuilder, parse_header
from groupcoord.storage import GroupCommitter, LogConfig, PartitionLog
from tests.postgres_server import postgres_server

NODE = 1
EPOCH = 1


def make_batch(batch_bytes: int, records: int = 10, producer_id: int = -1, seq: int = -1) -> bytes:
    value = b"v" * max(1, batch_bytes // records - 20)
    epoch = 0 if producer_id >= 0 else -1
    builder = DefaultRecordBatchBuilder(2, 0, 0, producer_id, epoch, seq, 10**8)
    for i in range(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=value, headers=[])
    return bytes(builder.build())


async def drive(
    seconds: float,
    producers: int,
    partitions: int,
    payload: bytes,
    append_and_wait: Callable[[int, bytearray], Awaitable[None]],
) -> tuple[float, int, float]:
    """(MB/s acknowledged, appends, CPU seconds) over `seconds` of closed-loop load."""
    done = 0
    stop = time.monotonic() + seconds

    async def producer(k: int) -> None:
        nonlocal done
        i = k
        while time.monotonic() < stop:
            await append_and_wait(i % partitions, bytearray(payload))
            done += 1
            i += producers

    cpu = time.process_time()
    started = time.monotonic()
    await asyncio.gather(*(producer(k) for k in range(producers)))
    elapsed = time.monotonic() - started
    return done * len(payload) / elapsed / 1e6, done, time.process_time() - cpu


async def local_run(
    directory: Path, args: argparse.Namespace, payload: bytes
) -> tuple[float, int, float, int]:
    committer = GroupCommitter()
    logs = [
        PartitionLog.open(directory / f"t-{p}", LogConfig(segment_bytes_max=256 * 1024 * 1024))
        for p in range(args.partitions)
    ]

    async def append_and_wait(p: int, buffer: bytearray) -> None:
        header = parse_header(buffer)
        base = logs[p].append(buffer, [header])
        await committer.wait_durable(logs[p], base + header.last_offset_delta)

    try:
        mbs, done, cpu = await drive(
            args.seconds, args.producers, args.partitions, payload, append_and_wait
        )
        return mbs, done, cpu, committer.rounds
    finally:
        await committer.close()
        for log_ in logs:
            log_.close()


async def grant(pool: asyncpg.Pool, topic: str, partitions: int) -> None:
    await pool.executemany(
        "INSERT INTO leases VALUES ($1, $2, $3, now() + interval '1 hour')"
        " ON CONFLICT (resource) DO UPDATE SET owner_node = $2, epoch = $3",
        [(partition_resource(topic, p), NODE, EPOCH) for p in range(partitions)],
    )


async def pg_run(
    pool: asyncpg.Pool, args: argparse.Namespace, payload: bytes
) -> tuple[float, int, float, int]:
    await grant(pool, "bench", args.partitions)
    store = PgPartitionStore(pool, NODE)
    logs = [(await store.load("bench", p, EPOCH)).log for p in range(args.partitions)]

    async def append_and_wait(p: int, buffer: bytearray) -> None:
        header = parse_header(buffer)
        base = logs[p].append(buffer, [header])
        await store.wait_durable(logs[p], base + header.last_offset_delta)

    mbs, done, cpu = await drive(
        args.seconds, args.producers, args.partitions, payload, append_and_wait
    )
    await store.close()
    return mbs, done, cpu, store.rounds


async def takeover(pool: asyncpg.Pool, args: argparse.Namespace) -> tuple[int, int, float, float]:
    """(batches read, records covered, seconds of load, seconds of producer-state rebuild)."""
    await grant(pool, "takeover", 1)
    store = PgPartitionStore(pool, NODE)
    log_ = (await store.load("takeover", 0, EPOCH)).log
    records = args.takeover_records
    producers = 100
    waits = []
    for i in range(args.takeover_batches):
        producer_id, seq = i % producers, (i // producers) * records
        buffer = bytearray(make_batch(records * 20, records, producer_id, seq))
        header = parse_header(buffer)
        base = log_.append(buffer, [header])
        waits.append(store.wait_durable(log_, base + header.last_offset_delta))
        if len(waits) >= 500:
            await asyncio.gather(*waits)
            waits = []
    await asyncio.gather(*waits)
    started = time.perf_counter()
    loaded = await PgPartitionStore(pool, NODE).load("takeover", 0, EPOCH)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    states = ProducerStates.from_headers(loaded.producer_headers)
    rebuild_s = time.perf_counter() - started
    assert len(states.producers) == producers and loaded.log.next_offset == log_.next_offset
    return len(loaded.producer_headers), loaded.log.next_offset, load_s, rebuild_s


async def main(args: argparse.Namespace) -> None:
    payload = make_batch(args.batch_bytes)
    with tempfile.TemporaryDirectory() as tmp, postgres_server(Path(tmp) / "pg") as pg:
        pool = await asyncpg.create_pool(pg.dsn, min_size=2, max_size=4)
        async with pool.acquire() as connection:
            await ensure_partition_schema(connection)
        local = await local_run(Path(tmp) / "local", args, payload)
        stored = await pg_run(pool, args, payload)
        batches, offsets, load_s, rebuild_s = await takeover(pool, args)
        await pool.close()
    print(
        f"produce, {args.producers} producers x {args.partitions} partitions, "
        f"{len(payload)} B batches, {args.seconds:.0f} s each, durable acks:"
    )
    print(f"{'store':<12}{'MB/s':>10}{'appends/s':>12}{'rounds':>9}{'CPU s/MB':>10}")
    for name, (mbs, done, cpu, rounds) in (("local log", local), ("postgresql", stored)):
        print(
            f"{name:<12}{mbs:>10.1f}{done / args.seconds:>12.0f}{rounds:>9}"
            f"{cpu / max(mbs * args.seconds, 1e-9):>10.4f}"
        )
    ratio = stored[0] / local[0] if local[0] else float("nan")
    print(f"postgresql / local: {ratio:.0%} (issue 22 target: at least 30%)")
    print(
        f"takeover: {batches} producer batches ({offsets} records) loaded in {load_s:.3f} s"
        f" ({batches / load_s:,.0f} batches/s, {offsets / load_s:,.0f} records/s);"
        f" producer state rebuilt in {rebuild_s:.3f} s"
        f" ({offsets / (load_s + rebuild_s):,.0f} records/s in all)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--producers", type=int, default=32)
    parser.add_argument("--batch-bytes", type=int, default=16384)
    parser.add_argument("--takeover-batches", type=int, default=20000)
    parser.add_argument("--takeover-records", type=int, default=50)
    asyncio.run(main(parser.parse_args()))

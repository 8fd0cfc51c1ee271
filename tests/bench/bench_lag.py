"""Consumer lag at scrape time: loop time to measure and export lag for many
group-partitions (issue 20, item 3; target: 10,000 group-partitions in under 100 ms of
loop time per scrape, never blocking the loop over 5 ms at a time).

    python -m tests.bench.bench_lag [--groups 100] [--partitions 100] [--batches 500]
                                    [--series-max 10000] [--restart]

In-process: a real TopicRegistry (one topic of --partitions partitions on disk, each
holding --batches one-record batches), and --groups groups each committed on every
partition at a random offset below the end (so every group-partition is behind and its
first unconsumed record's timestamp is needed). With --restart, the topics are closed and
opened again before scraping (recovery reads the active segments: a server's first scrape
after a start). Prints, for three scrapes in a row (the first finds every timestamp, in
the logs' tables of batch timestamps or by reading headers, the next ones hit the cache of
timestamps), the loop time of
LagMetrics.scrape (measure and render, yielding between steps) and its longest step
between two yields, in wall-clock time and in the process's CPU time (on a loaded
machine the wall clock also counts other processes' turns on the CPU). Never asserts:
figures only (a loaded machine's figures are noisy).
The cyclic collector is set as the server sets it (server/app.py: thresholds raised, and
what was built before serving frozen), so its passes cost what they cost in the server.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from groupcoord.coordinator.config import load_config
from groupcoord.coordinator.observability.lag_metrics import LagMetrics
from groupcoord.coordinator.topics.lag_reads import PartitionEnds
from groupcoord.coordinator.topics.registry import TopicRegistry
from groupcoord.protocol.batches import split_batches
from tests.support import make_batch

# What server/app.py's main sets.
SERVER_GC_THRESHOLDS = (50_000, 50, 100)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--batches", type=int, default=500)
    parser.add_argument("--series-max", type=int, default=10_000)
    parser.add_argument("--restart", action="store_true", help="close and reopen the topics")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(overrides={"data_dir": tmp, "metrics_listen": ""}, environ={})
        Path(tmp).mkdir(exist_ok=True)
        topics = TopicRegistry(config)
        topics.load()
        topic = topics.create("t", args.partitions, {})
        now_ms = int(time.time() * 1000)
        for partition in topic.partitions:
            for i in range(args.batches):
                buf = bytearray(make_batch(1, start_ts_ms=now_ms - 60_000 + i))
                partition.log.append(buf, split_batches(buf))
            partition.log.flush()
        if args.restart:
            topics.close()
            topics = TopicRegistry(config)
            topics.load()
        rng = random.Random(1)
        shards = [
            [
                (f"g{g}", "t", p, rng.randrange(args.batches), now_ms - 1000)
                for g in range(s, args.groups, 10)
                for p in range(args.partitions)
            ]
            for s in range(10)
        ]

        def sources() -> Iterator[tuple[list[tuple[str, str, int, int, int]], dict[str, int]]]:
            for committed in shards:
                yield committed, {group: 0 for group, _, _, _, _ in committed}

        lag = LagMetrics(sources, PartitionEnds(topics), args.series_max)
        gc.set_threshold(*SERVER_GC_THRESHOLDS)
        gc.freeze()
        asyncio.run(_measure(lag, args.groups * args.partitions))
        topics.close()


async def _measure(lag: LagMetrics, rows: int) -> None:
    longest = longest_cpu = 0.0
    stop = False

    async def probe() -> None:
        nonlocal longest, longest_cpu
        last, last_cpu = time.perf_counter(), time.process_time()
        while not stop:
            await asyncio.sleep(0)
            now, now_cpu = time.perf_counter(), time.process_time()
            longest = max(longest, now - last)
            longest_cpu = max(longest_cpu, now_cpu - last_cpu)
            last, last_cpu = now, now_cpu

    for attempt in range(3):
        longest = longest_cpu = 0.0
        stop = False
        task = asyncio.ensure_future(probe())
        await asyncio.sleep(0)
        started, started_cpu = time.perf_counter(), time.process_time()
        text = await lag.scrape()
        scraped = time.perf_counter() - started
        scraped_cpu = time.process_time() - started_cpu
        stop = True
        await task
        print(
            f"scrape {attempt}: {rows} group-partitions measured and rendered in"
            f" {scraped * 1000:.1f} ms of loop time, longest step {longest * 1000:.2f} ms"
            f" ({len(text)} bytes); CPU time {scraped_cpu * 1000:.1f} ms, longest step"
            f" {longest_cpu * 1000:.2f} ms"
        )


if __name__ == "__main__":
    main()

"""A process that appends to a cluster partition store as fast as the rounds allow and
prints each acknowledged append (`ack <base offset> <hex of the stored batch>`), flushed
at once: the SIGKILL test kills it and reads every acknowledged batch back.

    python -m tests.pg_partition_writer DSN TOPIC NODE_ID EPOCH
"""

from __future__ import annotations

import asyncio
import sys

import asyncpg

from groupcoord.coordinator.cluster.partition_store import PgPartitionStore
from groupcoord.protocol.batches import parse_header
from tests.support import make_batch


async def main(dsn: str, topic: str, node_id: int, epoch: int) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    store = PgPartitionStore(pool, node_id)
    loaded = await store.load(topic, 0, epoch)
    partition_log = loaded.log
    print("ready", flush=True)

    async def one(i: int) -> None:
        buffer = bytearray(make_batch(5, start_ts_ms=1000 + i))
        base = partition_log.append(buffer, [parse_header(buffer)])
        await store.wait_durable(partition_log, base + 4)
        sys.stdout.write(f"ack {base} {bytes(buffer).hex()}\n")
        sys.stdout.flush()

    i = 0
    while True:
        # Several appends in flight, so rounds carry more than one batch.
        await asyncio.gather(*(one(i + k) for k in range(8)))
        i += 8


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))

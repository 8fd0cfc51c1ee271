"""What reads pay for never serving a damaged batch (storage/segment.py, "Verification on
read"): a log of closed segments trusted at open is read whole twice, the first read
checking every batch (framing, offsets, CRC-32C), the second one none; Fetch-sized reads
likewise. Storage alone, no server; prints figures, asserts nothing.

    python -m tests.bench.bench_read_verify [--mib 256] [--batch-bytes 1000]

(as a module from the checkout's root, so this checkout's storage/ is what runs).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from groupcoord.protocol.batches import DefaultRecordBatchBuilder, split_batches
from groupcoord.storage import LogConfig, PartitionLog

CONFIG = LogConfig(segment_bytes_max=64 * 1024 * 1024)


def batch(value_bytes: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 10**7)
    builder.append(0, timestamp=1, key=None, value=b"v" * value_bytes, headers=[])
    return bytes(builder.build())


def build(directory: Path, total_bytes: int, batch_bytes: int) -> None:
    log = PartitionLog.open(directory, CONFIG)
    one = batch(batch_bytes)
    chunk = one * max(1, (1024 * 1024) // len(one))
    written = 0
    while written < total_bytes:
        buf = bytearray(chunk)
        log.append(buf, split_batches(buf))
        written += len(buf)
    log.flush()
    log.close()


def read_whole(log: PartitionLog, step_bytes: int, batch_size: int) -> tuple[float, int]:
    """CPU seconds spent in log.read (process time: the machine may be shared) reading
    the log whole in `step_bytes` reads, and bytes read (every batch is `batch_size`
    bytes holding one record)."""
    spent = 0.0
    offset = log.log_start_offset
    total = 0
    while offset < log.next_offset:
        started = time.process_time()
        data = log.read(offset, step_bytes)
        spent += time.process_time() - started
        total += len(data)
        offset += len(data) // batch_size
    return spent, total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--batch-bytes", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "p0"
        build(directory, args.mib * 1024 * 1024, args.batch_bytes)
        size = len(batch(args.batch_bytes))
        print(f"{'read size':>10} {'first read MiB/s':>17} {'later reads MiB/s':>18} {'ratio':>6}")
        for step in (64 * 1024, 1024 * 1024, 64 * 1024 * 1024):
            log = PartitionLog.open(directory, CONFIG)  # closed segments trusted, unread
            first_s, total = read_whole(log, step, size)
            later_s, _ = read_whole(log, step, size)
            log.close()
            mib = total / (1024 * 1024)
            print(
                f"{step // 1024:>8}Ki {mib / first_s:>17.0f} {mib / later_s:>18.0f}"
                f" {first_s / later_s:>6.2f}"
            )


if __name__ == "__main__":
    main()

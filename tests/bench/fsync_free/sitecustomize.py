"""Benchmarks only: put on a server's PYTHONPATH (peers.run_groupcoord(fsync_free=True),
`bench_transactions --peers ours-fsync-free`), it makes os.fsync and os.fdatasync no-ops in
that process, so a run shows what the disk's flushes cost: the server's rate with durable
writes made free. Run the server with `syncfs_min_logs=0` too (syncfs is called through
ctypes). Never on a server whose data matters: nothing it acknowledges is durable."""

import os


def _no_flush(fd: int) -> None:
    del fd


os.fsync = _no_flush
os.fdatasync = _no_flush

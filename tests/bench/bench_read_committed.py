"""A read_committed consumer's fetch throughput against read_uncommitted on the same data
(issue 18 target: at least 80%). A server is started; one partition is filled with
transactions (each `--batches-per-txn` batches of `--batch-bytes`, then a COMMIT marker,
every `--abort-every`-th one ABORTed), interleaved with a second producer's transactions so
that the aborted-transactions lists are not empty; then the partition is read whole with
raw Fetch v12 requests of 1 MiB, alternately read_uncommitted and read_committed, and the
best of `--rounds` rounds of each is printed in MB/s with their ratio. `--plain` fills the
partition with plain batches instead (no transactions: the read_uncommitted hot path, to
compare with another checkout running this same script).

    python -m tests.bench.bench_read_committed [--mib 64] [--rounds 5]

(as a module from the checkout's root, so this checkout's server is what runs). Prints
figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from tests.integration.test_clients import create_topic
from tests.integration.txn_support import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    consume,
    fetch,
    produce,
    txn_batch,
    write_markers,
)
from tests.rawclient import RawClient
from tests.support import ServerProcess, client_batch

TOPIC = "bench-rc"
FETCH_BYTES = 1 << 20


def fill(client: RawClient, args: argparse.Namespace) -> int:
    """Write the data; returns the number of data records written."""
    value = b"v" * (args.batch_bytes // args.records_per_batch)
    values = [value] * args.records_per_batch
    total = args.mib * 1024 * 1024
    written = 0
    records = 0
    if args.plain:
        batch = client_batch([(None, value, int(time.time() * 1000))] * args.records_per_batch)
        while written < total:
            r = produce(client, TOPIC, 0, batch, transactional_id=None)
            assert r.error_code == 0, r
            written += len(batch)
            records += args.records_per_batch
        return records
    seqs = {1: 0, 2: 0}
    txn = 0
    while written < total:
        for pid in (1, 2):
            for _ in range(args.batches_per_txn):
                batch = txn_batch(values, pid, 0, seqs[pid])
                r = produce(client, TOPIC, 0, batch)
                assert r.error_code == 0, r
                seqs[pid] += args.records_per_batch
                written += len(batch)
                records += args.records_per_batch
        for pid in (1, 2):
            commit = (txn + pid) % args.abort_every != 0
            errors = write_markers(client, [(pid, 0, commit, {TOPIC: [0]})])
            assert set(errors.values()) == {0}, errors
        txn += 1
    return records


def server_cpu_s(server: ServerProcess) -> float:
    """The server process's CPU seconds so far (user + system, /proc): what a read costs
    the server, whatever else the shared machine runs meanwhile."""
    assert server.proc is not None
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_whole(client: RawClient, isolation: int, end: int) -> tuple[float, int, int]:
    """(seconds, bytes fetched, records a consumer would see) reading [0, end)."""
    offset = 0
    fetched = 0
    seen = 0
    started = time.perf_counter()
    while offset < end:
        p = fetch(client, TOPIC, 0, offset, isolation, max_bytes=FETCH_BYTES)
        if not p.records:
            break
        fetched += len(p.records)
        aborted = (
            None
            if p.aborted_transactions is None
            else [(a.producer_id, a.first_offset) for a in p.aborted_transactions]
        )
        result = consume(p.records, aborted)
        seen += len(result.values)
        offset = result.next_offset
    return time.perf_counter() - started, fetched, seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024)
    parser.add_argument("--records-per-batch", type=int, default=16)
    parser.add_argument("--batches-per-txn", type=int, default=10)
    parser.add_argument("--abort-every", type=int, default=10)
    parser.add_argument("--plain", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # Made-up producers (no transaction coordinator knows them): KIP-890 verification off.
        server = ServerProcess(
            Path(tmp) / "data", ["--set", "transaction_partition_verification_enable=false"]
        ).start()
        try:
            with RawClient(server.bootstrap, timeout_s=60) as client:
                create_topic(server.bootstrap, TOPIC, 1)
                records = fill(client, args)
                end = fetch(client, TOPIC, 0, 0, READ_UNCOMMITTED, max_bytes=1).high_watermark
                best: dict[int, tuple[float, int, int]] = {}
                cpu = {READ_UNCOMMITTED: 0.0, READ_COMMITTED: 0.0}
                for _ in range(args.rounds):
                    for isolation in (READ_UNCOMMITTED, READ_COMMITTED):
                        cpu_before = server_cpu_s(server)
                        took = read_whole(client, isolation, end)
                        cpu[isolation] += server_cpu_s(server) - cpu_before
                        if isolation not in best or took[0] < best[isolation][0]:
                            best[isolation] = took
        finally:
            server.kill()
    print(
        f"{args.mib} MiB, {records} records in batches of {args.batch_bytes} bytes"
        + ("" if args.plain else f", {args.batches_per_txn} batches per transaction x 2 producers")
    )
    rates = {}
    per_cpu = {}
    names = {READ_UNCOMMITTED: "read_uncommitted", READ_COMMITTED: "read_committed"}
    for isolation, name in names.items():
        seconds, fetched, seen = best[isolation]
        rates[isolation] = fetched / seconds / 1e6
        per_cpu[isolation] = fetched * args.rounds / max(cpu[isolation], 1e-9) / 1e6
        print(
            f"{name:>17}: {rates[isolation]:8.1f} MB/s wall (best of {args.rounds}),"
            f" {per_cpu[isolation]:8.1f} MB per server CPU second"
            f"  ({fetched} bytes, {seen} records seen)"
        )
    wall = rates[READ_COMMITTED] / rates[READ_UNCOMMITTED]
    server = per_cpu[READ_COMMITTED] / per_cpu[READ_UNCOMMITTED]
    print(f"read_committed / read_uncommitted: {wall:.2f} wall, {server:.2f} server CPU")


if __name__ == "__main__":
    main()

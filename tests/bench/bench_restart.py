"""Coordinator restart benchmark: how fast the shard logs of many offset commits load.

    python tests/bench/bench_restart.py [--records 10000000] [--groups N] [--quick]
                                        [--data DIR] [--no-reference] [--runs 2]

1. Generates `__consumer_offsets-<n>` shard logs directly (no server): --groups classic
   consumer groups (default records / 100: 100,000 for 10 M records) of --partitions
   partitions each (default 10, one or two topics from a pool of 500, half of them with
   a topic id), each committing all its partitions at once, round after round in a
   shuffled order, until --records OffsetCommit records (default 10,000,000; --quick
   1,000,000) are written: an uncompacted log in which every key is committed
   records / (groups x partitions) times (10 by default). Keys are
   `encode_key(OffsetCommitKey)`, values OffsetCommitValue v4 as Kafka writes them
   (empty metadata for 19 groups in 20, a short JSON string for the others), spread over
   50 shards by `shard_for`, in uncompressed batches of 1,000 records (--batch) appended
   through `PartitionLog` with the server's segment size, then flushed and closed as a
   clean shutdown leaves them. --rebalance-every N adds a GroupMetadata record (one
   consumer member) before a group's commits every N rounds, as a rebalance would write
   (records that interrupt the runs of commits the fast loader deduplicates). --data
   keeps the logs in DIR and reuses them when the parameters match.
2. Times `CoordinatorService.load()` (built as coordinator/server/app.py builds it, under
   uvloop and the server's GC thresholds) in a fresh process, --runs times: the first
   reads the logs just written (in the page cache), the later ones are the restart after
   a SIGKILL (a new process opening the same files: what a kill leaves on disk is the
   same, minus the index files of the active segment, which are rebuilt by scanning it
   in both cases). Prints records/s, seconds, RSS before and after the load, RSS per
   offset (everything the load kept, groups included), the offset store's own size per
   offset (its dicts and packed entries, by sys.getsizeof), offsets and groups held.
3. The peer, measured in the same run on the same logs: the straightforward loader
   (aiokafka record objects, `decode_record` and `GroupShard.replay` per record, the GC
   running; the copy kept in tests/unit/test_fast_load.py), in a fresh process as well
   (--no-reference skips it). Kafka's own loader is quoted at ~4.4 M records/s
   (CoordinatorLoaderImpl, JVM), for scale only.

Prints one table (ours = the fast loader, peer = the reference loader, ratio =
ours / peer) and a final JSON line. Never asserts a time.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MARKER = "RESULT "
SHARDS = 50
TOPIC_POOL = 500
KAFKA_RECORDS_PER_S = 4_400_000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- generation ------------------------------------------------------------------------------


def generate(
    data_dir: Path,
    records: int,
    groups: int,
    partitions: int,
    batch_records: int,
    seed: int,
    rebalance_every: int = 0,
) -> dict[str, int]:
    import struct

    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from groupcoord.coordinator.config import Config
    from groupcoord.coordinator.runtime.partitioning import shard_for
    from groupcoord.coordinator.runtime.service import OFFSETS_TOPIC
    from groupcoord.protocol.batches import parse_header
    from groupcoord.protocol.records import (
        GroupMetadataKey,
        GroupMetadataValue,
        MemberMetadata,
        OffsetCommitKey,
        OffsetCommitValue,
        encode_key,
        encode_value,
    )
    from groupcoord.storage import LogConfig, PartitionLog

    rng = random.Random(seed)
    config = Config()
    log_config = LogConfig(
        segment_bytes_max=config.offsets_segment_bytes, retention_ms=-1, retention_bytes=-1
    )
    topic_ids = [
        uuid.UUID(int=rng.getrandbits(128)) if i % 2 == 0 else None for i in range(TOPIC_POOL)
    ]

    # Per group: its shard, its keys (bytes) and, per key, how to make a value.
    v4_bare = struct.Struct(">hqiBqB")  # v4, empty metadata, no tagged field
    v4_topic_id = struct.Struct(">hqiBq3s16s")  # v4, empty metadata, topic id tag
    group_shard: list[int] = []
    group_keys: list[list[tuple[bytes, int]]] = []  # (key bytes, topic index)
    group_metadata: list[str] = []
    for g in range(groups):
        group_id = f"svc-{g % 997:03d}.consumer-{g:06d}"
        group_shard.append(shard_for(group_id, SHARDS))
        first = (g * 7) % TOPIC_POOL
        if g % 3 == 0 and partitions > 1:  # two topics, split partitions
            half = partitions // 2
            parts = [(first, p) for p in range(half)]
            second = (first + 1) % TOPIC_POOL
            parts += [(second, p) for p in range(partitions - half)]
        else:
            parts = [(first, p) for p in range(partitions)]
        group_keys.append(
            [
                (encode_key(OffsetCommitKey(group_id, f"orders.events-{t:03d}", p)), t)
                for t, p in parts
            ]
        )
        group_metadata.append("" if g % 20 else f'{{"host":"worker-{g % 64}","run":{g}}}')

    def group_record(g: int, generation: int, ts: int) -> tuple[bytes, bytes]:
        """A one-member consumer group's GroupMetadata record after a rebalance."""
        group_id = f"svc-{g % 997:03d}.consumer-{g:06d}"
        member = MemberMetadata(
            member_id=f"rdkafka-{g:06d}-{generation}",
            group_instance_id=None,
            client_id="rdkafka",
            client_host="/10.0.0.1",
            rebalance_timeout=300_000,
            session_timeout=45_000,
            subscription=b"\x00\x01\x00\x00\x00\x01\x00\x11orders.events-000\xff\xff\xff\xff",
            assignment=b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff",
        )
        value = GroupMetadataValue(
            protocol_type="consumer",
            generation=generation,
            protocol="range",
            leader=member.member_id,
            current_state_timestamp=ts,
            members=(member,),
        )
        return encode_key(GroupMetadataKey(group_id)), encode_value(value)

    def value(offset: int, epoch: int, metadata: str, ts: int, topic: int) -> bytes:
        topic_id = topic_ids[topic]
        if metadata:
            return encode_value(
                OffsetCommitValue(
                    offset=offset,
                    leader_epoch=epoch,
                    metadata=metadata,
                    commit_timestamp=ts,
                    topic_id=topic_id,
                )
            )
        if topic_id is None:
            return v4_bare.pack(4, offset, epoch, 1, ts, 0)
        return v4_topic_id.pack(4, offset, epoch, 1, ts, b"\x01\x00\x10", topic_id.bytes)

    # The hand-packed values must be what encode_value writes.
    for topic in (0, 1):
        got = value(12345, 7, "", 1_700_000_000_000, topic)
        want = encode_value(
            OffsetCommitValue(
                offset=12345,
                leader_epoch=7,
                metadata="",
                commit_timestamp=1_700_000_000_000,
                topic_id=topic_ids[topic],
            )
        )
        assert got == want, (got, want)

    logs = [PartitionLog.open(data_dir / f"{OFFSETS_TOPIC}-{i}", log_config) for i in range(SHARDS)]
    pending: list[list[tuple[bytes, bytes]]] = [[] for _ in range(SHARDS)]
    bytes_written = 0
    base_ts = 1_700_000_000_000

    def seal(shard: int, ts: int) -> None:
        nonlocal bytes_written
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        append = builder.append
        for delta, (k, v) in enumerate(pending[shard]):
            append(delta, timestamp=ts, key=k, value=v, headers=[])
        data = bytearray(builder.build())
        logs[shard].append(data, [parse_header(data)])
        bytes_written += len(data)
        pending[shard] = []

    written = 0
    group_records = 0
    order = list(range(groups))
    rounds = 0
    started = time.monotonic()
    while written < records:
        rng.shuffle(order)
        for g in order:
            ts = base_ts + rounds * 5_000 + (g % 5_000)
            shard = group_shard[g]
            out = pending[shard]
            metadata = group_metadata[g]
            epoch = 3 + rounds // 4
            if rebalance_every and (rounds + g) % rebalance_every == 0:
                out.append(group_record(g, rounds + 1, ts))
                group_records += 1
            for i, (key, topic) in enumerate(group_keys[g]):
                offset = rounds * 1_000 + (g * 31 + i * 17) % 1_000
                out.append((key, value(offset, epoch, metadata, ts, topic)))
            written += len(group_keys[g])
            if len(out) >= batch_records:
                seal(shard, ts)
            if written >= records:
                break
        rounds += 1
        log(f"generated {written:,} records ({rounds} rounds, {time.monotonic() - started:.0f} s)")
    for shard in range(SHARDS):
        if pending[shard]:
            seal(shard, base_ts + rounds * 5_000)
    for log_ in logs:
        log_.flush()
        log_.close()
    return {
        "records": written + group_records,
        "commits": written,
        "group_records": group_records,
        "bytes": bytes_written,
        "rounds": rounds,
    }


# --- the measured process --------------------------------------------------------------------


def child(data_dir: str, loader: str) -> None:
    """Load every shard as the server does at start-up; print one RESULT line."""
    import asyncio
    import gc

    from groupcoord.coordinator.config import Config
    from groupcoord.coordinator.observability.logging import setup_logging
    from groupcoord.coordinator.runtime.runner import ShardRunner
    from groupcoord.coordinator.runtime.service import CoordinatorService, group_config
    from groupcoord.storage import GroupCommitter, LogConfig

    if loader == "reference":  # the load before the fast loader: its loop, the GC running
        from groupcoord.coordinator.runtime import runner
        from tests.unit.test_fast_load import reference_replay_log

        ShardRunner._replay_log = reference_replay_log  # type: ignore[method-assign]
        runner._pause_gc = runner._resume_gc = lambda: None  # type: ignore[assignment]

    setup_logging("warning")
    gc.set_threshold(50_000, 50, 100)  # as coordinator.server.app.run sets it
    config = Config(data_dir=data_dir)

    async def main() -> dict[str, float]:
        committer = GroupCommitter(waiters_max=config.durable_waiters_max)
        service = CoordinatorService(
            config.data_path,
            config.offsets_partitions,
            group_config(config),
            LogConfig(
                segment_bytes_max=config.offsets_segment_bytes,
                retention_ms=-1,
                retention_bytes=-1,
            ),
            committer,
        )
        rss_before = rss_bytes()
        cpu = time.process_time()
        started = time.perf_counter()
        await service.load()
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu
        rss_after = rss_bytes()
        failed = [r.shard_id for r in service.runners if r.state.value != "active"]
        store = sum(_store_bytes(r.shard.offsets) for r in service.runners)
        result = {
            "seconds": seconds,
            "cpu_seconds": cpu,
            "records": sum(r.loaded_records for r in service.runners),
            "offsets": sum(r.shard.offsets.offset_count() for r in service.runners),
            "groups": sum(len(r.shard.groups) for r in service.runners),
            "rss_before": rss_before,
            "rss_after": rss_after,
            "failed_shards": len(failed),
            "store_bytes": store,
        }
        await service.close()
        await committer.close()
        return result

    try:
        import uvloop

        result = uvloop.run(main())
    except ImportError:
        result = asyncio.run(main())
    print(MARKER + json.dumps(result), flush=True)


def _store_bytes(offsets: object) -> int:
    """sys.getsizeof of an OffsetManager's nested dicts and packed entries (group and topic
    names are shared with the group registry and not counted)."""
    total = 0
    stored = offsets._offsets  # type: ignore[attr-defined]
    total += sys.getsizeof(stored)
    for topics in stored.values():
        total += sys.getsizeof(topics)
        for parts in topics.values():
            total += sys.getsizeof(parts) + sum(map(sys.getsizeof, parts.values()))
    return total


def rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def measure(data_dir: Path, loader: str) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(data_dir), "--loader", loader],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            result: dict[str, float] = json.loads(line[len(MARKER) :])
            result["rate"] = result["records"] / result["seconds"]
            offsets = max(result["offsets"], 1)
            result["rss_per_offset"] = (result["rss_after"] - result["rss_before"]) / offsets
            result["store_per_offset"] = result["store_bytes"] / offsets
            return result
    raise RuntimeError(f"load child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


# --- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument(
        "--groups", type=int, help="default: records / 100 (every key committed 10 times)"
    )
    parser.add_argument("--partitions", type=int, default=10, help="partitions per group")
    parser.add_argument("--batch", type=int, default=1_000, help="records per batch")
    parser.add_argument(
        "--rebalance-every",
        type=int,
        default=0,
        help="every N rounds each group also writes a GroupMetadata record (0: never)",
    )
    parser.add_argument("--quick", action="store_true", help="1,000,000 records")
    parser.add_argument("--data", help="keep the generated logs here (reused if they match)")
    parser.add_argument("--runs", type=int, default=2, help="fast-loader processes")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference loader")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--loader", default="fast", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.loader)
        return
    if args.quick and args.records == parser.get_default("records"):
        args.records = 1_000_000
    if args.groups is None:
        args.groups = max(args.records // 100, 1)

    params = {
        "records": args.records,
        "groups": args.groups,
        "partitions": args.partitions,
        "batch": args.batch,
        "seed": args.seed,
        "rebalance_every": args.rebalance_every,
        "format": 2,
    }
    temp = None
    if args.data:
        data_dir = Path(args.data)
    else:
        temp = tempfile.mkdtemp(prefix="bench-restart-")
        data_dir = Path(temp)
    manifest = data_dir / "bench-params.json"
    try:
        if manifest.exists() and json.loads(manifest.read_text()).get("params") == params:
            generated = json.loads(manifest.read_text())["generated"]
            log(f"reusing logs in {data_dir}")
        else:
            if data_dir.exists():
                shutil.rmtree(data_dir)
            data_dir.mkdir(parents=True)
            log(f"generating {args.records:,} records in {data_dir}")
            generated = generate(
                data_dir,
                args.records,
                args.groups,
                args.partitions,
                args.batch,
                args.seed,
                args.rebalance_every,
            )
            manifest.write_text(json.dumps({"params": params, "generated": generated}))
        log(f"{generated['records']:,} records, {generated['bytes'] / 2**20:,.0f} MiB")

        runs = []
        for i in range(args.runs):
            result = measure(data_dir, "fast")
            what = "start" if i == 0 else "restart after SIGKILL (new process)"
            log(
                f"fast loader, {what}: {result['seconds']:.2f} s, "
                f"{result['rate'] / 1e6:.2f} M records/s, "
                f"{result['rss_per_offset']:.0f} B RSS per offset"
            )
            runs.append(result)
        reference = None
        if not args.no_reference:
            reference = measure(data_dir, "reference")
            log(
                f"reference loader: {reference['seconds']:.2f} s, "
                f"{reference['rate'] / 1e6:.2f} M records/s"
            )
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)

    best = min(runs, key=lambda r: r["seconds"])
    peer = reference or {}
    rows = []
    for metric, unit, key, scale in (
        ("load rate", "M records/s", "rate", 1e6),
        ("load time", "s", "seconds", 1.0),
        ("load CPU", "s", "cpu_seconds", 1.0),
        ("records replayed", "", "records", 1.0),
        ("offsets held", "", "offsets", 1.0),
        ("groups held", "", "groups", 1.0),
        ("RSS before load", "MiB", "rss_before", 2**20),
        ("RSS after load", "MiB", "rss_after", 2**20),
        ("RSS per offset", "B", "rss_per_offset", 1.0),
        ("offset store per offset", "B", "store_per_offset", 1.0),
    ):
        ours = best[key] / scale
        other = peer[key] / scale if key in peer else None
        ratio = ours / other if other else None
        rows.append((metric, unit, ours, other, ratio))
    times = ", ".join(f"{r['seconds']:.2f} s" for r in runs)
    print(
        f"\nCoordinator load: {generated['records']:,} records, {args.groups:,} groups x "
        f"{args.partitions} partitions, {SHARDS} shards. ours = fast loader (best of "
        f"{len(runs)} processes: {times}); peer = reference loader (record objects, "
        f"decode_record, replay); Kafka quotes ~{KAFKA_RECORDS_PER_S / 1e6:.1f} M records/s."
    )
    print_rows(["metric", "unit", "ours", "peer", "ratio"], rows)
    summary = {"params": params, "generated": generated, "fast": runs, "reference": reference}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == int(value) and abs(value) >= 1000:
            return f"{int(value):,}"
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_rows(header: list[str], rows: list[tuple[object, ...]]) -> None:
    cells = [header] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )


if __name__ == "__main__":
    main()

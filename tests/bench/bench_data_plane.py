"""Data-plane benchmark: our server vs Tansu, one after the other in one run.

    python tests/bench/bench_data_plane.py [--quick] [--json PATH] [--servers tansu,ours]

For each server (each measured alone, so the two never compete for the CPUs):

1. **RSS** (a fresh process): resident memory idle after start (before any
   topic), then after creating 1,000 empty partitions (10 topics x 100), given
   as growth per 100 partitions.
2. **Produce throughput** (a second fresh process, used for 2 and 3 too): one
   confluent-kafka Producer, acks=1, no compression, 1 KiB values,
   linger.ms=5, batch.size=1,000,000, a send queue big enough to hold every
   message, to a 1-partition topic created with AdminClient; N messages
   (1,000,000 ~ 1 GiB; --quick 100,000), timed from the first produce() to
   flush() done. The client's own ceiling is measured once, up front: the rate
   of the same produce() loop against a producer whose broker does not exist
   (messages are only queued). Each server row also shows the rate of the
   produce() loop itself during the real run; when the end-to-end rate is
   close to that loop rate the figure is the client's limit, not the server's.
3. **Fetch throughput**: one Consumer, assign() from the beginning of that
   topic, fetch.max.bytes 50 MiB, max.partition.fetch.bytes 10 MiB, consume()
   in batches of 10,000 until all N messages are read.
4. **Produce latency**, acks=all with enable.idempotence=true and linger.ms=1,
   at half the peak rate the same server reached in step 2 (--latency-rate
   sets a common rate instead), for 30 s (--quick 5 s) after a 1 s warm-up:
   time from the produce() call to the delivery callback, p50/p99/p99.9.
   Callbacks run inside poll(), which the paced loop calls whenever it is not
   producing (blocking up to 1 ms), so the figure includes up to ~1 ms of
   client-side scheduling slack. A second latency run at a fixed rate
   (--fixed-rate, default 10,000 msg/s) is the same on both servers. Each run
   reports whether it was overloaded (rate not reached, median latency of the
   last second of the window far above the first, or flush() draining for
   over 0.5 s: a growing backlog, so the percentiles measure a queue), and the
   CPU cores client + server kept busy.

Server CPU seconds (utime+stime of the server's process group) are recorded
for the produce and fetch phases, and the client's own CPU use is reported,
because on a 2-core machine client and server share the cores.

Prints one table (ours, tansu, ratio = ours / tansu) and, as the last line of
stdout, the figures as JSON (also written to --json PATH if given).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import (  # noqa: E402
    TANSU_VERSION,
    ensure_tansu,
    free_port,
    print_table,
    rss_bytes,
    run_groupcoord,
    run_tansu,
)

MiB = 1 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")

VALUE_BYTES = 1024
PRODUCE_TOPIC = "bench-produce"
LATENCY_TOPIC = "bench-latency"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- process accounting --------------------------------------------------------


def _group_pids(pgid: int) -> list[int]:
    """PIDs whose process group is ``pgid`` (the servers run in their own session)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            pids.append(int(entry))
    return pids or [pgid]


def group_cpu_seconds(pgid: int) -> float:
    """utime + stime of every process in the group, in seconds."""
    total = 0
    for pid in _group_pids(pgid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def group_rss_bytes(pgid: int) -> int:
    """Sum of VmRSS over the process group (normally just the server itself)."""
    total = 0
    for pid in _group_pids(pgid):
        try:
            total += rss_bytes(pid)
        except (OSError, RuntimeError):
            pass
    return total


def client_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system  # all threads of this process, librdkafka's included


# --- clients -------------------------------------------------------------------


def _quiet(err: object) -> None:
    pass


def create_topics(
    bootstrap: str, specs: list[tuple[str, int]], timeout: float = 120.0, exist_ok: bool = False
) -> None:
    """`exist_ok`: TOPIC_ALREADY_EXISTS taken as done (a cluster's topics outlive its nodes:
    they are in the metadata store)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "error_cb": _quiet})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in specs],
        request_timeout=timeout,
        operation_timeout=timeout,
    )
    for fut in futures.values():
        try:
            fut.result(timeout=timeout)
        except KafkaException as e:
            if not (exist_ok and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
    # Wait until Metadata shows every partition (creation may be asynchronous).
    deadline = time.monotonic() + timeout
    want = dict(specs)
    while True:
        md = admin.list_topics(timeout=10)
        have = {
            t: len(md.topics[t].partitions)
            for t in want
            if t in md.topics and md.topics[t].error is None
        }
        if have == want:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics not all visible: want {want}, have {have}")
        time.sleep(0.2)


def throughput_producer_config(bootstrap: str, n: int) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": 1,
        "enable.idempotence": False,
        "compression.type": "none",
        "linger.ms": 5,
        "batch.size": 1_000_000,
        # Big enough that produce() never blocks on a full queue: the whole run fits.
        "queue.buffering.max.messages": max(2 * n, 100_000),
        "queue.buffering.max.kbytes": max(2 * n * (VALUE_BYTES + 128) // 1024, 1 << 20),
        "log_level": 0,
        "error_cb": _quiet,
    }


def produce_loop(producer, topic: str, value: bytes, n: int) -> float:
    """The tight produce loop shared by the ceiling and the real run; returns its seconds."""
    produce, poll = producer.produce, producer.poll
    t0 = time.perf_counter()
    for i in range(n):
        produce(topic, value)
        if i % 10_000 == 9_999:
            poll(0)
    return time.perf_counter() - t0


def measure_client_ceiling(n: int, value: bytes) -> dict:
    """Rate of produce() calls when nothing is sent (no broker listens on the port)."""
    from confluent_kafka import Producer

    n = min(n, 300_000)
    port = free_port()  # nothing listens here
    p = Producer(throughput_producer_config(f"127.0.0.1:{port}", n))
    cpu0 = client_cpu_seconds()
    secs = produce_loop(p, PRODUCE_TOPIC, value, n)
    cpu = client_cpu_seconds() - cpu0
    p.purge()
    p.flush(1)
    return {
        "messages": n,
        "seconds": secs,
        "msgs_per_s": n / secs,
        "mib_per_s": n * len(value) / MiB / secs,
        "client_cpu_s": cpu,
    }


def latency_producer_config(bootstrap: str) -> dict:
    """Idempotent acks=all producer, as Spark's sink and librdkafka users run it."""
    return {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,  # implies acks=all
        "acks": "all",
        "compression.type": "none",
        "linger.ms": 1,
        "queue.buffering.max.messages": 10_000_000,
        "queue.buffering.max.kbytes": 4 << 20,
        "log_level": 0,
        "error_cb": _quiet,
    }


def bench_produce(
    peer, n: int, value: bytes, conf: dict | None = None, topic: str = PRODUCE_TOPIC
) -> dict:
    from confluent_kafka import Producer

    errors = []

    def on_error(err, msg):
        errors.append(str(err))

    conf = dict(conf or throughput_producer_config(peer, n))
    conf["delivery.report.only.error"] = True
    conf["on_delivery"] = on_error
    p = Producer(conf)
    p.list_topics(topic, timeout=10)  # connect and learn the leader before timing
    srv0, cli0 = group_cpu_seconds(peer.pid), client_cpu_seconds()
    t0 = time.perf_counter()
    loop_secs = produce_loop(p, topic, value, n)
    left = p.flush(600)
    secs = time.perf_counter() - t0
    srv, cli = group_cpu_seconds(peer.pid) - srv0, client_cpu_seconds() - cli0
    if left:
        raise RuntimeError(f"produce: {left} messages still undelivered after flush(600)")
    if errors:
        raise RuntimeError(f"produce: {len(errors)} delivery errors, first: {errors[0]}")
    return {
        "messages": n,
        "seconds": secs,
        "msgs_per_s": n / secs,
        "mib_per_s": n * len(value) / MiB / secs,
        "loop_seconds": loop_secs,
        "loop_msgs_per_s": n / loop_secs,
        "server_cpu_s": srv,
        "client_cpu_s": cli,
    }


def bench_fetch(peer, n: int, timeout: float, topic: str = PRODUCE_TOPIC) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    stats: list[dict] = []
    c = Consumer(
        {
            "bootstrap.servers": peer,
            # librdkafka's own counters, to tell the size of the Fetch responses.
            "statistics.interval.ms": 500,
            "stats_cb": lambda js: stats.append(json.loads(js)),
            "group.id": "bench-fetch",  # assign() only: no group join, no commits
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.max.bytes": 50 * MiB,
            "max.partition.fetch.bytes": 10 * MiB,
            "receive.message.max.bytes": 50 * MiB + 1 * MiB,
            "log_level": 0,
            "error_cb": _quiet,
        }
    )
    try:
        c.list_topics(topic, timeout=10)  # connect before timing
        srv0, cli0 = group_cpu_seconds(peer.pid), client_cpu_seconds()
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = nbytes = errors = 0
        first_error = None
        t_first = None
        deadline = t0 + timeout
        while got < n:
            msgs = c.consume(num_messages=10_000, timeout=1.0)
            for m in msgs:
                if m.error():
                    errors += 1
                    first_error = first_error or str(m.error())
                    continue
                got += 1
                nbytes += len(m.value())
            if t_first is None and got:
                t_first = time.perf_counter() - t0
            if time.perf_counter() > deadline:
                break
        secs = time.perf_counter() - t0
        srv, cli = group_cpu_seconds(peer.pid) - srv0, client_cpu_seconds() - cli0
        n_stats = len(stats)
        t_end = time.monotonic() + 3
        while len(stats) <= n_stats and time.monotonic() < t_end:
            c.poll(0.1)  # one more statistics event, covering the whole run
    finally:
        c.close()
    fetch_requests = fetch_rx_bytes = None
    if stats:
        for b in stats[-1].get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0:  # not the bootstrap placeholder
                fetch_requests = (fetch_requests or 0) + b.get("req", {}).get("Fetch", 0)
                fetch_rx_bytes = (fetch_rx_bytes or 0) + b.get("rxbytes", 0)
    if got < n:
        raise RuntimeError(
            f"fetch: read {got} of {n} in {secs:.0f}s ({errors} errors, first {first_error})"
        )
    return {
        "messages": got,
        "bytes": nbytes,
        "seconds": secs,
        "first_message_s": t_first,
        "msgs_per_s": got / secs,
        "mib_per_s": nbytes / MiB / secs,
        "error_events": errors,
        "fetch_requests": fetch_requests,
        "avg_fetch_response_mib": (
            fetch_rx_bytes / fetch_requests / MiB if fetch_requests else None
        ),
        "server_cpu_s": srv,
        "client_cpu_s": cli,
    }


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(q * len(sorted_values))) - 1))
    return sorted_values[i]


def bench_latency(peer, rate: float, duration: float, warmup: float, value: bytes) -> dict:
    from confluent_kafka import Producer

    p = Producer(latency_producer_config(peer))
    p.list_topics(LATENCY_TOPIC, timeout=10)
    # Let the idempotent producer get its producer id before the clock starts.
    p.produce(LATENCY_TOPIC, value)
    if p.flush(30):
        raise RuntimeError("latency: first message not delivered in 30 s")

    # Per message: produce() time and callback time (-1 on a delivery error),
    # in the order callbacks ran. Arrays keep millions of samples cheap.
    sent_at, acked_at = array("d"), array("d")
    a0, a1 = sent_at.append, acked_at.append
    produce, poll, now_ = p.produce, p.poll, time.perf_counter

    srv0, cli0 = group_cpu_seconds(peer.pid), client_cpu_seconds()
    start = now_()
    t_measure = start + warmup
    end = t_measure + duration
    sent = 0
    while True:
        now = now_()
        if now >= end:
            break
        due = int((now - start) * rate) - sent
        if due > 0:
            for _ in range(min(due, 1000)):
                t = now_()
                produce(
                    LATENCY_TOPIC,
                    value,
                    on_delivery=lambda err, msg, t=t: (a0(t), a1(now_() if err is None else -1.0)),
                )
            sent += min(due, 1000)
            poll(0)
        else:
            # Block in poll (serving delivery callbacks as they arrive) until the
            # next message is due; librdkafka's resolution is 1 ms.
            poll(0.001)
    produced_secs = now_() - start
    srv, cli = group_cpu_seconds(peer.pid) - srv0, client_cpu_seconds() - cli0
    t_flush = now_()
    left = p.flush(120)
    drain_s = now_() - t_flush
    ok = sorted(
        (t0, (t1 - t0) * 1000)
        for t0, t1 in zip(sent_at, acked_at, strict=True)
        if t1 >= 0 and t0 >= t_measure
    )
    errors = sum(1 for t1 in acked_at if t1 < 0)
    measured = sorted(ms for _, ms in ok)
    # Overload check. A backlog that keeps growing means the offered rate is
    # above what client + server sustain here, and the percentiles measure the
    # queue, not the server's latency. Signs: the loop could not offer the rate;
    # the median latency of the last second of the window is well above the
    # first second's; or flush() needed long to drain what was left at the end.
    first = sorted(ms for t0, ms in ok if t0 < t_measure + 1.0)
    last = sorted(ms for t0, ms in ok if t0 >= end - 1.0)
    p50_first, p50_last = percentile(first, 0.5), percentile(last, 0.5)
    achieved = sent / produced_secs
    backlog = bool(
        achieved < 0.97 * rate
        or (first and last and p50_last > 2 * p50_first + 10.0)
        or drain_s > 0.5
    )
    return {
        "target_msgs_per_s": rate,
        "achieved_msgs_per_s": achieved,
        "messages": sent,
        "measured_messages": len(measured),
        "undelivered": left,
        "delivery_errors": errors,
        "duration_s": duration,
        "warmup_s": warmup,
        "server_cpu_s": srv,
        "client_cpu_s": cli,
        "cores_busy": (srv + cli) / produced_secs,
        "p50_first_second_ms": p50_first,
        "p50_last_second_ms": p50_last,
        "drain_s": drain_s,
        "overloaded": backlog,
        "p50_ms": percentile(measured, 0.50),
        "p99_ms": percentile(measured, 0.99),
        "p999_ms": percentile(measured, 0.999),
        "max_ms": measured[-1] if measured else float("nan"),
        "mean_ms": sum(measured) / len(measured) if measured else float("nan"),
    }


def bench_rss(peer, settle: float) -> dict:
    time.sleep(settle)
    idle = group_rss_bytes(peer.pid)
    topics = [(f"bench-rss-{i}", 100) for i in range(10)]
    t0 = time.perf_counter()
    create_topics(peer, topics)
    create_secs = time.perf_counter() - t0
    time.sleep(settle)
    after = group_rss_bytes(peer.pid)
    partitions = sum(n for _, n in topics)
    return {
        "idle_mib": idle / MiB,
        "after_mib": after / MiB,
        "partitions": partitions,
        "growth_per_100_partitions_mib": (after - idle) / MiB / (partitions / 100),
        "create_seconds": create_secs,
        "processes": len(_group_pids(peer.pid)),
    }


# --- driver --------------------------------------------------------------------


def run_server(name: str, runner, work: Path, args, value: bytes, peak_override) -> dict:
    res: dict = {"errors": {}}

    def phase(key: str, fn):
        log(f"{name}: {key} ...")
        try:
            res[key] = fn()
            log(f"{name}: {key} done: {json.dumps(res[key], default=str)}")
        except Exception as e:  # report and go on with the other phases/server
            res["errors"][key] = f"{type(e).__name__}: {e}"
            log(f"{name}: {key} FAILED: {res['errors'][key]}")
            traceback.print_exc(file=sys.stderr)

    # 1. RSS, in a process of its own so the data runs don't colour it.
    try:
        with runner(free_port(), work / f"{name}-rss") as peer:
            res["pid_rss_run"] = peer.pid
            phase("rss", lambda: bench_rss(peer, args.settle))
    except Exception as e:
        res["errors"]["start_rss"] = f"{type(e).__name__}: {e}"
        log(f"{name}: start for RSS FAILED: {e}")

    # 2-4. Data plane, in a second fresh process.
    try:
        with runner(free_port(), work / f"{name}-data") as peer:
            res["pid_data_run"] = peer.pid
            phase(
                "topics",
                lambda: create_topics(peer, [(PRODUCE_TOPIC, 1), (LATENCY_TOPIC, 1)]) or {},
            )
            phase("produce", lambda: bench_produce(peer, args.messages, value))
            phase("fetch", lambda: bench_fetch(peer, args.messages, args.fetch_timeout))
            # The latency run's peak is that of the same producer (idempotent, acks=all,
            # linger 1 ms), measured unthrottled; the acks=1 1 MB-batch peak is not
            # reachable with that configuration on 2 cores.
            phase(
                "produce_acks_all",
                lambda: bench_produce(
                    peer, max(args.messages // 4, 10_000), value, latency_producer_config(peer)
                ),
            )
            rate = peak_override
            if rate is None and "produce_acks_all" in res:
                rate = res["produce_acks_all"]["msgs_per_s"] / 2
            if rate:
                phase(
                    "latency",
                    lambda: bench_latency(peer, rate, args.latency_seconds, args.warmup, value),
                )
            else:
                res["errors"]["latency"] = "skipped: no peak rate"
            if args.fixed_rate:
                phase(
                    "latency_fixed",
                    lambda: bench_latency(
                        peer, args.fixed_rate, args.latency_seconds, args.warmup, value
                    ),
                )
            res["rss_after_data_mib"] = group_rss_bytes(peer.pid) / MiB
    except Exception as e:
        res["errors"]["start_data"] = f"{type(e).__name__}: {e}"
        log(f"{name}: start for data runs FAILED: {e}")
    return res


def _get(res: dict, *path):
    for k in path:
        if not isinstance(res, dict) or k not in res:
            return None
        res = res[k]
    return res


ROWS = [
    # metric, unit, path, better
    ("produce acks=1", "msg/s", ("produce", "msgs_per_s"), "higher"),
    ("produce acks=1", "MiB/s", ("produce", "mib_per_s"), "higher"),
    ("  produce() loop rate in that run", "msg/s", ("produce", "loop_msgs_per_s"), None),
    ("  server CPU during produce", "s", ("produce", "server_cpu_s"), "lower"),
    ("  client CPU during produce", "s", ("produce", "client_cpu_s"), None),
    ("fetch", "msg/s", ("fetch", "msgs_per_s"), "higher"),
    ("fetch", "MiB/s", ("fetch", "mib_per_s"), "higher"),
    ("  Fetch requests", "", ("fetch", "fetch_requests"), None),
    ("  mean Fetch response", "MiB", ("fetch", "avg_fetch_response_mib"), None),
    ("  server CPU during fetch", "s", ("fetch", "server_cpu_s"), "lower"),
    ("  client CPU during fetch", "s", ("fetch", "client_cpu_s"), None),
    ("produce acks=all idempotent peak", "msg/s", ("produce_acks_all", "msgs_per_s"), "higher"),
    ("latency acks=all @ half that peak: rate", "msg/s", ("latency", "achieved_msgs_per_s"), None),
    ("  p50", "ms", ("latency", "p50_ms"), "lower"),
    ("  p99", "ms", ("latency", "p99_ms"), "lower"),
    ("  p99.9", "ms", ("latency", "p999_ms"), "lower"),
    ("  max", "ms", ("latency", "max_ms"), "lower"),
    ("  flush() drain after the last produce", "s", ("latency", "drain_s"), None),
    ("  backlog growing (overloaded)", "", ("latency", "overloaded"), None),
    ("  CPU cores busy (client+server)", "", ("latency", "cores_busy"), None),
    (
        "latency acks=all @ fixed rate: rate",
        "msg/s",
        ("latency_fixed", "achieved_msgs_per_s"),
        None,
    ),
    ("  p50", "ms", ("latency_fixed", "p50_ms"), "lower"),
    ("  p99", "ms", ("latency_fixed", "p99_ms"), "lower"),
    ("  p99.9", "ms", ("latency_fixed", "p999_ms"), "lower"),
    ("  max", "ms", ("latency_fixed", "max_ms"), "lower"),
    ("  flush() drain after the last produce", "s", ("latency_fixed", "drain_s"), None),
    ("  backlog growing (overloaded)", "", ("latency_fixed", "overloaded"), None),
    ("  CPU cores busy (client+server)", "", ("latency_fixed", "cores_busy"), None),
    ("RSS idle", "MiB", ("rss", "idle_mib"), "lower"),
    ("RSS after 1000 partitions", "MiB", ("rss", "after_mib"), "lower"),
    ("RSS growth per 100 partitions", "MiB", ("rss", "growth_per_100_partitions_mib"), "lower"),
    ("create 10x100 partitions", "s", ("rss", "create_seconds"), "lower"),
    ("RSS after data runs", "MiB", ("rss_after_data_mib",), None),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100k messages, 5 s latency run")
    ap.add_argument("--messages", type=int, help="messages to produce/fetch (default 1,000,000)")
    ap.add_argument("--latency-seconds", type=float, help="latency run length (default 30)")
    ap.add_argument(
        "--latency-rate",
        type=float,
        help="fixed rate (msg/s) for the latency run on both servers "
        "(default: half of each server's own peak)",
    )
    ap.add_argument(
        "--fixed-rate",
        type=float,
        default=10_000,
        help="a second latency run at this rate (msg/s), the same on both servers "
        "(default 10,000; 0 skips it)",
    )
    ap.add_argument("--servers", default="tansu,ours", help="comma list of tansu, ours")
    ap.add_argument("--json", type=Path, help="also write the JSON figures here")
    ap.add_argument("--work-dir", type=Path, help="parent of the temporary data dirs")
    ap.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    ap.add_argument(
        "--ours-arg",
        action="append",
        default=[],
        help="extra argument for `python -m groupcoord.coordinator serve` (repeatable)",
    )
    args = ap.parse_args(argv)
    args.messages = args.messages or (100_000 if args.quick else 1_000_000)
    args.latency_seconds = args.latency_seconds or (5.0 if args.quick else 30.0)
    args.warmup = 1.0
    args.settle = 2.0
    args.fetch_timeout = 600.0
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    for s in servers:
        if s not in ("tansu", "ours"):
            ap.error(f"unknown server {s!r}")

    value = os.urandom(VALUE_BYTES)
    ensure_tansu()
    t_start = time.perf_counter()

    log(f"client ceiling: produce() into a queue only, {min(args.messages, 300_000):,} msgs ...")
    ceiling = measure_client_ceiling(args.messages, value)
    log(f"client ceiling: {ceiling['msgs_per_s']:,.0f} msg/s")

    runners = {
        "tansu": run_tansu,
        "ours": lambda port, d: run_groupcoord(port, d, args.ours_arg),
    }
    results: dict[str, dict] = {}
    tmp = tempfile.mkdtemp(prefix="bench-data-plane-", dir=args.work_dir)
    work = Path(tmp)
    try:
        for name in servers:
            results[name] = run_server(name, runners[name], work, args, value, args.latency_rate)
    finally:
        if args.keep:
            log(f"data dirs and logs kept in {work}")
        else:
            import shutil

            shutil.rmtree(work, ignore_errors=True)

    rows = [
        {
            "metric": "client ceiling: produce() calls, no broker",
            "unit": "msg/s",
            "ours": ceiling["msgs_per_s"],
            "tansu": ceiling["msgs_per_s"],
            "ratio": "-",
        }
    ]
    ratios = {}
    for metric, unit, path, better in ROWS:
        o = _get(results.get("ours", {}), *path)
        t = _get(results.get("tansu", {}), *path)
        row = {"metric": metric, "unit": unit, "ours": o, "tansu": t}
        if better:
            row["better"] = better
        if isinstance(o, bool) or isinstance(t, bool):
            row["ratio"] = "-"
        elif isinstance(o, int | float) and isinstance(t, int | float) and t:
            ratios[".".join(path)] = o / t
        rows.append(row)

    title = (
        f"bench_data_plane: {args.messages:,} x {VALUE_BYTES} B, 1 partition, "
        f"latency {args.latency_seconds:g} s at "
        + (f"{args.latency_rate:,.0f} msg/s" if args.latency_rate else "half each server's peak")
        + f"; tansu {TANSU_VERSION} (memory-only); {os.cpu_count()} CPUs"
    )
    print()
    print_table(rows, title=title)
    for name, res in results.items():
        for key, err in res.get("errors", {}).items():
            print(f"  {name} {key}: {err}")
    lat = {n: _get(r, "latency", "target_msgs_per_s") for n, r in results.items()}
    if len({v for v in lat.values() if v}) > 1 and not args.latency_rate:
        print(
            "  note: latency runs use each server's own half-peak rate "
            + ", ".join(f"{n} {v:,.0f} msg/s" for n, v in lat.items() if v)
            + " (--latency-rate R compares at one rate)"
        )
    for name, res in results.items():
        for key in ("latency", "latency_fixed"):
            r = res.get(key)
            if r and r.get("overloaded"):
                print(
                    f"  note: {name} {key} at {r['target_msgs_per_s']:,.0f} msg/s was overloaded: "
                    f"median latency grew from {r['p50_first_second_ms']:,.1f} ms (first second) "
                    f"to {r['p50_last_second_ms']:,.1f} ms (last second), flush() drained "
                    f"for {r['drain_s']:.2f} s, achieved {r['achieved_msgs_per_s']:,.0f} msg/s, "
                    f"{r['cores_busy']:.2f} cores busy; its percentiles measure the backlog."
                )
    print(
        "  note: produce throughput is client-bound when it is close to the produce() loop "
        f"rate; the client's ceiling with no broker is {ceiling['msgs_per_s']:,.0f} msg/s "
        f"({ceiling['mib_per_s']:,.0f} MiB/s)."
    )

    doc = {
        "benchmark": "bench_data_plane",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {
            "messages": args.messages,
            "value_bytes": VALUE_BYTES,
            "quick": args.quick,
            "latency_seconds": args.latency_seconds,
            "latency_rate": args.latency_rate,
            "warmup_s": args.warmup,
            "ours_args": args.ours_arg,
        },
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "tansu_version": TANSU_VERSION,
        "client_ceiling": ceiling,
        "servers": results,
        "ratios_ours_over_tansu": ratios,
        "wall_seconds": time.perf_counter() - t_start,
    }
    text = json.dumps(doc, default=str, allow_nan=True)
    if args.json:
        args.json.write_text(json.dumps(doc, default=str, indent=2) + "\n")
    print(text)
    return 0 if all(not r.get("errors") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

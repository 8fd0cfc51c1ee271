"""Hostile-client benchmark (issue 16 targets): a connection flood from one address while
another is probed, and the server's memory under partial large frames.

    python tests/bench/bench_connection_flood.py [--attempts 12000] [--probe-s 10]
                                                 [--frames 10] [--frame-mib 100]

1. Flood. A server with its default limits. A prober on 127.0.0.2 sends ApiVersions on one
   connection, one request at a time (and opens a fresh connection every 10th probe), for
   --probe-s seconds alone (the peer: the same server unloaded), then again while a flooder
   process on 127.0.0.1 makes --attempts connection attempts as fast as it can and keeps
   every connection the server leaves open. Prints the probe's p50/p99/max on the
   established connection and for connect+request, the ratio of the flood's p99 to the
   unloaded one, how many of the flooder's connections the server kept and refused, and
   whether every probe was answered. Target: probe p99 < 10 ms.
2. Memory. A server with frame_bytes_max = --frame-mib MiB (so frames that large are let
   in, as the issue's 100 MB; the default 8 MiB refuses them outright): --frames
   connections each announce such a frame and send all of it but 1 MiB, in parallel.
   Prints the server's RSS before, its peak meanwhile, and whether a probe is answered
   after. Target: RSS < 300 MB.

Prints figures and a final JSON line; never asserts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.hostile import connect, rss_bytes, send_partial_frames  # noqa: E402
from tests.rawclient import RawClient, request_class  # noqa: E402
from tests.support import ServerProcess, serving  # noqa: E402

MiB = 1024 * 1024


def _api_versions(client: RawClient) -> None:
    m = sys.modules[request_class(18, 3).__module__]
    resp = client.request(
        18, 3, m.ApiVersionsRequest(client_software_name="probe", client_software_version="1")
    )
    assert resp.error_code == 0


def _client(sock: socket.socket) -> RawClient:
    client = RawClient.__new__(RawClient)
    client.sock, client.correlation_id = sock, 0
    return client


def probe(server: ServerProcess, seconds: float) -> dict[str, object]:
    """ApiVersions from 127.0.0.2 for `seconds`: latencies in ms on one connection, and of
    connect + request on a fresh one every 10th probe; failures counted."""
    held: list[float] = []
    fresh: list[float] = []
    failures = 0
    client = _client(connect(server, "127.0.0.2", timeout_s=10))
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
        started = time.perf_counter()
        try:
            if n % 10 == 0:
                with connect(server, "127.0.0.2", timeout_s=10) as sock:
                    _api_versions(_client(sock))
                fresh.append((time.perf_counter() - started) * 1000)
            else:
                _api_versions(client)
                held.append((time.perf_counter() - started) * 1000)
        except OSError:
            failures += 1
            client.close()
            client = _client(connect(server, "127.0.0.2", timeout_s=10))
        time.sleep(0.002)
    client.close()
    return {"held": _summary(held), "fresh": _summary(fresh), "failures": failures}


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    values = sorted(values)
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values), 3),
        "p99_ms": round(values[min(len(values) - 1, int(len(values) * 0.99))], 3),
        "max_ms": round(values[-1], 3),
    }


def flood(port: int, attempts: int, done: multiprocessing.Queue[tuple[int, int, float]]) -> None:
    """Make `attempts` connections from 127.0.0.1 and keep them; report how many the server
    kept open and how many it closed or refused, then hold them until killed."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks: list[socket.socket] = []
    failed = 0
    started = time.perf_counter()
    for _ in range(attempts):
        try:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.settimeout(5)
            sock.connect(("127.0.0.1", port))
            socks.append(sock)
        except OSError:
            failed += 1
            sock.close()
    seconds = time.perf_counter() - started
    time.sleep(1.5)  # the refused ones are closed by now
    kept = 0
    for sock in socks:
        sock.setblocking(False)
        try:
            closed = sock.recv(1) == b""
        except BlockingIOError:
            closed = False
        except OSError:
            closed = True
        kept += not closed
    done.put((kept, attempts - kept, seconds))
    time.sleep(3600)


def bench_flood(args: argparse.Namespace, data: Path) -> dict[str, object]:
    with serving(data / "flood") as server:
        unloaded = probe(server, args.probe_s)
        done: multiprocessing.Queue[tuple[int, int, float]] = multiprocessing.Queue()
        flooder = multiprocessing.Process(target=flood, args=(server.port, args.attempts, done))
        flooder.start()
        try:
            loaded = probe(server, args.probe_s)
            kept, refused, seconds = done.get(timeout=600)
        finally:
            flooder.kill()
            flooder.join()
        after = probe(server, 1)
    return {
        "attempts": args.attempts,
        "flood_seconds": round(seconds, 2),
        "kept": kept,
        "refused": refused,
        "unloaded": unloaded,
        "flooded": loaded,
        "after": after,
    }


def bench_memory(args: argparse.Namespace, data: Path) -> dict[str, object]:
    frame_bytes = args.frame_mib * MiB
    with serving(data / "memory", frame_bytes_max=frame_bytes) as server:
        assert server.proc is not None
        before = rss_bytes(server.proc.pid)
        socks, peak = send_partial_frames(server, args.frames, frame_bytes, frame_bytes - MiB)
        try:
            answered = True
            try:
                with connect(server, "127.0.0.2", timeout_s=10) as sock:
                    _api_versions(_client(sock))
            except OSError:
                answered = False
        finally:
            for sock in socks:
                sock.close()
    return {
        "frames": args.frames,
        "frame_mib": args.frame_mib,
        "rss_before_mib": round(before / MiB, 1),
        "rss_peak_mib": round(peak / MiB, 1),
        "probe_answered": answered,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--attempts", type=int, default=12_000)
    ap.add_argument("--probe-s", type=float, default=10.0)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--frame-mib", type=int, default=100)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        flood_result = bench_flood(args, data)
        memory = bench_memory(args, data)
    unloaded, flooded = flood_result["unloaded"], flood_result["flooded"]
    assert isinstance(unloaded, dict) and isinstance(flooded, dict)
    print(
        f"flood: {flood_result['attempts']} attempts from 127.0.0.1 in "
        f"{flood_result['flood_seconds']} s: {flood_result['kept']} kept, "
        f"{flood_result['refused']} refused"
    )
    for name in ("held", "fresh"):
        a, b = unloaded[name], flooded[name]
        ratio = b["p99_ms"] / a["p99_ms"] if a.get("p99_ms") else float("nan")
        print(
            f"probe from 127.0.0.2 ({name} connection): unloaded p50 {a.get('p50_ms')} ms "
            f"p99 {a.get('p99_ms')} ms; flooded p50 {b.get('p50_ms')} ms p99 {b.get('p99_ms')} "
            f"ms max {b.get('max_ms')} ms (n={b['n']}); p99 ratio {ratio:.2f}"
        )
    print(
        f"probe failures: unloaded {unloaded['failures']}, flooded {flooded['failures']}, "
        f"after {flood_result['after']['failures']}"  # type: ignore[index]
    )
    print(
        f"memory: {memory['frames']} x {memory['frame_mib']} MiB frames, all but 1 MiB sent: "
        f"RSS {memory['rss_before_mib']} MiB before, peak {memory['rss_peak_mib']} MiB; "
        f"probe answered: {memory['probe_answered']}"
    )
    print(json.dumps({"flood": flood_result, "memory": memory}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

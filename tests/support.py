"""Test support: start the real server as a subprocess on free loopback ports."""

from __future__ import annotations

import contextlib
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def serving(
    data_dir: Path, rlimits: dict[int, tuple[int, int]] | None = None, **settings: object
) -> Iterator[ServerProcess]:
    """A started server with `--set name=value` per setting, killed on exit; `rlimits`:
    resource limits set in the server process before it starts ({RLIMIT_x: (soft, hard)})."""
    args = [arg for name, value in settings.items() for arg in ("--set", f"{name}={value}")]
    proc = ServerProcess(data_dir, args, rlimits).start()
    try:
        yield proc
    finally:
        proc.kill()


def _ephemeral_ports() -> range:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


# Ports for test servers come from below the kernel's ephemeral range: a port bound and
# released there could be taken at once as the local port of any client's connection (a
# test's, or a flood benchmark's), and the server would then fail with EADDRINUSE.
_EPHEMERAL = _ephemeral_ports()


def _worker_ports(ports: range) -> range:
    """This pytest-xdist worker's share of `ports` (all of them outside xdist): workers pick
    from disjoint ranges, so two of them never both find a port free and both start on it."""
    try:
        index = int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw"))
        count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    except (KeyError, ValueError):
        return ports
    share = len(ports) // count
    return range(ports.start + index * share, ports.start + (index + 1) * share)


_SERVER_PORTS = _worker_ports(range(10_000, max(10_000 + 1_000, _EPHEMERAL.start)))


def free_port() -> int:
    """A loopback port that is free now and outside the ephemeral range (see above)."""
    for _ in range(200):
        port = random.choice(_SERVER_PORTS)
        if port in _EPHEMERAL:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # everything tried was taken: any port the kernel gives
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> int:
    """The first of `count` consecutive loopback ports free now (serve --workers takes
    port + i for worker i)."""
    for _ in range(200):
        base = free_port()
        if base + count - 1 not in _SERVER_PORTS:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(base + 1, base + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise RuntimeError(f"no {count} consecutive free ports")


class ServerProcess:
    """The groupcoord server in its own process, so tests can SIGKILL and restart it."""

    def __init__(
        self,
        data_dir: Path,
        extra_args: list[str] | None = None,
        rlimits: dict[int, tuple[int, int]] | None = None,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        """`host`: the address it listens at (its Kafka and metrics listeners); `prefix`:
        the command it runs under (e.g. `ip netns exec NAME`: tests/netns.py)."""
        self.data_dir = data_dir
        self.extra_args = extra_args or []
        self.rlimits = rlimits or {}
        self.host = host
        self.prefix = list(prefix)
        self.port = free_port()
        self.metrics_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 60) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            *self.prefix,
            sys.executable,
            "-m",
            "groupcoord.coordinator",
            "serve",
            "--listen",
            self.bootstrap,
            "--data-dir",
            str(self.data_dir),
            "--metrics-listen",
            f"{self.host}:{self.metrics_port}",
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        limits = self.rlimits

        def set_limits() -> None:  # in the child, before exec
            for which, values in limits.items():
                resource.setrlimit(which, values)

        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=log,
            stderr=log,
            start_new_session=True,
            preexec_fn=set_limits if limits else None,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"server did not start: {self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://{self.host}:{self.metrics_port}/health", timeout=1
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def metrics_text(self) -> str:
        with urllib.request.urlopen(
            f"http://{self.host}:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no flush, no clean-up, like a power cut for the process."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 20) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode)

    def restart(self) -> ServerProcess:
        self.kill()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def client_batch(
    records: Sequence[tuple[bytes | None, bytes | None, int]],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    seq: int = -1,
    compression: int = 0,
    headers: tuple[tuple[str, bytes], ...] = (),
    transactional: bool = False,
) -> bytes:
    """One record batch (magic v2) as a client builds it, with the codec the clients use:
    `records` are (key, value, timestamp), at offset deltas 0, 1, ..."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=int(transactional),
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=10**7,
    )
    for delta, (key, value, timestamp) in enumerate(records):
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=list(headers))
    return bytes(builder.build())


def make_batch(
    count: int,
    *,
    producer_id: int = -1,
    epoch: int = -1,
    seq: int = -1,
    start_ts_ms: int = 1000,
    step_ms: int = 1,
    headers: tuple[tuple[str, bytes], ...] = (),
) -> bytes:
    """An uncompressed record batch of `count` keyed records (client_batch); timestamps
    start_ts_ms, start_ts_ms + step_ms, ..."""
    return client_batch(
        [(b"k%d" % i, b"v%d" % i, start_ts_ms + i * step_ms) for i in range(count)],
        producer_id=producer_id,
        epoch=epoch,
        seq=seq,
        headers=headers,
    )


def counting_segment_reads(monkeypatch: Any) -> list[int]:
    """Counts Segment.pread calls (reads[0]) from now until the test ends."""
    from groupcoord.storage.segment import Segment

    reads = [0]
    real_pread = Segment.pread

    def pread(self: Segment, position: int, size: int) -> bytes:
        reads[0] += 1
        return real_pread(self, position, size)

    monkeypatch.setattr(Segment, "pread", pread)
    return reads


@contextlib.contextmanager
def batch_times_dropped(logs: Sequence[Any]) -> Iterator[None]:
    """The tables of batch timestamps (storage/batch_times.py) of every segment of `logs`
    (PartitionLogs) emptied for a while: lag reads walk the headers, as for segments
    whose batches were not noted (closed ones loaded from their index files at a start)."""
    from groupcoord.storage.batch_times import BatchTimes

    segments = []
    for log in logs:
        _, _, closed, active, _ = log.segments_snapshot()
        segments += [*closed, active]
    kept = [segment.batch_times for segment in segments]
    for segment in segments:
        segment.batch_times = BatchTimes()
    try:
        yield
    finally:
        for segment, times in zip(segments, kept, strict=True):
            segment.batch_times = times


def gate_fsync(monkeypatch: Any) -> tuple[threading.Event, threading.Event]:
    """Make every os.fsync wait until `release` is set; `entered` is set once one waits.
    For tests that act while a group-commit round is inside its fsync."""
    entered, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def gated_fsync(fd: int) -> None:
        entered.set()
        release.wait(5)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", gated_fsync)
    return entered, release


class WorkersProcess(ServerProcess):
    """`serve --workers N`: the parent process (what kill/terminate signal, with its
    workers: one process group) and N workers on consecutive ports."""

    def __init__(self, data_dir: Path, workers: int, extra_args: list[str] | None = None) -> None:
        super().__init__(data_dir, ["--workers", str(workers), *(extra_args or [])])
        self.workers = workers
        self.port = free_ports(workers)
        self.metrics_port = free_ports(workers)

    def bootstrap_of(self, index: int) -> str:
        return f"127.0.0.1:{self.port + index}"

    def worker_healthy(self, index: int) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port + index}/health", timeout=1
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def healthy(self) -> bool:
        return all(self.worker_healthy(i) for i in range(self.workers))

    def worker_pids(self) -> list[int]:
        """The parent's live child processes (its workers), by pid."""
        assert self.proc is not None
        pids: list[int] = []
        # Every thread's children: a worker restarted from another thread of the parent is
        # listed under that thread's task.
        for task in sorted(Path(f"/proc/{self.proc.pid}/task").glob("*")):
            try:
                pids += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
        return sorted(pids)

    def worker_pid(self, index: int, timeout_s: float = 30.0) -> int:
        """Worker `index`'s pid: the child holding the listening socket of port + index.
        Waits up to `timeout_s` for it (a worker restarted by an earlier test may not
        have bound its port yet)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for pid in self.worker_pids():
                if _listens(pid, self.port + index):
                    return pid
            if time.monotonic() > deadline:
                raise RuntimeError(f"no worker listens on {self.port + index}")
            time.sleep(0.2)


def _listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds a listening TCP socket on `port` (from /proc)."""
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:  # closed since the listing: a connection, not the listener
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for line in lines:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and int(local.split(":")[1], 16) == port and inode in inodes:
            return True
    return False


@contextlib.contextmanager
def serving_workers(data_dir: Path, workers: int, **settings: object) -> Iterator[WorkersProcess]:
    """A started `serve --workers N` with `--set name=value` per setting, killed on exit
    (the whole process group: parent and workers)."""
    args = [arg for name, value in settings.items() for arg in ("--set", f"{name}={value}")]
    proc = WorkersProcess(data_dir, workers, args)
    proc.start(timeout_s=120)  # several interpreters start at once on a loaded machine
    try:
        yield proc
    finally:
        proc.kill()

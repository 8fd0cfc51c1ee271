"""Apache Kafka 4.x as a reference broker, from the jars of tests/jvm/pom.xml.

A single node in KRaft mode, broker and controller in one JVM (process.roles=broker,controller),
on free loopback ports, its storage formatted in a fresh directory with a random cluster id.
Replication factors are 1, and everything else is Kafka's default: both group protocols on
(group.coordinator.rebalance.protocols=classic,consumer), the 3 s initial rebalance delay,
min.insync.replicas 1; so what it answers is what a stock Kafka answers.

Used three ways:
- `KafkaBroker(work_dir).start()` / `.stop()`, or the `kafka_broker(work_dir)` context manager;
- the module-scoped pytest fixture `reference_kafka` (import it into a conftest.py);
- as a script for benchmarks, printing the bootstrap address and serving until SIGINT/SIGTERM:
      python -m tests.jvm.kafka_broker [--port N] [--set flush.messages=1 ...]

Start-up is ready when the broker answers ApiVersions and lists itself in Metadata, and, unless
asked not to, when its group coordinator answers FindCoordinator (the first one creates
__consumer_offsets, which otherwise surprises the first test with COORDINATOR_NOT_AVAILABLE).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from groupcoord.protocol.api import build
from tests.jvm.artifacts import JvmArtifactsMissing, classpath
from tests.rawclient import RawClient, request_class
from tests.support import free_port

JAVA = os.environ.get("GROUPCOORD_TEST_JAVA", "java")
# Two cores shared with the server under test and the tests: a small heap, and a GC that does
# not claim every core for itself.
JVM_OPTS = (
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:ParallelGCThreads=2",
    "-XX:ConcGCThreads=1",
    "-Djava.awt.headless=true",
)
# What bin/kafka-server-start.sh runs a broker with when KAFKA_HEAP_OPTS and
# KAFKA_JVM_PERFORMANCE_OPTS are unset (its 1 GiB heap, kafka-run-class.sh's G1 settings): the
# benchmarks' "Kafka as configured by default".
START_SCRIPT_JVM_OPTS = (
    "-Xmx1G",
    "-Xms1G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
# A bound, not a wait: start() returns as soon as the broker is ready (10-20 s unloaded). Under
# the default run's two workers on a loaded machine a start-up has been seen to pass 60 s.
START_TIMEOUT_S = 180.0
STOP_GRACE_S = 15.0
NODE_ID = 0  # groupcoord serves as node 0 by default: the same ids on both sides

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.raft.name = org.apache.kafka.raft
logger.raft.level = warn
"""


def random_cluster_id() -> str:
    """A Kafka Uuid as `kafka-storage random-uuid` prints it: 16 random bytes, base64url,
    never starting with '-' (Kafka's Uuid.randomUuid rule: such an id reads as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def server_properties(
    port: int, controller_port: int, log_dir: Path, overrides: Mapping[str, object] = ()
) -> dict[str, str]:
    """The single-node KRaft configuration; `overrides` win (e.g. flush.messages=1)."""
    props = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        # Single node: the internal topics' replication factors and min ISRs must be 1.
        # Everything else stays Kafka's default (min.insync.replicas and
        # default.replication.factor already are 1, group.initial.rebalance.delay.ms 3000,
        # both group protocols on): a config written here would be reported with source
        # STATIC_BROKER_CONFIG instead of DEFAULT_CONFIG, unlike a stock broker.
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
    }
    props.update({k: str(v) for k, v in dict(overrides).items()})
    return props


class KafkaBroker:
    """One Apache Kafka process; `bootstrap` once started."""

    def __init__(
        self,
        work_dir: Path,
        overrides: Mapping[str, object] | None = None,
        port: int | None = None,
        jvm_opts: tuple[str, ...] = JVM_OPTS,
    ) -> None:
        self.work_dir = work_dir
        self.overrides = dict(overrides or {})
        self.jvm_opts = jvm_opts
        self.port = port or free_port()
        self.controller_port = free_port()
        self.cluster_id = random_cluster_id()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = work_dir / "kafka.log"
        self.start_s: float | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str, heap: tuple[str, ...] = JVM_OPTS) -> list[str]:
        return [
            JAVA,
            *heap,
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            "-cp",
            classpath("broker"),
            main,
            *args,
        ]

    def start(
        self, timeout_s: float = START_TIMEOUT_S, wait_coordinator: bool = True
    ) -> KafkaBroker:
        started = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        props_path = self.work_dir / "server.properties"
        props = server_properties(
            self.port, self.controller_port, self.work_dir / "data", self.overrides
        )
        props_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.work_dir / "log4j2.properties").write_text(_LOG4J2.format(log=self.log_path))
        fmt = subprocess.run(
            self._java(
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={self.cluster_id}",
                "--config",
                str(props_path),
                "--ignore-formatted",
                heap=("-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"),
            ),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka storage format failed: {fmt.stdout}{fmt.stderr}")
        stdout = open(self.work_dir / "kafka.stdout", "ab")
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(props_path), heap=self.jvm_opts),
            cwd=self.work_dir,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stdout.close()
        try:
            self._wait_ready(started + timeout_s, wait_coordinator)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - started
        return self

    def _wait_ready(self, deadline: float, wait_coordinator: bool) -> None:
        stages = [self._lists_itself] + ([self._coordinator_ready] if wait_coordinator else [])
        for ready in stages:
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(
                        f"kafka exited with {self.proc.returncode}: {self.log_tail()}"
                    )
                try:
                    if ready():
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kafka did not get ready: {self.log_tail()}")
                time.sleep(0.1)

    def _lists_itself(self) -> bool:
        """ApiVersions answers, and Metadata lists this broker (it is unfenced)."""
        with RawClient(self.bootstrap, timeout_s=2) as c:
            av = request_class(18, 3)
            resp = c.request(
                18, 3, build(av, client_software_name="probe", client_software_version="1")
            )
            if resp.error_code != 0:
                return False
            md = request_class(3, 12)
            meta = c.request(3, 12, build(md, topics=(), allow_auto_topic_creation=False))
            return any(b.node_id == NODE_ID for b in meta.brokers)

    def _coordinator_ready(self) -> bool:
        """FindCoordinator for a group answers without error (__consumer_offsets exists)."""
        with RawClient(self.bootstrap, timeout_s=5) as c:
            fc = request_class(10, 4)
            resp = c.request(10, 4, build(fc, key_type=0, coordinator_keys=("probe",)))
            return all(co.error_code == 0 for co in resp.coordinators)

    def log_tail(self, lines: int = 40) -> str:
        text = ""
        for path in (self.work_dir / "kafka.stdout", self.log_path):
            with contextlib.suppress(OSError):
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM (a controlled shutdown), then SIGKILL after `grace_s`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@contextlib.contextmanager
def kafka_broker(
    work_dir: Path | None = None, overrides: Mapping[str, object] | None = None, **kwargs: Any
) -> Iterator[KafkaBroker]:
    """A started reference broker, stopped (and its temp dir removed) on exit."""
    own_dir = work_dir is None
    path = Path(tempfile.mkdtemp(prefix="kafka-ref-")) if own_dir else work_dir
    assert path is not None
    broker = KafkaBroker(path, overrides, **kwargs).start()
    try:
        yield broker
    finally:
        broker.stop()
        if own_dir:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def reference_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One reference broker per test module (2 cores: never one per test). Fails, never
    skips, when the JVM artifacts cannot be had."""
    try:
        classpath("broker")
    except JvmArtifactsMissing as exc:
        pytest.fail(f"reference Kafka unavailable: {exc}", pytrace=False)
    with kafka_broker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=None, help="listener port (default: free)")
    parser.add_argument("--dir", type=Path, default=None, help="work dir (default: a temp dir)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="a broker config"
    )
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    with kafka_broker(args.dir, overrides, port=args.port) as broker:
        print(f"bootstrap={broker.bootstrap} started_in_s={broker.start_s:.1f}", flush=True)
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        try:
            while not stop and broker.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

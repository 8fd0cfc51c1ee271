"""The Java client programs of tests/jvm/java/: compiled once, each run in its own JVM.

`compiled()` compiles every source against the `clients` classpath (kafka-clients 4.x) into
tests/jvm/target/java-classes/<hash of the sources, the classpath and javac's version>/,
which later runs reuse. `run_program()` starts one program in a fresh JVM (its own process
group), waits at most `timeout_s`, kills the whole group if it is still running, and returns
the JSON lines it printed on stdout (Out.java: one object per line, {"e": event, ...}).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.jvm.artifacts import JVM_DIR, classpath

SOURCES_DIR = JVM_DIR / "java"
CLASSES_ROOT = JVM_DIR / "target" / "java-classes"
JAVA = os.environ.get("GROUPCOORD_TEST_JAVA", "java")
JAVAC = os.environ.get("GROUPCOORD_TEST_JAVAC", "javac")
# Short-lived client JVMs on 2 shared cores: the C1 compiler only, the class-data archive
# when the JDK has one, one GC thread, a small heap; slf4j-simple warns only (to stderr).
JVM_FLAGS = (
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-XX:+UseSerialGC",
    "-Xmx256m",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
)
COMPILE_TIMEOUT_S = 300


def _javac_version() -> str:
    out = subprocess.run(
        [JAVAC, "-version"], capture_output=True, text=True, timeout=60, check=True
    )
    return (out.stdout + out.stderr).strip()


def compiled() -> Path:
    """The directory of the compiled programs, compiling them if this tree has not yet."""
    sources = sorted(SOURCES_DIR.glob("*.java"))
    cp = classpath("clients")
    digest = hashlib.sha256(f"{cp}\n{_javac_version()}\n".encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    target = CLASSES_ROOT / digest.hexdigest()[:16]
    if (target / ".complete").is_file():
        return target
    CLASSES_ROOT.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="compiling-", dir=CLASSES_ROOT))
    try:
        result = subprocess.run(
            [JAVAC, "-Xlint:all,-deprecation,-serial", "-d", str(staging), "-cp", cp]
            + [str(s) for s in sources],
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"javac failed:\n{result.stdout}{result.stderr}")
        (staging / ".complete").write_text("")
        with contextlib.suppress(OSError):  # another run finished the same tree first
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


@dataclass
class ProgramRun:
    """What one program printed; `label` names the program, its target and its log files."""

    label: str
    events: list[dict[str, Any]]
    returncode: int
    stderr_path: Path

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["e"] == kind]

    def one(self, kind: str, **match: Any) -> dict[str, Any]:
        found = [e for e in self.of(kind) if all(e.get(k) == v for k, v in match.items())]
        assert len(found) == 1, f"{self.label}: {len(found)} {kind!r} lines matching {match}"
        return found[0]

    def stderr_tail(self, lines: int = 25) -> str:
        text = self.stderr_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def assert_completed(self) -> None:
        """Exit 0 after "done", and no member failed or lost a commit. Kafka Streams' state
        listener reports NOT_RUNNING from its own thread, which may print after "done": state
        lines after it are not part of the run."""
        problems = self.of("timeout") + self.of("error") + self.of("member_error")
        problems += self.of("commit_failed")
        last = [e for e in self.events if e["e"] != "state"][-1:]
        ok = self.returncode == 0 and last and last[0]["e"] == "done"
        assert ok and not problems, (
            f"{self.label}: exit {self.returncode}, problems {problems}, last lines "
            f"{self.events[-5:]}\nstderr:\n{self.stderr_tail()}"
        )


@dataclass
class StartedProgram:
    """A program running in its own JVM (start_program); `finish` waits for it."""

    label: str
    proc: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path

    def events(self) -> list[dict[str, Any]]:
        """The JSON lines printed so far."""
        return [
            json.loads(line)
            for line in self.stdout_path.read_text(errors="replace").splitlines()
            if line.startswith("{")  # the JVM itself may print warnings on stdout
        ]

    def finish(self, timeout_s: float) -> ProgramRun:
        """Waits at most `timeout_s` for the program to exit; SIGKILLs its process group then
        and fails, naming its last lines."""
        try:
            returncode = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            returncode = -1
        run = ProgramRun(self.label, self.events(), returncode, self.stderr_path)
        if returncode == -1:
            raise AssertionError(
                f"{self.label}: killed after {timeout_s:.0f} s; last lines {run.events[-5:]}\n"
                f"stderr:\n{run.stderr_tail()}"
            )
        return run


def start_program(
    classes: Path,
    main: str,
    args: list[str],
    log_dir: Path,
    label: str,
    clients: str = "clients",
) -> StartedProgram:
    """Starts `main` in its own JVM (its own process group), its output in `log_dir`;
    `clients`: the Maven module whose classpath it runs with ("clients39": kafka-clients
    3.9, for the programs whose calls 3.9 has too)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = log_dir / f"{label}.out", log_dir / f"{label}.err"
    cmd = [JAVA, *JVM_FLAGS, "-cp", f"{classes}{os.pathsep}{classpath(clients)}", main, *args]
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, start_new_session=True)
    return StartedProgram(label, proc, stdout_path, stderr_path)


def run_program(
    classes: Path,
    main: str,
    args: list[str],
    log_dir: Path,
    label: str,
    timeout_s: float,
    clients: str = "clients",
) -> ProgramRun:
    """Runs `main` in its own JVM; SIGKILLs its process group after `timeout_s`."""
    return start_program(classes, main, args, log_dir, label, clients).finish(timeout_s)

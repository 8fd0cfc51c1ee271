"""The JVM artifacts of tests/jvm/pom.xml: resolve them with Maven, hand out classpaths.

One command resolves every module into the local repository (~/.m2, cached between runs) and
writes tests/jvm/<module>/target/classpath.txt:

    python -m tests.jvm.artifacts

It tries offline first (everything cached: no network, a few seconds), then online. When the
registry cannot be reached, or `java`/`mvn` are missing, it says so and exits non-zero; the
tests that need a classpath then FAIL with the same message (never skip: CI must not go green
without having run them).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

JVM_DIR = Path(__file__).resolve().parent
POM = JVM_DIR / "pom.xml"
MODULES = ("broker", "clients", "clients39", "spark")
RESOLVE_TIMEOUT_S = 900

_NETWORK_SIGNS = (
    "Could not transfer",
    "Unknown host",
    "UnknownHost",
    "Connection refused",
    "Connect timed out",
    "Network is unreachable",
    "Temporary failure in name resolution",
)


class JvmArtifactsMissing(RuntimeError):
    """The classpaths could not be produced; the message says why and what to run."""


def classpath_file(module: str) -> Path:
    return JVM_DIR / module / "target" / "classpath.txt"


def _resolved() -> bool:
    return all(classpath_file(m).is_file() for m in MODULES)


def _mvn(offline: bool) -> subprocess.CompletedProcess[str]:
    args = ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(POM)]
    if offline:
        args.append("-o")
    args.append("generate-resources")
    return subprocess.run(
        args, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, check=False
    )


def _explain(output: str) -> str:
    errors = [line for line in output.splitlines() if "ERROR" in line][:3]
    detail = "\n".join(errors) or output[-2000:]
    if any(sign in output for sign in _NETWORK_SIGNS):
        return (
            "the Maven registry could not be reached, so the JVM artifacts of "
            f"{POM.relative_to(JVM_DIR.parent.parent)} are not in ~/.m2:\n{detail}"
        )
    return f"mvn could not resolve {POM}:\n{detail}"


def resolve() -> None:
    """Resolve every module and write its classpath file; raise JvmArtifactsMissing if not."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        _fail(f"{' and '.join(missing)} not found on PATH: the JVM tests need a JDK and Maven")
    result = _mvn(offline=True)
    if result.returncode != 0:
        result = _mvn(offline=False)
    if result.returncode != 0 or not _resolved():
        _fail(_explain(result.stdout + result.stderr))


# A failed resolution is tried once per process: every later test reports the same reason
# instead of waiting for Maven again.
_failure: list[str] = []


def _fail(reason: str) -> None:
    _failure.append(reason)
    raise JvmArtifactsMissing(reason)


def classpath(module: str) -> str:
    """The runtime classpath of one module, resolving first if this checkout has none yet.

    Raises JvmArtifactsMissing (with the reason) when they cannot be had."""
    if module not in MODULES:
        raise ValueError(f"unknown JVM module {module!r}, not one of {MODULES}")
    if not classpath_file(module).is_file():
        if _failure:
            raise JvmArtifactsMissing(_failure[0])
        resolve()
    return classpath_file(module).read_text().strip()


def main() -> int:
    started = time.monotonic()
    try:
        resolve()
    except (JvmArtifactsMissing, subprocess.TimeoutExpired) as exc:
        print(f"JVM artifacts NOT resolved: {exc}", file=sys.stderr)
        print("The JVM tests will fail with this reason.", file=sys.stderr)
        return 1
    for module in MODULES:
        jars = classpath_file(module).read_text().strip().split(":")
        print(f"{module}: {len(jars)} jars -> {classpath_file(module).relative_to(JVM_DIR)}")
    print(f"JVM artifacts resolved in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""PySpark with Spark's Kafka connector (tests/jvm/spark/pom.xml), for tests/jvm/test_spark.py.

`spark_session(work_dir)` starts one local SparkSession sized for two shared cores: local[2],
two shuffle partitions, no UI, a 512 MB driver, everything Spark writes under `work_dir`.
The connector reaches Spark as local jars (spark.jars, from ~/.m2, resolved by
`python -m tests.jvm.artifacts`), never as spark.jars.packages: no network at test time.

What is missing to start it (pyspark, the version the connector matches, a JDK 17+, the
jars) is raised as SparkUnavailable, saying what and how to get it; the tests fail with it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jvm.artifacts import POM, JvmArtifactsMissing, classpath

# Spark 4.0 runs on Java 17 and 21.
MIN_JAVA = 17
# Driver and executors share one JVM in local mode; the executors' consumers and producers
# are small. 512 MB leaves the other JVM (the reference Kafka) and the server room.
DRIVER_MEMORY = "512m"
# Short jobs on small data: the C1 compiler only and one GC thread halve the JVM's CPU over
# the module (34 s against 69 s with C2 and G1, measured on the 2-core machine).
JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
INSTALL_HINT = "pip install -e '.[test]' (its spark extra pins pyspark to the connector's version)"


class SparkUnavailable(RuntimeError):
    """PySpark cannot start here; the message says what is missing and how to get it."""


def connector_spark_version() -> str:
    """The Spark version of the connector in tests/jvm/pom.xml (pyspark must match it)."""
    found = re.search(r"<spark\.version>([^<]+)</spark\.version>", POM.read_text())
    if found is None:
        raise SparkUnavailable(f"no <spark.version> in {POM}")
    return found.group(1).strip()


def _pyspark_home() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise SparkUnavailable(f"pyspark is not installed ({exc}): {INSTALL_HINT}") from exc
    wanted = connector_spark_version()
    if pyspark.__version__ != wanted:
        raise SparkUnavailable(
            f"pyspark {pyspark.__version__} is installed but the connector of {POM.name} is "
            f"for Spark {wanted}: pip install pyspark=={wanted}"
        )
    return Path(pyspark.__file__).resolve().parent


def _java() -> str:
    """The java that Spark's launcher (bin/spark-class) runs: $JAVA_HOME/bin/java, else PATH's."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None or not os.access(java, os.X_OK):
        raise SparkUnavailable(
            f"PySpark needs a JDK {MIN_JAVA}+: "
            + (f"JAVA_HOME={java_home} has no bin/java" if java_home else "no java on PATH")
            + " (Debian/Ubuntu: apt-get install openjdk-17-jdk-headless)"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    found = re.search(r'version "(\d+)', out.stderr + out.stdout)
    if found is None or int(found.group(1)) < MIN_JAVA:
        raise SparkUnavailable(
            f"Spark 4 needs Java {MIN_JAVA}+, {java} is: {(out.stderr or out.stdout).strip()}"
        )
    return java


def _artifact(jar: str) -> str:
    """A jar's artifact name without its version: slf4j-api-2.0.16.jar -> slf4j-api."""
    found = re.match(r"(.+?)-\d[^/]*\.jar$", Path(jar).name)
    return found.group(1) if found else Path(jar).name


def connector_jars(pyspark_home: Path) -> list[str]:
    """The connector and its dependencies, less the artifacts pyspark already ships (its
    own jars come first on the driver's classpath, so a second copy would never load)."""
    try:
        jars = classpath("spark").split(":")
    except JvmArtifactsMissing as exc:
        raise SparkUnavailable(f"the Spark connector's jars are not resolved: {exc}") from exc
    shipped = {_artifact(str(jar)) for jar in (pyspark_home / "jars").glob("*.jar")}
    missing = [jar for jar in jars if not Path(jar).is_file()]
    if missing:
        raise SparkUnavailable(
            f"jars of tests/jvm/spark/target/classpath.txt are gone: {missing[:3]}; "
            "run python -m tests.jvm.artifacts"
        )
    return [jar for jar in jars if _artifact(jar) not in shipped]


def prerequisites() -> tuple[Path, list[str]]:
    """pyspark's home and the jars to pass; raises SparkUnavailable saying what is missing.
    Cheap (no JVM but `java -version`): tests check it before starting brokers."""
    home = _pyspark_home()
    _java()
    return home, connector_jars(home)


@contextlib.contextmanager
def spark_session(
    work_dir: Path, jvm_flags: str = JVM_FLAGS, driver_memory: str = DRIVER_MEMORY
) -> Iterator[Any]:
    """A started local SparkSession with the connector, stopped on exit. `jvm_flags` and
    `driver_memory`: the tests' (short jobs on small data) unless a benchmark says."""
    home, jars = prerequisites()
    from pyspark.sql import SparkSession

    # The launcher reads these from the environment: the pinned pyspark's own Spark (not
    # some SPARK_HOME of the machine), loopback only (no lookup of this host's name), and
    # this interpreter for any Python worker; scratch files under work_dir.
    env = {
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(work_dir / "local"),
        "PYSPARK_PYTHON": sys.executable,
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("groupcoord-spark-tests")
            .config("spark.jars", ",".join(jars))
            .config("spark.driver.memory", driver_memory)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.warehouse.dir", str(work_dir / "warehouse"))
            .config("spark.driver.extraJavaOptions", jvm_flags)
            .getOrCreate()
        )
    except Exception as exc:
        raise SparkUnavailable(f"PySpark did not start: {exc}") from exc
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


def require_spark() -> None:
    """`prerequisites()` for a test fixture, before it starts brokers: what is missing fails
    the test (never a skip), saying what."""
    try:
        prerequisites()
    except SparkUnavailable as exc:
        pytest.fail(f"PySpark unavailable: {exc}", pytrace=False)


@contextlib.contextmanager
def spark_session_or_fail(work_dir: Path) -> Iterator[Any]:
    """`spark_session` for a test fixture: a session that cannot start fails the test."""
    try:
        with spark_session(work_dir) as session:
            yield session
    except SparkUnavailable as exc:
        pytest.fail(f"PySpark unavailable: {exc}", pytrace=False)

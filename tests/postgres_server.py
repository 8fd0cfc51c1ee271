"""A real PostgreSQL for the cluster tests: Debian's `postgresql` package, a throwaway cluster
made by initdb in a temp directory and started by pg_ctl on a free loopback port.

Never a mock (issue 22). `.ci/run` installs the package when initdb is missing; here a missing
initdb fails the test loudly, it never skips. PostgreSQL refuses to run as root, so as root the
server runs as the `postgres` user the package creates (runuser), owning its directory.

    with postgres_server(tmp_path) as pg:
        dsn = pg.dsn          # postgresql://groupcoord@127.0.0.1:PORT/groupcoord
        pg.restart()          # stop -m fast and start again on the same port and data
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.support import free_port

DATABASE = "groupcoord"
USER = "groupcoord"


def pg_bin(name: str) -> str:
    """The path of PostgreSQL program `name` (initdb, pg_ctl, psql): on PATH, else the newest
    /usr/lib/postgresql/*/bin; fails the test when PostgreSQL is not installed."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not candidates:
        pytest.fail(f"PostgreSQL's {name} not found: install Debian's postgresql package")
    return candidates[-1]


class PostgresServer:
    """One PostgreSQL cluster in `directory`, listening on 127.0.0.1:`port` only."""

    def __init__(self, directory: Path, more_addresses: Sequence[str] = ()) -> None:
        """`more_addresses`: addresses it listens at besides 127.0.0.1 (a veth's host end,
        tests/netns.py), each trusted like loopback."""
        self.directory = directory
        self.more_addresses = list(more_addresses)
        self.data_dir = directory / "pgdata"
        self.port = free_port()
        self._as_postgres = os.getuid() == 0

    @property
    def dsn(self) -> str:
        return self.dsn_at("127.0.0.1")

    def dsn_at(self, address: str) -> str:
        """The DSN by another of its addresses (`more_addresses`)."""
        return f"postgresql://{USER}@{address}:{self.port}/{DATABASE}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(command, check=check, capture_output=True, text=True, timeout=120)

    def init(self) -> None:
        """initdb with trust authentication on loopback (a test cluster), and fsync on, as a
        production database would run (the durability tests rely on it)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(self.directory, pw.pw_uid, pw.pw_gid)
            # The temp path's parents must be traversable by the postgres user.
            for parent in self.directory.parents:
                with contextlib.suppress(OSError):
                    os.chmod(parent, os.stat(parent).st_mode | 0o011)
        self._run(
            pg_bin("initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        )
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = '{','.join(['127.0.0.1', *self.more_addresses])}'\n"
                f"port = {self.port}\n"
                f"unix_socket_directories = '{self.directory}'\n"
                "max_connections = 200\nshared_buffers = 128MB\n"
            )
        with open(self.data_dir / "pg_hba.conf", "a") as hba:
            for address in self.more_addresses:
                hba.write(f"host all all {address}/30 trust\n")

    def start(self) -> None:
        self._run(
            pg_bin("pg_ctl"),
            "-D",
            str(self.data_dir),
            "-l",
            str(self.directory / "postgres.log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def create_database(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            done = self._run(
                pg_bin("psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                USER,
                "-d",
                "postgres",
                "-c",
                f"CREATE DATABASE {DATABASE}",
                check=False,
            )
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not create the database: {done.stderr}")
            time.sleep(0.2)

    def stop(self, mode: str = "fast") -> None:
        self._run(pg_bin("pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_text(self) -> str:
        path = self.directory / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextlib.contextmanager
def postgres_server(
    directory: Path | None = None, more_addresses: Sequence[str] = ()
) -> Iterator[PostgresServer]:
    """A started PostgreSQL with an empty `groupcoord` database; stopped (immediate) on exit.
    Without `directory`, in a temp directory of its own, not under pytest's basetemp: a
    pytest session starting meanwhile (another run on the machine) chmods
    /tmp/pytest-of-<user> to 0700, which the postgres user (when root runs the tests) can
    then no longer traverse, so a later pg_ctl (a restart) would fail with Permission denied."""
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="groupcoord-pg-") as top:
            with postgres_server(Path(top) / "pg", more_addresses) as server:
                yield server
        return
    server = PostgresServer(directory, more_addresses)
    server.init()
    server.start()
    try:
        server.create_database()
        yield server
    finally:
        server.stop("immediate")

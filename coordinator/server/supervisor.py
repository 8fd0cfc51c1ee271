"""`serve --workers N` (N > 1): the parent process of N worker processes.

Theory of operation. The parent serves nothing itself: it prepares the shared top of the
data directory (worker_layout.py: the worker count and the cluster id), holds its lock, and
starts each worker as the same command it was started with (the same settings from the
same flags, file and environment) plus GROUPCOORD_WORKER_INDEX=i; the worker derives its
node id, ports and data directory from that (worker_layout.worker_config). A worker is a
separate interpreter (subprocess of the same entry point) rather than a fork: each gets
its own event loop, GIL and uvloop from a clean start.

A worker that exits while the parent is not stopping is restarted after a backoff that
doubles with each quick failure (RESTART_BACKOFF_MIN_S .. _MAX_S; a worker that served at
least STABLE_AFTER_S starts again at the minimum). A worker that keeps failing
(QUICK_FAILURES_MAX quick failures in a row), or that refuses its settings (exit code 2),
stops the whole server, exit code 1: a cluster missing a node for good would leave its
groups and partitions without an owner. SIGTERM/SIGINT go to every worker, and the parent
exits 0 once every worker stopped cleanly; SIGHUP goes to every worker (TLS reload).
Workers are asked to stop (SIGTERM) if the parent dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
import time

from groupcoord.storage import StorageError
from groupcoord.storage.dir_lock import DataDirLock

from ..config import ENV_PREFIX, Config
from ..observability.logging import get_logger, setup_logging
from .worker_layout import prepare_workers_dir, worker_config

log = get_logger("groupcoord.supervisor")

RESTART_BACKOFF_MIN_S = 0.2
RESTART_BACKOFF_MAX_S = 10.0
STABLE_AFTER_S = 30.0
QUICK_FAILURES_MAX = 6
EXIT_CONFIG_ERROR = 2  # the worker refused its settings: restarting cannot help
STOP_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1
# Tests only: while the file this names plus ".<index>" exists, worker <index> is not
# restarted once dead (a test changes topics through the other workers meanwhile).
HOLD_RESTART_ENV = f"{ENV_PREFIX}TEST_HOLD_RESTART_FILE"


def _die_with_parent() -> None:  # in the child, before exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


class Supervisor:
    """Starts, watches and stops the workers (module docstring)."""

    def __init__(self, config: Config, argv: list[str]) -> None:
        self.config = config
        self.argv = argv
        self.procs: list[asyncio.subprocess.Process | None] = [None] * config.workers
        self.stopping = False
        self.exit_code = 0

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGHUP, self._forward, signal.SIGHUP)
        await asyncio.gather(*(self._keep(index) for index in range(self.config.workers)))
        return self.exit_code

    async def _start(self, index: int) -> asyncio.subprocess.Process:
        env = dict(os.environ, **{f"{ENV_PREFIX}WORKER_INDEX": str(index)})
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "groupcoord.coordinator",
            *self.argv,
            env=env,
            preexec_fn=_die_with_parent,
        )
        derived = worker_config(self.config, index)
        log.info(
            "worker started",
            worker=index,
            pid=proc.pid,
            node_id=derived.node_id,
            listen=derived.listen,
            data_dir=derived.data_dir,
        )
        return proc

    async def _keep(self, index: int) -> None:
        """Run worker `index` until the server stops, restarting it when it dies."""
        quick_failures = 0
        while not self.stopping:
            started = time.monotonic()
            proc = self.procs[index] = await self._start(index)
            if self.stopping:  # asked to stop while it was starting
                proc.send_signal(signal.SIGTERM)
            code = await proc.wait()
            if self.stopping:
                if code != 0:
                    log.warning("worker stopped uncleanly", worker=index, exit_code=code)
                    self.exit_code = 1
                return
            served_s = time.monotonic() - started
            quick_failures = 0 if served_s >= STABLE_AFTER_S else quick_failures + 1
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            if code == EXIT_CONFIG_ERROR or quick_failures > QUICK_FAILURES_MAX:
                log.error(
                    "worker keeps failing: stopping the server",
                    worker=index,
                    last=how,
                    quick_failures=quick_failures,
                )
                self.exit_code = 1
                self.stop()
                return
            delay_s = min(
                RESTART_BACKOFF_MIN_S * 2 ** max(quick_failures - 1, 0), RESTART_BACKOFF_MAX_S
            )
            log.warning(
                "worker died: restarting",
                worker=index,
                pid=proc.pid,
                died_of=how,
                served_s=round(served_s, 3),
                restart_in_s=delay_s,
            )
            await asyncio.sleep(delay_s)
            hold = os.environ.get(HOLD_RESTART_ENV)
            while hold and os.path.exists(f"{hold}.{index}") and not self.stopping:
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM/SIGINT (or a worker that keeps failing): stop every worker."""
        if self.stopping:
            return
        self.stopping = True
        log.info("stopping workers")
        self._forward(signal.SIGTERM)
        asyncio.get_running_loop().call_later(STOP_TIMEOUT_S, self._forward, signal.SIGKILL)

    def _forward(self, sig: int) -> None:
        for proc in self.procs:
            if proc is not None and proc.returncode is None:
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    pass


def run(config: Config, argv: list[str]) -> int:
    """Supervise `config.workers` workers started with the command line `argv` (the
    arguments after the program name); the process's exit code."""
    setup_logging(config.log_level, config.log_repeat_window_ms)
    os.umask(config.data_umask_bits)
    try:
        lock = DataDirLock.acquire(config.data_path)
        cluster_id = prepare_workers_dir(config)
    except (OSError, StorageError) as e:
        log.error("cannot start", error=str(e))
        return 1
    log.info("starting workers", workers=config.workers, cluster_id=cluster_id)
    try:
        return asyncio.run(Supervisor(config, argv).run())
    finally:
        lock.release()

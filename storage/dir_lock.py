"""An exclusive lock on a data directory, so that two server processes never write the
same logs.

Why: two processes on one data directory (two containers mounting one volume, a restart
racing the old process's shutdown) would each append to the same segment files at their
own idea of the end, overwriting each other's acknowledged records. Kafka takes a `.lock`
file in every log directory and refuses to start while another process holds it; so do
we. The lock is flock(2) on `<data dir>/.lock`: held for the life of the open descriptor,
dropped by the kernel when the process exits or is killed (SIGKILL included), so a crash
never leaves a stale lock behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirInUse(OSError):
    """Another process (or another server in this one) holds the data directory."""


class DataDirLock:
    """The held lock of one data directory; `release` (or process exit) drops it."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self.path = path

    @classmethod
    def acquire(cls, directory: Path) -> DataDirLock:
        """Lock `directory` (created if missing). Raises DataDirInUse when it is held."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirInUse(
                errno.EAGAIN,
                f"data directory {directory} is in use by another groupcoord process "
                f"(it holds {path})",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = -1

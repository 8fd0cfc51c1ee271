"""One syncfs(2) in place of many fsyncs, for a group-commit round over many logs.

Why: a round of the coordinator's group commit often covers dozens of shard logs (a
commit load spread over 50 shards). Their fsyncs, even in parallel threads, cost one
journal commit each: 3-6 ms for 50 small appends on ext4 here, while a single syncfs()
of the filesystem makes the same data durable in 0.3 ms (tests/bench, storage notes in
README). syncfs also writes back whatever else is dirty on that filesystem, so it is
used only for rounds of at least `min_logs` logs (a setting; 0 turns it off).

Errors: Linux reports writeback errors through syncfs only from 5.8 on (before, it
returned 0 regardless), so older kernels and other systems keep per-file fsyncs. When
syncfs fails, every log of the round falls back to its own fsyncs, which report the
error against the file it concerns (the per-file error state is separate from the
filesystem's), so a failure is never blamed on the wrong log. And syncfs is not used on
that filesystem again: it reports an error once, and the file whose writeback failed may
belong to a log outside the round (syncfs writes back everything dirty); a later syncfs
would return 0 for it and vouch for data that was lost, where its own fsync reports the
error.

Locks: each log's flush lock is held from begin_flush to end_flush, so a round holds
several at once; they are taken in one fixed order (by id), or a round and a concurrent
flush of the same logs in another order (close's flush_all_now) could each wait for a
lock the other holds.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
import weakref
from collections.abc import Callable

import structlog

from .errors import LogClosed
from .log import FlushPlan, PartitionLog

log_ = structlog.get_logger("groupcoord.storage")


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        major, minor = (int(part) for part in platform.release().split(".")[:2])
    except ValueError:
        return None
    if (major, minor) < (5, 8):
        return None
    try:
        function: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return function  # a ctypes CDLL call releases the GIL while it runs


_SYNCFS = _load_syncfs()


class FilesystemSync:
    """Flushes a round of logs with one syncfs() per filesystem they live on."""

    def __init__(self, min_logs: int) -> None:
        self.min_logs = min_logs
        self._lock = threading.Lock()
        # st_dev -> a descriptor on that filesystem, kept open: syncfs reports each
        # writeback error once per descriptor, so the same one must be asked every time.
        self._fds: dict[int, int] = {}
        self.calls = 0  # syncfs() calls made (a metric; tests check it is used)
        self._failed_devices: set[int] = set()  # syncfs failed there once: fsyncs only
        self._devices: weakref.WeakKeyDictionary[PartitionLog, int] = weakref.WeakKeyDictionary()

    @staticmethod
    def supported() -> bool:
        return _SYNCFS is not None

    def applies(self, logs: list[PartitionLog]) -> bool:
        return _SYNCFS is not None and 0 < self.min_logs <= len(logs)

    def flush(self, logs: list[PartitionLog]) -> list[int | BaseException]:
        """Flush every log (begin_flush, syncfs, end_flush); per log its new durable
        offset or the exception its flush raised."""
        results: list[int | BaseException] = [0] * len(logs)
        plans: list[tuple[int, PartitionLog, FlushPlan, int]] = []
        synced: dict[int, bool] = {}
        try:
            for i in sorted(range(len(logs)), key=lambda i: id(logs[i])):  # the lock order
                results[i] = self._begin(i, logs[i], plans)
            for _, log, _, device in plans:
                if device not in synced:
                    synced[device] = device >= 0 and self._syncfs(device, log)
        finally:
            # Every begun flush is ended (its flush lock released), whatever happened.
            for i, log, plan, device in plans:
                results[i] = _end(log, plan, synced.get(device, False))
        return results

    def _begin(
        self, index: int, log: PartitionLog, plans: list[tuple[int, PartitionLog, FlushPlan, int]]
    ) -> int | BaseException:
        """Begin `log`'s flush; a begun one joins `plans` with its filesystem's device (-1:
        unknown, synced by its own fsyncs). Returns the log's result if it needs no sync."""
        if log.closed:
            return LogClosed(f"log {log.directory} is closed")
        try:
            plan = log.begin_flush()
        except Exception as exc:
            return exc
        if plan is None:
            return log.durable_offset
        plans.append((index, log, plan, self._device(log)))
        return 0

    def _device(self, log: PartitionLog) -> int:
        """The device of `log`'s directory, looked up once per log (a stat per log and
        round cost as much as the syncfs itself while the disk is busy)."""
        device = self._devices.get(log)
        if device is None:
            try:
                device = os.stat(log.directory).st_dev
            except OSError:
                return -1
            self._devices[log] = device
        return device

    def _syncfs(self, device: int, log: PartitionLog) -> bool:
        """Whether one syncfs made `device`'s data durable (False: each log fsyncs)."""
        assert _SYNCFS is not None
        with self._lock:
            if device in self._failed_devices:
                return False
            fd = self._fds.get(device)
            if fd is None:
                try:
                    fd = os.open(log.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
                except OSError:
                    return False
                self._fds[device] = fd
            self.calls += 1
        if _SYNCFS(fd) == 0:
            return True
        with self._lock:
            self._failed_devices.add(device)
        log_.error(
            "syncfs failed: this filesystem is synced file by file from now on",
            device=device,
            directory=str(log.directory),
        )
        return False


def _end(log: PartitionLog, plan: FlushPlan, data_synced: bool) -> int | BaseException:
    try:
        return log.end_flush(plan, data_synced)
    except Exception as exc:
        return exc

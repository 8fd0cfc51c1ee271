"""Worker threads for code the coordinator did not ship (plugin assignors).

Offloaded work of our own runs in the loop's default executor, which the group committer's
fsyncs share. A plugin's computation may take long or never return; in that executor a few
such computations would leave no thread for an fsync, and every durable write would wait.
So plugins get threads of their own: PLUGIN_THREADS of them at most (more computations
queue), daemon threads, so that one that never returns does not hold up the process's exit
either. The threads start on first use.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

PLUGIN_THREADS = 4

_Job = tuple[Future[Any], Callable[[], Any]]


class PluginThreads:
    def __init__(self, threads: int = PLUGIN_THREADS) -> None:
        self._max = threads
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run `fn()` in one of the threads; its result (or exception) in the future."""
        future: Future[Any] = Future()
        self._jobs.put((future, fn))
        with self._lock:
            if self._started < self._max:
                self._started += 1
                threading.Thread(
                    target=self._work, name=f"plugin-{self._started}", daemon=True
                ).start()
        return future

    def _work(self) -> None:
        while True:
            future, fn = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as e:  # noqa: BLE001 - the caller's to handle
                future.set_exception(e)
            else:
                future.set_result(result)


plugin_threads = PluginThreads()
"""The process's plugin threads (one server per process)."""

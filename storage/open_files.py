"""A bound on the file descriptors that segments hold: one LRU of open files per process.

Theory of operation
-------------------
Every segment's ``.log`` file is reached through a FileHandle (its path, and a descriptor
while open). Handles share one OpenFiles cache, process-wide because the descriptor limit
(RLIMIT_NOFILE) is process-wide: 2,000 partitions and 50 coordinator shards each with an
active segment would need 2,050 descriptors for their logs alone, before any connection.
The cache keeps at most ``max_open`` of them open, least recently used first out; a handle
whose descriptor was closed reopens its file by name (O_RDWR, never creating) on its next
use. Active segments are in the LRU like the others: a limit below the number of logs
must still work, and an active segment that nobody writes is as idle as a closed one.
Index files are never held open (segment.py writes and reads them whole), so one
descriptor per segment is all a log costs.

Every use of a descriptor pins it for the length of one system call (pread, pwrite, fsync,
ftruncate, fstat): a pinned descriptor is never closed, so a thread's call can never land
on a number that another thread closed and reopened as another file. Pins are taken and
dropped under the cache's lock, which is never held across I/O except the open and close
of an eviction. When everything is pinned the cache goes over its bound rather than wait.

Closing a handle (the segment left its log) closes the descriptor at once, or when the
last pin on it is dropped; a closed handle never reopens. A file whose name changes under
an open handle (a salvage rewrite, the cleaner's ``.cleaned`` output) is renamed with
`FileHandle.renamed`; the cleaner's handles are held open (`hold`) until their files have
their final names, so an eviction in between cannot lose track of them.

Dirty pages survive the close of a descriptor: a later fsync through a reopened one
writes them back, and Linux (4.16+) reports a writeback error nobody has seen yet to the
next fsync of the file through any descriptor.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from pathlib import Path

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# With no setting, as many as a default descriptor limit of 1024 leaves room for: the
# server sets the bound from its own limit (coordinator/server/fd_limits.py).
OPEN_FILES_MAX_DEFAULT = 512


class OpenFiles:
    """The LRU of open segment descriptors; see the module docstring."""

    def __init__(self, max_open: int = OPEN_FILES_MAX_DEFAULT) -> None:
        if max_open < 1:
            raise ValueError("max_open must be >= 1")
        self.max_open = max_open
        self._lock = threading.Lock()
        # Handles with an open descriptor, least recently used first.
        self._lru: OrderedDict[FileHandle, None] = OrderedDict()
        # Counters (metrics; tests): descriptors closed to make room, files reopened.
        self.evictions = 0
        self.reopens = 0

    @property
    def open_count(self) -> int:
        return len(self._lru)

    def resize(self, max_open: int) -> None:
        """Set the bound; descriptors beyond it are closed as files are next opened."""
        if max_open < 1:
            raise ValueError("max_open must be >= 1")
        self.max_open = max_open

    def open(self, path: Path, flags: int, mode: int = 0o644) -> FileHandle:
        """Open `path` (os.open flags; O_CLOEXEC is added) as a handle in this cache.
        Later reopens use O_RDWR only: the file is never created or truncated again."""
        handle = FileHandle(self, path)
        with self._lock:
            handle._fd = self._open_locked(path, flags | _O_CLOEXEC, mode)
            self._lru[handle] = None
        return handle

    def _open_locked(self, path: Path, flags: int, mode: int) -> int:
        """Make room, then open; an EMFILE/ENFILE (descriptors used elsewhere, such as by
        connections) gives up one more idle descriptor and tries again."""
        self._make_room(self.max_open - 1)
        while True:
            try:
                return os.open(path, flags, mode)
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE) or not self._evict_one():
                    raise

    def _make_room(self, keep: int) -> None:
        while len(self._lru) > keep and self._evict_one():
            pass

    def _evict_one(self) -> bool:
        """Close the least recently used unpinned descriptor; False if all are pinned."""
        for handle in self._lru:
            if not handle._pins:
                del self._lru[handle]
                fd, handle._fd = handle._fd, -1
                self.evictions += 1
                os.close(fd)
                return True
        return False

    def _pin(self, handle: FileHandle) -> int:
        with self._lock:
            fd = handle._fd
            if fd < 0:
                if handle._closed:
                    raise OSError(errno.EBADF, f"{handle.path} is closed")
                fd = handle._fd = self._open_locked(handle.path, os.O_RDWR | _O_CLOEXEC, 0)
                self._lru[handle] = None
                self.reopens += 1
            else:
                self._lru.move_to_end(handle)
            handle._pins += 1
            return fd

    def _unpin(self, handle: FileHandle) -> None:
        with self._lock:
            handle._pins -= 1
            if not handle._pins and handle._closed:
                self._close_locked(handle)

    def _close_locked(self, handle: FileHandle) -> None:
        fd = handle._fd
        if fd >= 0:
            handle._fd = -1
            self._lru.pop(handle, None)
            os.close(fd)


class FileHandle:
    """A file reached through the OpenFiles cache: each method is one system call on a
    descriptor pinned for its length (reopened first if the cache had closed it)."""

    __slots__ = ("path", "_cache", "_fd", "_pins", "_held", "_closed", "__weakref__")

    def __init__(self, cache: OpenFiles, path: Path) -> None:
        self.path = path
        self._cache = cache
        self._fd = -1
        self._pins = 0
        self._held = False
        self._closed = False

    @property
    def fd(self) -> int:
        """The descriptor now open for this file, or -1 (tests only: it may change)."""
        return self._fd

    @property
    def closed(self) -> bool:
        return self._closed

    def pread(self, size: int, offset: int) -> bytes:
        cache = self._cache
        fd = cache._pin(self)
        try:
            return os.pread(fd, size, offset)
        finally:
            cache._unpin(self)

    def pwrite(self, data: memoryview, offset: int) -> int:
        cache = self._cache
        fd = cache._pin(self)
        try:
            return os.pwrite(fd, data, offset)
        finally:
            cache._unpin(self)

    def fsync(self) -> None:
        cache = self._cache
        fd = cache._pin(self)
        try:
            os.fsync(fd)
        finally:
            cache._unpin(self)

    def truncate(self, size: int) -> None:
        cache = self._cache
        fd = cache._pin(self)
        try:
            os.ftruncate(fd, size)
        finally:
            cache._unpin(self)

    def size(self) -> int:
        cache = self._cache
        fd = cache._pin(self)
        try:
            return os.fstat(fd).st_size
        finally:
            cache._unpin(self)

    def hold(self) -> None:
        """Keep the descriptor open until `renamed` or `close` (a pin with no system
        call): for a file that will be renamed, which a reopen by name could miss."""
        if not self._held:
            self._cache._pin(self)
            self._held = True

    def renamed(self, path: Path) -> None:
        """The file is now called `path` (renamed while open): later reopens use that
        name, and a hold ends."""
        self.path = path
        if self._held:
            self._held = False
            self._cache._unpin(self)

    def reopen(self) -> None:
        """Drop the descriptor so the next use opens the file by name: another file was
        renamed onto the name (a salvage rewrite). Only while nothing uses it."""
        with self._cache._lock:
            if self._pins:
                raise RuntimeError(f"{self.path} is in use")
            self._cache._close_locked(self)

    def close(self) -> None:
        """Close for good (a hold ends), now or when the last pin is dropped. Idempotent."""
        with self._cache._lock:
            self._closed = True
            if self._held:
                self._held = False
                self._pins -= 1
            if not self._pins:
                self._cache._close_locked(self)


# Segments use this one unless given another (tests); the server sizes it at start.
OPEN_FILES = OpenFiles()

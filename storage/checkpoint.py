"""Small durable files: one offset each (log start offset, recovery point), or any small
document replaced whole (the coordinator's topic metadata, group configs, cluster id).

Written as temp file + fsync + rename + directory fsync, so a crash leaves either the old
or the new value, never a torn one. An offset file that cannot be parsed reads as absent:
both values have safe fallbacks (the first segment's base offset; a full scan).
"""

from __future__ import annotations

import os
from pathlib import Path

_OPEN_FLAGS_WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


def read_offset_file(path: Path) -> int | None:
    """The offset stored in `path`, or None when the file is absent or unreadable."""
    try:
        text = path.read_text(encoding="ascii")
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def write_offset_file(path: Path, value: int) -> None:
    """Atomically replace `path` with `value` and make the change durable."""
    atomic_write(path, f"{value}\n".encode("ascii"))


def atomic_write(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file,
    and make the change durable."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, _OPEN_FLAGS_WRITE, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def overwrite_offset_file(path: Path, value: int, sync: bool) -> None:
    """Write `value` over `path` in place, fixed width (one small write that a crash of
    the process cannot split), without the temp file and fsyncs of `write_offset_file`
    unless `sync`: for a value rewritten often that may lag on disk (a lower bound)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        os.pwrite(fd, f"{value:020d}\n".encode("ascii"), 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    """Make creations, renames and deletions of directory entries durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

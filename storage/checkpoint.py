"""Small durable files: one offset each (log start offset, recovery point), or any small
document replaced whole (the coordinator's topic metadata, group configs, cluster id).

Written as temp file + fsync + rename + directory fsync, so a crash leaves either the old
or the new value, never a torn one. An offset file that cannot be parsed reads as absent:
both values have safe fallbacks (the first segment's base offset; a full scan).

A state document (JSON) has no such fallback: topics, producer ids, the cluster id and
group configs would silently start over. One that cannot be read or parsed, or lacks what
its reader needs, raises DataDirError naming the file (`read_json_file`, `state_file_fields`)
so the server refuses to start with one line instead of a traceback or a guess.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import DataDirError

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


def read_json_file(path: Path) -> dict[str, Any] | None:
    """The JSON object in state file `path` (written by `atomic_write`), or None when the
    file is absent. Raises DataDirError when it is unreadable, not JSON or not an object."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise state_file_error(path, f"cannot be read ({exc.strerror})") from None
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        what = "is empty" if not data.strip() else f"is not valid JSON ({exc})"
        raise state_file_error(path, what) from None
    if not isinstance(value, dict):
        raise state_file_error(path, f"holds a JSON {type(value).__name__}, not an object")
    return value


@contextlib.contextmanager
def state_file_fields(path: Path) -> Iterator[None]:
    """Turn what a reader of state file `path` raises on a missing or mistyped field
    (KeyError, TypeError, ValueError, AttributeError) into DataDirError naming the file."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise state_file_error(path, f"has a missing or malformed field ({detail})") from None


def state_file_error(path: Path, what: str) -> DataDirError:
    return DataDirError(
        f"state file {path} {what}; it is only ever replaced whole (atomic rename), so it was "
        f"damaged or edited: restore it from a backup or repair it, then start again"
    )


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

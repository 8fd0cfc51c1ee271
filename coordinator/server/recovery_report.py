"""Saying so when opening the logs cut data off them.

A log's recovery on open (storage/segment.py Segment.recover) drops everything from the
first invalid batch of its active segment on. After a crash that is an unflushed tail,
never acknowledged. After a clean shutdown nothing in the file is a torn write, so an
invalid batch is damage on disk: the logs are then opened with `salvage`, which removes a
damaged batch alone when a whole batch follows it (its records are lost, the later ones
kept), and cuts the file only where no whole batch follows. None of it passes in silence:
the server writes `clean_shutdown` into the data directory when it stops cleanly, removes
it when it starts, and logs a crash's cut as a warning and any damage as an error.

A crash of the server process alone (SIGKILL, OOM kill) loses nothing the kernel held:
every page written is still in the page cache, so the only torn write is the last one cut
short at the end of a file, never a bad batch followed by whole ones. The server records
the kernel's boot id in `boot-id` at each start; when it is unchanged at the next start,
the logs are opened with `salvage` too. After a restart of the machine only the durable
offset tells damage from a torn tail (storage/log.py, "Torn tail or damage").
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from groupcoord.storage import PartitionLog
from groupcoord.storage.checkpoint import atomic_write, fsync_directory

from ..observability.logging import get_logger
from ..observability.metrics import ServerMetrics
from ..observability.storage_damage import report_damage_removed

CLEAN_SHUTDOWN_FILE = "clean_shutdown"
BOOT_ID_FILE = "boot-id"
KERNEL_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

log = get_logger("groupcoord.recovery")


def clean_shutdown_marked(data_dir: Path) -> bool:
    """Whether the last run stopped cleanly (the marker is left: take it once the logs
    are open, before anything may write them)."""
    return (data_dir / CLEAN_SHUTDOWN_FILE).exists()


def take_clean_shutdown_marker(data_dir: Path) -> bool:
    """Whether the last run stopped cleanly; the marker is removed (durably), so a crash
    of this run is not taken for a clean stop at the next start."""
    path = data_dir / CLEAN_SHUTDOWN_FILE
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_directory(data_dir)
    return True


def take_same_boot_marker(data_dir: Path, kernel_boot_id: Path = KERNEL_BOOT_ID) -> bool:
    """Whether the last run started since the machine last booted (so it can only have
    crashed alone, see above); records this boot for the next start. False where the
    kernel tells no boot id."""
    try:
        boot = kernel_boot_id.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    path = data_dir / BOOT_ID_FILE
    try:
        last = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        last = ""
    if last != boot:
        atomic_write(path, f"{boot}\n".encode("ascii"))
    return bool(boot) and last == boot


def mark_clean_shutdown(data_dir: Path) -> None:
    """Called last when stopping, after every log is flushed and closed."""
    (data_dir / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    fsync_directory(data_dir)


def report_recovery(
    logs: Iterable[tuple[str, PartitionLog]],
    after_clean_shutdown: bool,
    metrics: ServerMetrics | None = None,
) -> int:
    """Log each (name, log) whose recovery cut bytes off or removed damaged batches (and
    count the damage in `metrics`); returns how many did."""
    cut = 0
    for name, log_ in logs:
        dropped = log_.recovered_truncated_bytes
        salvaged = log_.recovered_salvaged_bytes
        if not dropped and not salvaged:
            continue
        cut += 1
        if salvaged:
            report_damage_removed(
                metrics,
                name,
                str(log_.directory),
                log_.recovered_damaged_offsets,
                salvaged,
                bytes_dropped_at_end=dropped,
                next_offset=log_.next_offset,
            )
        elif after_clean_shutdown:
            log.error(
                "log damaged: recovery dropped data written before a clean shutdown",
                log=name,
                bytes_dropped=dropped,
                next_offset=log_.next_offset,
            )
        else:
            log.warning(
                "log recovery dropped an unflushed tail after a crash",
                log=name,
                bytes_dropped=dropped,
                next_offset=log_.next_offset,
            )
    return cut

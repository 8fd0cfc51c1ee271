"""How many coordinator shards a data directory is served with.

Kafka creates `__consumer_offsets` with `offsets.topic.num.partitions` partitions once;
changing the setting later has no effect on the existing topic. It must not: a group's
partition is the hash of its id modulo the count, so with another count nearly every
group would be looked up in a shard that does not hold it, and its members and committed
offsets would seem lost (reads answer -1; the old records stay unread in their logs).

Here likewise: the count a data directory was first served with is kept in the file
`coordinator_shards` and wins over the setting, with a warning when they differ. A data
directory written before the file existed has it inferred from its shard log directories.

The shard directories are created (durably) before the file is written, so once the file
exists every shard directory does: a missing one was removed by hand, and serving it empty
would silently forget its groups' offsets. The start is refused then, naming it; a first
start interrupted before the file is written is told apart by the file's absence.
"""

from __future__ import annotations

import re
from pathlib import Path

from groupcoord.storage import DataDirError
from groupcoord.storage.checkpoint import fsync_directory, read_offset_file, write_offset_file

from ..observability.logging import get_logger

SHARD_COUNT_FILE = "coordinator_shards"
# The transaction coordinator's shards (`__transaction_state-N`) are settled the same way.
TXN_SHARD_COUNT_FILE = "transaction_shards"

log = get_logger("groupcoord.coordinator")


def settled_shard_count(
    data_dir: Path,
    configured: int,
    offsets_topic: str,
    count_file: str = SHARD_COUNT_FILE,
    setting: str = "offsets_partitions",
) -> int:
    """The shard count to serve `data_dir` with: the one it holds, else `configured`,
    which is then recorded (durably) as the directory's own, after the shard directories.
    Raises DataDirError when a shard directory is missing. `offsets_topic`, `count_file`,
    `setting`: the family's log name prefix, count file and setting (the group
    coordinator's by default)."""
    path = data_dir / count_file
    # A small durable integer file, as offsets are kept; 0 shards cannot be (unreadable:
    # inferred again from the shard directories, which carry the count themselves).
    stored = read_offset_file(path) or None
    if stored is None:
        stored = _count_from_logs(data_dir, offsets_topic) or configured
        data_dir.mkdir(parents=True, exist_ok=True)
        for index in range(stored):
            (data_dir / f"{offsets_topic}-{index}").mkdir(exist_ok=True)
        fsync_directory(data_dir)
        write_offset_file(path, stored)
    else:
        _check_shard_directories(data_dir, stored, offsets_topic, path)
    if stored != configured:
        log.warning(
            f"{setting} differs from the data directory's shard count; keeping the "
            f"directory's (as Kafka keeps {offsets_topic}' partition count)",
            configured=configured,
            kept=stored,
        )
    return stored


def _check_shard_directories(data_dir: Path, count: int, offsets_topic: str, path: Path) -> None:
    missing = [i for i in range(count) if not (data_dir / f"{offsets_topic}-{i}").is_dir()]
    if missing:
        directory = data_dir / f"{offsets_topic}-{missing[0]}"
        raise DataDirError(
            f"coordinator shard directory {directory} is missing ({len(missing)} of {count} "
            f"are), but {path.name} says the data directory has {count} shards: restore it "
            f"from a backup, or create it empty to accept losing its groups' offsets, then "
            f"start again"
        )


def _count_from_logs(data_dir: Path, offsets_topic: str) -> int | None:
    """Highest shard log index + 1, or None when the directory holds no shard log."""
    if not data_dir.is_dir():
        return None
    pattern = re.compile(re.escape(offsets_topic) + r"-(\d+)")
    indexes = [
        int(match.group(1))
        for child in data_dir.iterdir()
        if (match := pattern.fullmatch(child.name)) and child.is_dir()
    ]
    return max(indexes) + 1 if indexes else None

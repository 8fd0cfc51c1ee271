"""storage/dir_lock.py: one holder of a data directory at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from groupcoord.storage.dir_lock import DataDirInUse, DataDirLock


def test_a_held_directory_refuses_a_second_holder_until_released(tmp_path: Path) -> None:
    data = tmp_path / "data"  # created by the first acquire
    first = DataDirLock.acquire(data)
    with pytest.raises(DataDirInUse, match="in use by another groupcoord process"):
        DataDirLock.acquire(data)
    # Another process is refused too (flock is per open file, whoever opened it).
    probe = (
        "import sys; from pathlib import Path; from storage.dir_lock import DataDirLock, "
        "DataDirInUse\ntry:\n    DataDirLock.acquire(Path(sys.argv[1]))\n"
        "except DataDirInUse:\n    sys.exit(3)\n"
    )
    run = [sys.executable, "-c", probe, str(data)]
    assert subprocess.run(run, cwd=Path(__file__).parents[2]).returncode == 3
    first.release()
    first.release()  # twice is harmless
    assert subprocess.run(run, cwd=Path(__file__).parents[2]).returncode == 0
    second = DataDirLock.acquire(data)
    second.release()

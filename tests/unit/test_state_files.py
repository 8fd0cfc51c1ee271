"""State files of the data directory (issue 16, items 4-6): atomic replacement shown by a
crash at every step, one clear error for a damaged file, the refusal of a foreign data
directory, and missing partition and shard directories. Real files, no sockets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.config import Config
from groupcoord.coordinator.runtime.service import OFFSETS_TOPIC
from groupcoord.coordinator.runtime.shard_count import SHARD_COUNT_FILE, settled_shard_count
from groupcoord.coordinator.server.data_dir import check_data_dir, load_cluster_id
from groupcoord.coordinator.topics.registry import TopicRegistry
from groupcoord.storage import DataDirError, LogConfig, PartitionLog
from groupcoord.storage.checkpoint import atomic_write, read_json_file
from tests.support import ROOT, make_batch
from tests.unit.test_storage_log import append

OLD = {"topics": [{"name": "old"}], "pad": "o" * 10_000}
NEW_SOURCE = '{"topics": [{"name": "new"}], "pad": "n" * 200_000}'
NEW = {"topics": [{"name": "new"}], "pad": "n" * 200_000}  # NEW_SOURCE

# -- atomic replacement ------------------------------------------------------------------


# The step of atomic_write that fails: (os function, which call of it).
STEPS = {
    "open temp": ("open", 1),
    "write temp": ("write", 1),
    "fsync temp": ("fsync", 1),
    "close temp": ("close", 1),
    "rename": ("replace", 1),
    "fsync directory": ("fsync", 2),
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_failure_at_any_step_leaves_the_old_file_or_the_new_one_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    path = tmp_path / "topics.json"
    atomic_write(path, json.dumps(OLD).encode())
    name, failing_call = STEPS[step]
    real = getattr(os, name)
    calls = 0

    def injected(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls != failing_call:
            return real(*args)
        if name == "write":  # half of it reaches the temp file first: a torn write
            real(args[0], bytes(args[1][: len(args[1]) // 2]))
        elif name == "close":
            real(*args)
        raise OSError(5, "injected")

    monkeypatch.setattr(os, name, injected)
    with pytest.raises(OSError, match="injected"):
        atomic_write(path, json.dumps(NEW).encode())
    monkeypatch.undo()
    # Never half of anything: the old document, or (failing after the rename) the new one.
    assert read_json_file(path) == (NEW if step == "fsync directory" else OLD)


def _child_writes(path: Path, kill_at: str) -> subprocess.CompletedProcess[bytes]:
    """A process replacing `path` with NEW that is SIGKILLed at `kill_at` (mid-write of the
    temp file, or after its fsync and before the rename)."""
    script = textwrap.dedent(
        f"""
        import json, os, signal
        from pathlib import Path
        from groupcoord.storage.checkpoint import atomic_write
        real_write = os.write
        def die(*args):
            os.kill(os.getpid(), signal.SIGKILL)
        def half_then_die(fd, data):
            real_write(fd, bytes(data[: len(data) // 2]))
            os.fsync(fd)
            die()
        if {kill_at!r} == "write":
            os.write = half_then_die
        else:
            os.replace = die
        atomic_write(Path({str(path)!r}), json.dumps({NEW_SOURCE}).encode())
        """
    )
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True)


@pytest.mark.parametrize("kill_at", ["write", "rename"])
def test_a_process_killed_while_replacing_a_state_file_leaves_the_old_one(
    tmp_path: Path, kill_at: str
) -> None:
    path = tmp_path / "topics.json"
    atomic_write(path, json.dumps(OLD).encode())
    done = _child_writes(path, kill_at)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert read_json_file(path) == OLD
    leftover = tmp_path / "topics.json.tmp"
    assert leftover.exists()  # what the crash left: ignored, and not a foreign file
    check_data_dir(tmp_path)


# -- damaged state files -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (b"", "is empty"),
        (b'{"cluster_id": "ab', "is not valid JSON"),
        (b"\xff\xfe", "is not valid JSON"),
        (b"[1]", "holds a JSON list"),
        (b'{"other": 1}', "missing field 'cluster_id'"),
        (b'{"cluster_id": 7}', "cluster_id must be a non-empty string"),
    ],
)
def test_a_damaged_cluster_file_is_one_error_naming_it(
    tmp_path: Path, content: bytes, what: str
) -> None:
    (tmp_path / "cluster.json").write_bytes(content)
    with pytest.raises(DataDirError) as info:
        load_cluster_id(tmp_path)
    message = str(info.value)
    assert str(tmp_path / "cluster.json") in message and what in message
    assert "\n" not in message


def test_an_absent_state_file_reads_as_none_and_a_cluster_id_is_made(tmp_path: Path) -> None:
    assert read_json_file(tmp_path / "absent.json") is None
    cluster_id = load_cluster_id(tmp_path)
    assert load_cluster_id(tmp_path) == cluster_id


# -- the data directory ------------------------------------------------------------------


def test_a_directory_of_foreign_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "report.pdf").write_bytes(b"%PDF")
    (tmp_path / "__consumer_offsets-3").mkdir()  # ours, but not enough
    with pytest.raises(DataDirError, match="report.pdf"):
        check_data_dir(tmp_path)
    (tmp_path / "cluster.json").write_text('{"cluster_id": "x"}')
    check_data_dir(tmp_path)  # the marker: groupcoord's (and whatever else is in it)


def test_an_empty_missing_or_half_started_directory_is_accepted(tmp_path: Path) -> None:
    check_data_dir(tmp_path / "missing")
    check_data_dir(tmp_path)
    for name in (".lock", "coordinator_shards", "lost+found", "topics", "__consumer_offsets-0"):
        (tmp_path / name).mkdir()
    check_data_dir(tmp_path)  # a first start interrupted before cluster.json
    (tmp_path / "file").write_text("")
    with pytest.raises(DataDirError, match="not a directory"):
        check_data_dir(tmp_path / "file")


# -- missing directories -----------------------------------------------------------------


def test_shard_directories_exist_before_the_count_and_a_missing_one_is_refused(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    assert settled_shard_count(data, 5, OFFSETS_TOPIC) == 5
    assert all((data / f"{OFFSETS_TOPIC}-{i}").is_dir() for i in range(5))
    (data / f"{OFFSETS_TOPIC}-3").rmdir()
    with pytest.raises(DataDirError, match=f"{OFFSETS_TOPIC}-3 is missing"):
        settled_shard_count(data, 5, OFFSETS_TOPIC)
    # Interrupted before the count was written: the directories say it, nothing refused.
    (data / SHARD_COUNT_FILE).unlink()
    assert settled_shard_count(data, 5, OFFSETS_TOPIC) == 5


def _registry(data: Path) -> TopicRegistry:
    return TopicRegistry(Config(data_dir=str(data)))


def test_a_listed_partition_without_its_directory_is_refused(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    registry.load()
    registry.create("t", 3, {})
    registry.close()
    (tmp_path / "topics" / "t-1").rename(tmp_path / "aside")
    with pytest.raises(DataDirError, match="t-1 is missing"):
        _registry(tmp_path).load()
    assert not (tmp_path / "topics" / "t-1").exists()


def test_without_topics_json_only_empty_partition_directories_are_removed(tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    registry.load()
    registry.create("t", 2, {})
    registry.close()
    (tmp_path / "topics.json").unlink()  # an interrupted first creation: nothing written
    reloaded = _registry(tmp_path)
    reloaded.load()
    assert not any((tmp_path / "topics").iterdir())
    reloaded.create("t", 1, {})
    reloaded.close()
    log = PartitionLog.open(tmp_path / "topics" / "t-0", LogConfig())
    append(log, make_batch(3))
    log.flush()
    log.close()
    (tmp_path / "topics.json").unlink()  # lost: its partition holds records now
    with pytest.raises(DataDirError, match="topics.json is missing"):
        _registry(tmp_path).load()
    assert (tmp_path / "topics" / "t-0").is_dir()


def test_data_umask_is_octal_and_keeps_the_owner_bits() -> None:
    from groupcoord.coordinator.config import ConfigError, load_config

    assert load_config(environ={}).data_umask_bits == 0o077
    assert load_config(overrides={"data_umask": "027"}, environ={}).data_umask_bits == 0o027
    for bad in ("999", "0o77", "777", "abc"):
        with pytest.raises(ConfigError, match="data_umask"):
            load_config(overrides={"data_umask": bad}, environ={})

"""The coordinator shard count is the data directory's once it has one
(coordinator/runtime/shard_count.py), as Kafka keeps __consumer_offsets' partitions."""

from __future__ import annotations

from pathlib import Path

from groupcoord.coordinator.runtime.service import OFFSETS_TOPIC
from groupcoord.coordinator.runtime.shard_count import SHARD_COUNT_FILE, settled_shard_count


def test_a_new_directory_takes_the_setting_and_keeps_it(tmp_path: Path) -> None:
    data = tmp_path / "data"  # not created yet: the server's first start
    assert settled_shard_count(data, 50, OFFSETS_TOPIC) == 50
    assert (data / SHARD_COUNT_FILE).read_text().strip() == "50"
    # Later starts with another setting keep the directory's count.
    assert settled_shard_count(data, 7, OFFSETS_TOPIC) == 50
    assert settled_shard_count(data, 50, OFFSETS_TOPIC) == 50
    assert (data / SHARD_COUNT_FILE).read_text().strip() == "50"


def test_a_directory_from_before_the_file_has_its_count_read_from_its_shard_logs(
    tmp_path: Path,
) -> None:
    for index in (0, 3, 11):  # shards whose logs exist; the highest tells the count
        (tmp_path / f"{OFFSETS_TOPIC}-{index}").mkdir()
    (tmp_path / f"{OFFSETS_TOPIC}-x").mkdir()  # not a shard log
    (tmp_path / f"{OFFSETS_TOPIC}-40").write_text("")  # a file, not a log directory
    (tmp_path / "topics").mkdir()
    assert settled_shard_count(tmp_path, 50, OFFSETS_TOPIC) == 12
    assert (tmp_path / SHARD_COUNT_FILE).read_text().strip() == "12"


def test_an_unreadable_count_file_is_inferred_again(tmp_path: Path) -> None:
    (tmp_path / f"{OFFSETS_TOPIC}-4").mkdir()
    for text in ("garbage", "0", "-3"):  # e.g. written by hand
        (tmp_path / SHARD_COUNT_FILE).write_text(text)
        assert settled_shard_count(tmp_path, 50, OFFSETS_TOPIC) == 5
        assert (tmp_path / SHARD_COUNT_FILE).read_text().strip() == "5"

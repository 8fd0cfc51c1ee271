"""Files of a stopped server damaged, added or removed by hand (issue 16, items 3-6): the
restarted server either serves everything acknowledged or refuses to start with one error
line naming the file and a non-zero exit; it never deletes data on a stray file's word."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from groupcoord.coordinator.runtime.partitioning import shard_for
from tests.integration.test_clients import create_topic
from tests.integration.test_durability import read_all
from tests.support import ServerProcess, free_port

TOPIC = "files"
PARTITIONS = 2
RECORDS = 300  # per partition, one acks=all batch of 20 each time
SHARDS = 50


def start_server(data_dir: Path) -> ServerProcess:
    # Small segments: a partition has about 15 of them (one batch each).
    return ServerProcess(data_dir, ["--set", "log_segment_bytes=500"]).start()


def produce_and_commit(server: ServerProcess) -> dict[int, list[bytes]]:
    """RECORDS acknowledged records in each partition and a committed offset of group "g"
    per partition; returns the acknowledged values by partition."""
    create_topic(server.bootstrap, TOPIC, PARTITIONS)
    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 5})
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for start in range(0, RECORDS, 20):
        for partition in range(PARTITIONS):
            for i in range(start, start + 20):
                producer.produce(TOPIC, value=b"p%d-%06d" % (partition, i), partition=partition)
        assert producer.flush(10) == 0
        for partition in range(PARTITIONS):
            acked[partition].extend(b"p%d-%06d" % (partition, i) for i in range(start, start + 20))
    committer = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "g", "enable.auto.commit": False}
    )
    committer.commit(
        offsets=[TopicPartition(TOPIC, p, 200 + p) for p in range(PARTITIONS)], asynchronous=False
    )
    committer.close()
    return acked


def check_everything_served(server: ServerProcess, acked: dict[int, list[bytes]]) -> None:
    stored = read_all(server.bootstrap, TOPIC, PARTITIONS)
    for partition in range(PARTITIONS):
        assert [o for o, _ in stored[partition]] == list(range(RECORDS)), partition
        assert [v for _, v in stored[partition]] == acked[partition], partition
    reader = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g"})
    committed = reader.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
    reader.close()
    assert [tp.offset for tp in committed] == [200 + p for p in range(PARTITIONS)]


def expect_refusal(server: ServerProcess, names: str) -> str:
    """Start `server` expecting it to refuse: exit code 1, one error line naming `names`
    and no traceback. Returns that line."""
    size = server.log_path.stat().st_size if server.log_path.exists() else 0
    try:
        server.start()
    except RuntimeError:
        pass
    else:  # a refusal found while loading in the background: the process exits soon
        assert server.proc is not None
        try:
            server.proc.wait(30)
        finally:
            server.kill()  # it did not refuse: not left running
    assert server.proc is not None and server.proc.returncode == 1
    with open(server.log_path, "rb") as fh:
        fh.seek(size)
        text = fh.read().decode(errors="replace")
    assert "Traceback" not in text, text
    errors = [json.loads(line) for line in text.splitlines() if '"level": "error"' in line]
    assert len(errors) == 1, text
    assert errors[0]["event"] == "cannot start"
    assert names in errors[0]["error"], errors[0]
    # Fresh ports for the next start: while this server was down, a client connection of
    # another test on the machine may have taken its old one as a local port.
    server.port, server.metrics_port = free_port(), free_port()
    return str(errors[0]["error"])


def files_of(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*.log")}


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[tuple[ServerProcess, dict[int, list[bytes]]]]:
    server = start_server(tmp_path / "data")
    try:
        acked = produce_and_commit(server)
        server.kill()  # SIGKILL: what was acknowledged must be on disk
        yield server, acked
    finally:
        server.kill()


def partition_dir(server: ServerProcess, partition: int = 0) -> Path:
    return server.data_dir / "topics" / f"{TOPIC}-{partition}"


# -- item 3: stray and disagreeing files in a log directory ------------------------------


@pytest.mark.parametrize("stray_base", [1, 99_999])
def test_a_stray_segment_file_refuses_the_start_and_deletes_nothing(
    loaded: tuple[ServerProcess, dict[int, list[bytes]]], stray_base: int
) -> None:
    server, acked = loaded
    directory = partition_dir(server)
    segments = sorted(directory.glob("*.log"))
    assert len(segments) > 10
    stray = directory / f"{stray_base:020d}.log"
    shutil.copy(segments[0], stray)  # a copy under another name (and so other offsets)
    before = files_of(server.data_dir)
    message = expect_refusal(server, str(stray))
    assert "move it out" in message
    assert files_of(server.data_dir) == before, "a refused start changed segment files"
    stray.unlink()  # what the error says to do
    server.start()
    check_everything_served(server, acked)


def test_garbage_named_as_the_last_segment_does_not_move_the_high_watermark(
    loaded: tuple[ServerProcess, dict[int, list[bytes]]],
) -> None:
    server, acked = loaded
    stray = partition_dir(server) / f"{99_999:020d}.log"
    stray.write_bytes(os.urandom(5000))
    expect_refusal(server, str(stray))
    stray.unlink()
    server.start()
    check_everything_served(server, acked)


def test_a_log_start_offset_beyond_the_data_refuses_the_start(
    loaded: tuple[ServerProcess, dict[int, list[bytes]]],
) -> None:
    server, acked = loaded
    start_file = partition_dir(server) / "log-start-offset"
    start_file.write_text("987654321\n")
    before = files_of(server.data_dir)
    expect_refusal(server, str(start_file))
    assert files_of(server.data_dir) == before
    start_file.unlink()
    server.start()
    check_everything_served(server, acked)


def test_a_stray_segment_in_a_coordinator_shard_log_refuses_the_start(
    loaded: tuple[ServerProcess, dict[int, list[bytes]]],
) -> None:
    server, acked = loaded
    directory = server.data_dir / f"__consumer_offsets-{shard_for('g', SHARDS)}"
    stray = directory / f"{1:020d}.log"
    stray.write_bytes(b"")  # empty, named inside the log: its one segment overlaps it
    (directory / f"{5:020d}.log").write_bytes(b"")  # and an empty one between
    expect_refusal(server, str(directory))
    for path in directory.glob("0000000000000000000[15].log"):
        path.unlink()
    server.start()
    check_everything_served(server, acked)


# -- item 4: a partition directory removed by hand ---------------------------------------


def test_a_missing_partition_directory_refuses_the_start(
    loaded: tuple[ServerProcess, dict[int, list[bytes]]],
) -> None:
    server, acked = loaded
    directory = partition_dir(server, 1)
    aside = server.data_dir.parent / "aside"
    directory.rename(aside)
    expect_refusal(server, str(directory))
    assert not directory.exists(), "the refused start recreated the directory"
    aside.rename(directory)  # restored from the backup
    server.start()
    check_everything_served(server, acked)


def test_a_missing_partition_directory_created_empty_accepts_the_loss(
    loaded: tuple[ServerProcess, dict[int, list[bytes]]],
) -> None:
    server, acked = loaded
    directory = partition_dir(server, 1)
    shutil.rmtree(directory)
    expect_refusal(server, str(directory))
    directory.mkdir()  # what the error offers: the operator accepts the loss
    server.start()
    stored = read_all(server.bootstrap, TOPIC, PARTITIONS)
    assert [v for _, v in stored[0]] == acked[0]
    assert stored.get(1, []) == []


def test_a_missing_coordinator_shard_directory_refuses_the_start(
    loaded: tuple[ServerProcess, dict[int, list[bytes]]],
) -> None:
    server, acked = loaded
    directory = server.data_dir / f"__consumer_offsets-{shard_for('g', SHARDS)}"
    aside = server.data_dir.parent / "aside"
    directory.rename(aside)
    expect_refusal(server, str(directory))
    assert not directory.exists()
    aside.rename(directory)
    server.start()
    check_everything_served(server, acked)


def test_topics_json_lost_refuses_instead_of_deleting_every_partition(
    loaded: tuple[ServerProcess, dict[int, list[bytes]]],
) -> None:
    server, acked = loaded
    meta = server.data_dir / "topics.json"
    saved = meta.read_bytes()
    meta.unlink()
    expect_refusal(server, str(meta))
    assert len(files_of(server.data_dir / "topics")) > 20, "partition data was deleted"
    meta.write_bytes(saved)
    server.start()
    check_everything_served(server, acked)


# -- item 5: truncated or malformed state files ------------------------------------------


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("topics.json", lambda b: b[: len(b) // 2]),
        ("topics.json", lambda b: b'{"version": 1, "topics": [{"name": "files"}]}'),
        ("cluster.json", lambda b: b""),
        ("cluster.json", lambda b: b"[1, 2]"),
        ("producer-ids.json", lambda b: b'{"next_block_start": "x"}'),
        ("producer-ids.json", lambda b: b[:-3]),
        ("group_configs.json", lambda b: b[:5]),
        ("group_configs.json", lambda b: b'{"groups": 3}'),
    ],
)
def test_a_damaged_state_file_refuses_the_start_with_one_line(
    loaded: tuple[ServerProcess, dict[int, list[bytes]]], name: str, damage: object
) -> None:
    server, acked = loaded
    path = server.data_dir / name
    if name == "group_configs.json":  # written by IncrementalAlterConfigs on a group
        path.write_bytes(b'{"groups": {"g": {"consumer.session.timeout.ms": "45000"}}}')
    if name == "producer-ids.json":  # written when an idempotent producer first asks
        path.write_bytes(b'{"next_block_start": 1000}')
    saved = path.read_bytes()
    assert callable(damage)
    path.write_bytes(damage(saved))
    expect_refusal(server, str(path))
    path.write_bytes(saved)
    server.start()
    check_everything_served(server, acked)


# -- item 6: a foreign data directory; file permissions ----------------------------------


def test_a_directory_of_foreign_files_is_refused_at_first_start(tmp_path: Path) -> None:
    data = tmp_path / "home"
    data.mkdir()
    (data / "notes.txt").write_text("mine")
    (data / "photos").mkdir()
    before = sorted(p.name for p in data.iterdir())
    server = ServerProcess(data)
    message = expect_refusal(server, str(data))
    assert "notes.txt" in message and "photos" in message
    assert sorted(p.name for p in data.iterdir()) == before, "files were written among them"


def test_files_are_private_to_the_server_user(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    try:
        produce_and_commit(server)
        producer = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True})
        producer.produce(TOPIC, value=b"idempotent", partition=0)
        assert producer.flush(10) == 0
    finally:
        assert server.terminate() == 0  # a clean stop writes its marker and index files too
    entries = list(server.data_dir.rglob("*"))
    names = {p.name for p in entries}
    assert {"producer-ids.json", "cluster.json", "topics.json", "clean_shutdown"} <= names
    assert any(p.suffix == ".index" for p in entries)
    for path in entries:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {oct(mode)}"


def test_data_umask_relaxes_the_modes(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", ["--set", "data_umask=027"]).start()
    try:
        create_topic(server.bootstrap, TOPIC, 1)
        time.sleep(0.2)
    finally:
        server.kill()
    segment = next((server.data_dir / "topics" / f"{TOPIC}-0").glob("*.log"))
    assert stat.S_IMODE(segment.stat().st_mode) == 0o640
    assert stat.S_IMODE(segment.parent.stat().st_mode) == 0o750

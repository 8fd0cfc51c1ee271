"""serve --workers without processes: who owns what (ownership.py), each worker's settings
and the shared data directory (server/worker_layout.py), producer ids that never collide,
and the non-owned shards a worker never loads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from groupcoord.coordinator.config import Config, ConfigError, load_config
from groupcoord.coordinator.ownership import (
    Ownership,
    partition_owner_index,
    shard_owner_index,
)
from groupcoord.coordinator.runtime.log_runner import ShardState
from groupcoord.coordinator.server.app import ProducerIdAllocator
from groupcoord.coordinator.server.data_dir import check_data_dir
from groupcoord.coordinator.server.worker_layout import (
    WORKERS_FILE,
    ownership_of,
    prepare_workers_dir,
    same_topic_ids,
    worker_config,
)
from groupcoord.storage import DataDirError

# -- ownership --------------------------------------------------------------------------------


def test_one_node_owns_everything() -> None:
    one = Ownership((7,), 0)
    assert all(one.owns_shard(s) and one.shard_owner(s) == 7 for s in range(50))
    assert all(one.owns_partition("t", p) and one.partition_leader("t", p) == 7 for p in range(9))


def test_shards_and_partitions_are_spread_evenly_and_owned_once() -> None:
    nodes = 3
    assert Counter(shard_owner_index(nodes, s) for s in range(51)) == {0: 17, 1: 17, 2: 17}
    for topic in ("a", "orders", "x" * 200):
        owners = Counter(partition_owner_index(nodes, topic, p) for p in range(30))
        assert owners == {0: 10, 1: 10, 2: 10}
    # one-partition topics do not all land on the first node
    assert len({partition_owner_index(nodes, f"t{i}", 0) for i in range(20)}) == nodes
    views = [Ownership((10, 11, 12), i) for i in range(nodes)]
    for p in range(12):
        assert sum(v.owns_partition("orders", p) for v in views) == 1
        assert {v.partition_leader("orders", p) for v in views} == {
            10 + partition_owner_index(nodes, "orders", p)
        }


def test_internal_topics_are_led_by_their_shards_owner() -> None:
    for shard in range(10):
        for topic in ("__consumer_offsets", "__transaction_state"):
            assert partition_owner_index(4, topic, shard) == shard_owner_index(4, shard)


# -- each worker's settings -------------------------------------------------------------------


def test_worker_settings_shift_ports_node_id_and_data_dir(tmp_path: Path) -> None:
    config = load_config(
        None,
        {
            "listen": "0.0.0.0:9092",
            "advertised_listener": "broker.example:19092",
            "metrics_listen": "127.0.0.1:9464",
            "data_dir": str(tmp_path),
            "node_id": 5,
            "workers": 3,
        },
        environ={},
    )
    second = worker_config(config, 2)
    assert (second.listen, second.advertised_listener) == ("0.0.0.0:9094", "broker.example:19094")
    assert second.metrics_listen == "127.0.0.1:9466"
    assert (second.node_id, second.worker_index) == (7, 2)
    assert second.data_dir == str(tmp_path / "worker-2")
    ownership = ownership_of(second)
    assert ownership == Ownership((5, 6, 7), 2)
    assert ownership_of(config) is None  # the parent, or a one-process server


def test_worker_settings_shift_every_listener() -> None:
    config = Config(
        listeners="PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9093",
        advertised_listeners="PLAINTEXT://a:9092, SSL://b:9093",
        workers=2,
    )
    second = worker_config(config, 1)
    assert second.listeners == "PLAINTEXT://127.0.0.1:9093,SSL://[::1]:9094"
    assert second.advertised_listeners == "PLAINTEXT://a:9093, SSL://b:9094"


def test_workers_refuse_ephemeral_ports() -> None:
    with pytest.raises(ConfigError, match="fixed ports"):
        worker_config(Config(listen="127.0.0.1:0", workers=2), 0)


def test_worker_index_must_be_below_workers() -> None:
    with pytest.raises(ConfigError):
        load_config(None, {"workers": 2, "worker_index": 2}, environ={})
    with pytest.raises(ConfigError):
        load_config(None, {"workers": 0}, environ={})


# -- the shared data directory ----------------------------------------------------------------


def test_workers_share_one_cluster_id_and_the_count_is_kept(tmp_path: Path) -> None:
    config = Config(data_dir=str(tmp_path / "d"), workers=2)
    cluster_id = prepare_workers_dir(config)
    for index in range(2):
        marker = json.loads((tmp_path / "d" / f"worker-{index}" / "cluster.json").read_text())
        assert marker == {"cluster_id": cluster_id}
    assert prepare_workers_dir(config) == cluster_id  # a restart
    with pytest.raises(DataDirError, match="made for 2 workers, not 3"):
        prepare_workers_dir(Config(data_dir=str(tmp_path / "d"), workers=3))
    assert json.loads((tmp_path / "d" / WORKERS_FILE).read_text()) == {"workers": 2}


def test_one_process_refuses_a_workers_data_dir(tmp_path: Path) -> None:
    prepare_workers_dir(Config(data_dir=str(tmp_path), workers=2))
    with pytest.raises(DataDirError, match="same number of workers"):
        check_data_dir(tmp_path)
    check_data_dir(tmp_path / "worker-1")  # each worker's own directory is a usual one


def test_workers_refuse_a_one_process_data_dir(tmp_path: Path) -> None:
    (tmp_path / "topics.json").write_text("{}")
    with pytest.raises(DataDirError, match="topics.json"):
        prepare_workers_dir(Config(data_dir=str(tmp_path), workers=2))


def test_topic_ids_are_alike_on_every_worker_and_differ_by_name_and_cluster() -> None:
    first, again, other = same_topic_ids("c1"), same_topic_ids("c1"), same_topic_ids("c2")
    assert first("orders") == again("orders") != first("payments")
    assert first("orders") != other("orders")


# -- producer ids and shards ------------------------------------------------------------------


def test_workers_never_hand_out_the_same_producer_id(tmp_path: Path) -> None:
    allocators = [
        ProducerIdAllocator(tmp_path / f"pids-{i}.json", stride=3, offset=i) for i in range(3)
    ]
    ids = [a.next() for a in allocators for _ in range(2500)]  # across blocks
    assert len(set(ids)) == len(ids)
    restarted = ProducerIdAllocator(tmp_path / "pids-1.json", stride=3, offset=1)
    assert restarted.next() not in ids
    assert ProducerIdAllocator(tmp_path / "one.json").next() == 0  # one process: as before


async def test_a_worker_loads_only_the_shards_it_owns(tmp_path: Path) -> None:
    from groupcoord.coordinator.runtime.service import CoordinatorService, group_config
    from groupcoord.storage import GroupCommitter, LogConfig

    committer = GroupCommitter()
    service = CoordinatorService(
        tmp_path, 4, group_config(Config()), LogConfig(segment_bytes_max=1 << 20), committer
    )
    service.disown(Ownership((0, 1), 1).owns_shard)
    await service.load()
    try:
        states = [r.state for r in service.runners]
        assert states == [ShardState.NOT_OWNED, ShardState.ACTIVE] * 2
        assert not (tmp_path / "__consumer_offsets-0").exists()
    finally:
        await service.close()
        await committer.close()

"""`serve --workers N`: what each worker is (its settings) and the data directory they share.

Worker i (0..N-1) is a whole broker node: node id `node_id + i`, every listener's port and
its advertised port `+ i` (Kafka-style advertised addresses: clients are told each
worker's own address), `metrics_listen`'s port `+ i`, and its data in
`data_dir/worker-i`, a data directory of its own as a one-process server's (same layout,
same checks). The top of `data_dir` holds only `cluster.json` (the one cluster id every
worker takes), `workers.json` (the worker count: ownership is a function of it,
ownership.py, so a different count would leave data on nodes that no longer own it) and
the worker directories.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path

from groupcoord.storage import DataDirError
from groupcoord.storage.checkpoint import atomic_write, read_json_file, state_file_fields
from groupcoord.storage.dir_lock import LOCK_FILE

from ..config import Config, ConfigError
from ..ownership import Ownership
from .data_dir import CLUSTER_FILE, WORKERS_FILE, load_cluster_id

# What the workers' requests to each other carry (worker_channel.py says why this type).
WORKER_PRINCIPAL = "Worker:groupcoord"
_WORKER_DIR = re.compile(r"worker-\d+")
_TOP_NAMES = frozenset({CLUSTER_FILE, WORKERS_FILE, LOCK_FILE, "lost+found"})
# An endpoint's port: the digits after the last ':' of HOST:PORT (or NAME://HOST:PORT),
# before the next ',' of a list.
_PORT = re.compile(r":(\d+)(?=\s*(,|$))")


def worker_dir(data_dir: Path, index: int) -> Path:
    return data_dir / f"worker-{index}"


def _shift_ports(text: str, by: int, what: str) -> str:
    def shifted(m: re.Match[str]) -> str:
        port = int(m.group(1))
        if port == 0:
            raise ConfigError(
                f"{what}: workers need fixed ports (worker i takes port + i), not port 0"
            )
        return f":{port + by}"

    return _PORT.sub(shifted, text)


def worker_config(config: Config, index: int) -> Config:
    """Worker `index`'s settings from the server's (module docstring). ConfigError when a
    listener asks for an ephemeral port (port 0): the workers' ports must be known to all."""
    shifts = {
        name: _shift_ports(getattr(config, name), index, name)
        for name in (
            "listen",
            "advertised_listener",
            "listeners",
            "advertised_listeners",
            "metrics_listen",
        )
    }
    return dataclasses.replace(
        config,
        node_id=config.node_id + index,
        data_dir=str(worker_dir(config.data_path, index)),
        worker_index=index,
        **shifts,
    )


def ownership_of(config: Config) -> Ownership | None:
    """The cluster a worker's settings (worker_config) make it part of; None for a
    one-process server."""
    if config.worker_index < 0:
        return None
    first = config.node_id - config.worker_index
    return Ownership(tuple(range(first, first + config.workers)), config.worker_index)


def same_topic_ids(cluster_id: str) -> Callable[[str], uuid.UUID]:
    """Topic ids every worker gives a topic alike, so that a topic created on one worker
    and copied to the others (topic_sync.py) has one id cluster-wide: a name-based UUID
    in the cluster's namespace. A topic deleted and created again gets its old id back
    (Kafka gives a new one); consumers of the old one see the new topic's offsets."""
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"groupcoord:{cluster_id}")

    def topic_id(name: str) -> uuid.UUID:
        return uuid.uuid5(namespace, name)

    return topic_id


def prepare_workers_dir(config: Config) -> str:
    """Check the shared top of data_dir (module docstring), record the worker count, and
    give every worker directory the cluster id; returns it. DataDirError for a directory
    holding anything else (a one-process server's data among it) or another count."""
    top = config.data_path
    top.mkdir(parents=True, exist_ok=True)
    names = os.listdir(top)
    foreign = sorted(n for n in names if n not in _TOP_NAMES and not _WORKER_DIR.fullmatch(n))
    if foreign:
        raise DataDirError(
            f"data directory {top} holds entries that are not workers' ({', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}): with workers > 1 it must be empty or "
            "made by `serve --workers`"
        )
    path = top / WORKERS_FILE
    data = read_json_file(path)
    if data is None:
        atomic_write(path, json.dumps({"workers": config.workers}).encode())
    else:
        with state_file_fields(path):
            recorded = data["workers"]
        if recorded != config.workers:
            raise DataDirError(
                f"data directory {top} was made for {recorded} workers, not {config.workers}: "
                "each worker owns a fixed share of the groups and partitions"
            )
    cluster_id = load_cluster_id(top)
    for index in range(config.workers):
        directory = worker_dir(top, index)
        directory.mkdir(exist_ok=True)
        if not (directory / CLUSTER_FILE).exists():
            atomic_write(directory / CLUSTER_FILE, json.dumps({"cluster_id": cluster_id}).encode())
    return cluster_id

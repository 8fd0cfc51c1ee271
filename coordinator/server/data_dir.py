"""The data directory as a whole: refusing one that is not ours, and its marker.

Why: pointed at a directory of a user's own files (a typo in data_dir, a home directory),
the server used to write 50 shard directories, topics/ and its state files among them.
A directory is taken as groupcoord's when it holds the marker `cluster.json` (written
first of all at the first start, before any other file but the lock) or nothing but names
groupcoord creates (a first start interrupted before the marker); an empty or missing
directory is a first start. Anything else is refused with one line naming a few of the
foreign entries. `lost+found` (the root of a freshly made filesystem, as a volume mount
often is) is not counted as foreign.

Permissions: the server runs with the umask `data_umask` (coordinator/server/app.py
`run`), so everything it creates here, segments, indexes, checkpoints, state files and
directories, is private to its user by default (0600 / 0700).
"""

from __future__ import annotations

import base64
import json
import os
import re
import uuid
from pathlib import Path

from groupcoord.storage import DataDirError
from groupcoord.storage.checkpoint import atomic_write, read_json_file, state_file_fields
from groupcoord.storage.dir_lock import LOCK_FILE

from ..runtime.partitioning import OFFSETS_TOPIC
from ..runtime.shard_count import SHARD_COUNT_FILE, TXN_SHARD_COUNT_FILE
from ..runtime.txn_service import TRANSACTION_STATE_TOPIC
from .recovery_report import BOOT_ID_FILE, CLEAN_SHUTDOWN_FILE

CLUSTER_FILE = "cluster.json"  # the marker: this directory is groupcoord's
# serve --workers' record of the worker count, at the top of a directory of workers
# (worker_layout.py): never a one-process server's data directory.
WORKERS_FILE = "workers.json"
TOPICS_FILE = "topics.json"
TOPICS_DIR = "topics"
PRODUCER_IDS_FILE = "producer-ids.json"
GROUP_CONFIGS_FILE = "group_configs.json"
SCRAM_CREDENTIALS_FILE = "scram_credentials.json"
ACLS_DIR = "acls"  # the ACL log (security/acl_store.py)

# Every name groupcoord creates at the top of a data directory (with `.tmp`: a state file
# write interrupted before its rename).
_OWN_NAMES = frozenset(
    {
        CLUSTER_FILE,
        TOPICS_FILE,
        TOPICS_DIR,
        PRODUCER_IDS_FILE,
        GROUP_CONFIGS_FILE,
        SCRAM_CREDENTIALS_FILE,
        ACLS_DIR,
        SHARD_COUNT_FILE,
        TXN_SHARD_COUNT_FILE,
        CLEAN_SHUTDOWN_FILE,
        BOOT_ID_FILE,
        LOCK_FILE,
    }
)
_SHARD_DIR = re.compile(
    "(" + re.escape(OFFSETS_TOPIC) + "|" + re.escape(TRANSACTION_STATE_TOPIC) + r")-\d+"
)
_NOT_FOREIGN = frozenset({"lost+found"})
_NAMES_SHOWN = 5


def check_data_dir(path: Path) -> None:
    """Refuse (DataDirError) a data directory holding files groupcoord did not create;
    see the module docstring. Creates nothing."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return  # a first start: created by the lock
    except NotADirectoryError:
        raise DataDirError(f"data directory {path} is not a directory") from None
    if WORKERS_FILE in names:
        raise DataDirError(
            f"data directory {path} holds the workers of `serve --workers` ({WORKERS_FILE}): "
            "start it with the same number of workers"
        )
    if CLUSTER_FILE in names:
        return
    foreign = sorted(name for name in names if not _created_by_us(name))
    if foreign:
        shown = ", ".join(foreign[:_NAMES_SHOWN]) + (", ..." if len(foreign) > _NAMES_SHOWN else "")
        raise DataDirError(
            f"data directory {path} holds {len(foreign)} entries groupcoord did not create "
            f"({shown}) and no {CLUSTER_FILE}: refusing to write among them; set data_dir to "
            f"an empty or new directory, or to one groupcoord created"
        )


def _created_by_us(name: str) -> bool:
    stem = name.removesuffix(".tmp")
    return stem in _OWN_NAMES or bool(_SHARD_DIR.fullmatch(name)) or name in _NOT_FOREIGN


def load_cluster_id(data_dir: Path) -> str:
    """The data directory's cluster id; a new one is written (the marker) when it has none.
    Raises DataDirError when cluster.json is unreadable."""
    path = data_dir / CLUSTER_FILE
    data = read_json_file(path)
    if data is not None:
        with state_file_fields(path):
            cluster_id = data["cluster_id"]
            if not isinstance(cluster_id, str) or not cluster_id:
                raise ValueError(f"cluster_id must be a non-empty string, not {cluster_id!r}")
        return cluster_id
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    atomic_write(path, json.dumps({"cluster_id": cluster_id}).encode())
    return cluster_id

"""The groups' dynamic configs (IncrementalAlterConfigs on GROUP resources), persisted in
one JSON file `{"groups": {group id: {name: value}}}` (storage/keyed_configs.py). What the
names mean and which values are allowed is groups/config.py's; shards read the overrides
through its GroupConfigSource protocol, the gateway (gateway.py) changes them once they
passed its checks."""

from __future__ import annotations

from pathlib import Path

from groupcoord.storage.keyed_configs import KeyedConfigFile

GROUPS_MAX = 1_000_000  # a bound on what clients can make us store


class GroupConfigStore(KeyedConfigFile):
    def __init__(self, path: Path, groups_max: int = GROUPS_MAX) -> None:
        super().__init__(path, "groups", "group", keys_max=groups_max)

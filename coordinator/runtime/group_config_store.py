"""The groups' dynamic configs (IncrementalAlterConfigs on GROUP resources), persisted: one
JSON file, `{"groups": {group id: {name: value}}}`, rewritten atomically on every change, as
the topic metadata is. What the names mean and which values are allowed is
groups/config.py's; shards read the overrides through its GroupConfigSource protocol, the
gateway (gateway.py) changes them once they passed its checks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from groupcoord.storage.checkpoint import atomic_write, read_json_file, state_file_fields

GROUPS_MAX = 1_000_000  # a bound on what clients can make us store


class GroupConfigStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._configs: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file; DataDirError naming it when it is unreadable or malformed."""
        data = read_json_file(self.path)
        if data is None:
            return
        with state_file_fields(self.path):
            configs = {str(g): dict(c) for g, c in data["groups"].items()}
            for group, values in configs.items():
                if not all(isinstance(v, str) for v in values.values()):
                    raise ValueError(f"group {group!r}: config values must be strings")
        self._configs = configs

    def overrides(self, group_id: str) -> Mapping[str, str]:
        return self._configs.get(group_id, {})

    def replace(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Make `configs` the group's overrides (none: forget the group) and persist.
        Raises ValueError when GROUPS_MAX groups already have overrides, OSError when the
        file cannot be written."""
        if configs:
            if group_id not in self._configs and len(self._configs) >= GROUPS_MAX:
                raise ValueError(f"at most {GROUPS_MAX} groups can have configs")
            self._configs[group_id] = dict(configs)
        else:
            self._configs.pop(group_id, None)
        payload = {"groups": self._configs}
        atomic_write(self.path, json.dumps(payload, sort_keys=True).encode())

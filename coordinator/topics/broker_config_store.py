"""The dynamic broker configs (IncrementalAlterConfigs on BROKER resources), persisted: one
JSON file in the data directory, `{"brokers": {resource name: {name: value}}}` (resource
name "" is the cluster-wide default, "<node id>" this broker's own), rewritten atomically on
every change, as the group configs are. What the names mean and which values are allowed is
alter_broker_configs.py's; the topic registry applies those that map to our settings."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from groupcoord.storage.checkpoint import atomic_write, read_json_file, state_file_fields

CONFIGS_MAX = 10_000  # per resource: a bound on what clients can make us store


class BrokerConfigStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._configs: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file; DataDirError naming it when it is unreadable or malformed."""
        data = read_json_file(self.path)
        if data is None:
            return
        with state_file_fields(self.path):
            configs = {str(r): dict(c) for r, c in data["brokers"].items()}
            for resource, values in configs.items():
                if not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
                    raise ValueError(f"broker {resource!r}: config values must be strings")
        self._configs = configs

    def overrides(self, resource: str) -> Mapping[str, str]:
        """The configs set on BROKER resource `resource` ("" or a node id)."""
        return self._configs.get(resource, {})

    def replace(self, resource: str, configs: Mapping[str, str]) -> None:
        """Make `configs` the resource's configs and persist. Raises ValueError past
        CONFIGS_MAX names, OSError when the file cannot be written (nothing changes)."""
        if len(configs) > CONFIGS_MAX:
            raise ValueError(f"at most {CONFIGS_MAX} broker configs can be set")
        updated = dict(self._configs)
        if configs:
            updated[resource] = dict(configs)
        else:
            updated.pop(resource, None)
        atomic_write(self.path, json.dumps({"brokers": updated}, sort_keys=True).encode())
        self._configs = updated

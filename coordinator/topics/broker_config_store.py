"""The dynamic broker configs (IncrementalAlterConfigs on BROKER resources), persisted in
one JSON file `{"brokers": {resource name: {name: value}}}` (storage/keyed_configs.py;
resource name "" is the cluster-wide default, "<node id>" this broker's own). What the names
mean and which values are allowed is alter_broker_configs.py's; the topic registry applies
those that map to our settings."""

from __future__ import annotations

from pathlib import Path

from groupcoord.storage.keyed_configs import KeyedConfigFile

CONFIGS_MAX = 10_000  # per resource: a bound on what clients can make us store


class BrokerConfigStore(KeyedConfigFile):
    def __init__(self, path: Path) -> None:
        super().__init__(path, "brokers", "broker", names_max=CONFIGS_MAX)

"""Dynamic configs kept by key (a group id, a broker resource): one JSON document
`{section: {key: {name: value}}}`, replaced whole and atomically (checkpoint.atomic_write) on
every change, so a crash leaves the old or the new configs, and a failed write changes
nothing in memory either. What the names mean and which values are allowed is the caller's;
this only bounds what clients can make us store."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .checkpoint import atomic_write, read_json_file, state_file_fields


class KeyedConfigFile:
    def __init__(
        self,
        path: Path,
        section: str,
        noun: str,
        *,
        keys_max: int | None = None,
        names_max: int | None = None,
    ) -> None:
        self.path = path
        self._section = section
        self._noun = noun  # "group", "broker": in the errors below
        self._keys_max = keys_max
        self._names_max = names_max
        self._configs: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file; DataDirError naming it when it is unreadable or malformed."""
        data = read_json_file(self.path)
        if data is None:
            return
        with state_file_fields(self.path):
            configs = {str(k): dict(c) for k, c in data[self._section].items()}
            for key, values in configs.items():
                if not all(isinstance(n, str) and isinstance(v, str) for n, v in values.items()):
                    raise ValueError(f"{self._noun} {key!r}: config values must be strings")
        self._configs = configs

    def overrides(self, key: str) -> Mapping[str, str]:
        """The configs set on `key` (empty when none are)."""
        return self._configs.get(key, {})

    def replace(self, key: str, configs: Mapping[str, str]) -> None:
        """Make `configs` the key's configs (none: forget the key) and persist. Raises
        ValueError past the bounds, OSError when the file cannot be written (nothing
        changes then)."""
        if self._names_max is not None and len(configs) > self._names_max:
            raise ValueError(f"at most {self._names_max} {self._noun} configs can be set")
        if (
            configs
            and self._keys_max is not None
            and key not in self._configs
            and len(self._configs) >= self._keys_max
        ):
            raise ValueError(f"at most {self._keys_max} {self._noun}s can have configs")
        updated = dict(self._configs)
        if configs:
            updated[key] = dict(configs)
        else:
            updated.pop(key, None)
        payload = {self._section: updated}
        atomic_write(self.path, json.dumps(payload, sort_keys=True).encode())
        self._configs = updated

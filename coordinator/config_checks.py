"""Checks of config.py's settings that need nothing of the Config class itself, and the
error every check raises: here so that config.py (one dataclass of every setting) stays
within the size limit."""

from __future__ import annotations

from dataclasses import fields
from typing import Any


class ConfigError(ValueError):
    pass


def check_min_max(config: Any) -> None:
    """Every pair of settings NAME_min_X / NAME_max_X: the minimum must not exceed the
    maximum (Kafka's GroupCoordinatorConfig requires the same of its pairs)."""
    values = {f.name: getattr(config, f.name) for f in fields(config)}
    for low_name, low in values.items():
        high_name = low_name.replace("_min_", "_max_")
        if high_name == low_name or high_name not in values:
            continue
        high = values[high_name]
        if isinstance(low, int) and isinstance(high, int) and low > high:
            raise ConfigError(
                f"{low_name} ({low}) exceeds {high_name} ({high}): the minimum must not "
                "exceed the maximum"
            )


def per_ip_overrides(text: str) -> dict[str, int]:
    """connections_max_per_ip_overrides ("ADDRESS:COUNT,...") as {address: count}."""
    overrides: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        address, sep, count = item.rpartition(":")
        address = address.strip().strip("[]")
        if not sep or not address or not count.strip().isdigit():
            raise ConfigError(
                f"connections_max_per_ip_overrides: expected ADDRESS:COUNT, got {item!r}"
            )
        overrides[address] = int(count)
    return overrides

"""What the data plane's handlers (coordinator/topics/) may ask of the group coordinator,
and the plain types of those answers. The gateway (runtime/gateway.py) provides it; this
module imports nothing of ours, so topics/ reaches neither runtime/ nor groups/ through it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import NamedTuple, Protocol


class GroupConfigEntry(NamedTuple):
    """One dynamic group config (KIP-848) of a group, as DescribeConfigs reports it."""

    name: str
    value: str  # the group's override, else the broker's value
    broker_value: str  # the broker's value (group.<name>)
    overridden: bool  # the group has an override
    kind: str  # Kafka's config type name (DescribeConfigs v3+)
    doc: str


class GroupConfigError(ValueError):
    """A group's configs that the broker's checks refuse (INVALID_CONFIG), with Kafka's
    message."""


class GroupAdmin(Protocol):
    def topics_deleted(self, topics: Mapping[str, uuid.UUID]) -> None:
        """After DeleteTopics: the groups' offsets of those topics are deleted."""
        ...

    def group_configs(self, group_id: str) -> list[GroupConfigEntry]:
        """Every group config of `group_id`, by name."""
        ...

    def group_config_overrides(self, group_id: str) -> Mapping[str, str]:
        """The group's overrides (name -> value)."""
        ...

    def alter_group_configs(
        self, group_id: str, overrides: Mapping[str, str], validate_only: bool
    ) -> None:
        """Make `overrides` the group's (persisted) unless validate_only. Raises
        GroupConfigError when the broker's checks refuse them."""
        ...

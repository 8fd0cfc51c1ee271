"""What the record checks (cleanup_policy.py, timestamps.py) read of a topic and a partition:
registry.Topic and registry.Partition, which import those checks, so the checks name these
instead."""

from __future__ import annotations

from typing import Protocol

from ..config import Config


class TopicView(Protocol):
    @property
    def name(self) -> str: ...

    def config_value(self, name: str, config: Config) -> str:
        """The topic's override of `name`, else the broker's value."""
        ...


class PartitionView(Protocol):
    @property
    def index(self) -> int: ...

    @property
    def topic(self) -> TopicView: ...

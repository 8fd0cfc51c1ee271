"""A custom assignor for groupcoord's tests, recognisable at a glance: every partition of a
topic goes to the subscriber with the smallest member id.

Its behaviour can be switched while the server runs, through the file the environment
variable GROUPCOORD_TEST_ASSIGNOR_CONTROL names: `fail` makes `assign` raise, `slow <seconds>`
makes it work (busy, in pure Python) that long first, or until the file says something else;
anything else, or no file: it just
assigns. Each call appends `start <members>` and then `done` (or `failed`) to
the file's `.calls` sibling, so that a test knows when a computation runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from groupcoord.coordinator.groups.assignors import PartitionAssignorError

if TYPE_CHECKING:
    import uuid

    from groupcoord.coordinator.groups.assignors import GroupSpec, TopicDescriber


class SmallestTakesAll:
    name = "smallest"

    def assign(
        self, group: GroupSpec, topics: TopicDescriber
    ) -> Mapping[str, Mapping[uuid.UUID, frozenset[int]]]:
        mode = _control()
        _note(f"start {len(group.members)}")
        if mode == "fail":
            _note("failed")
            raise PartitionAssignorError("told to fail")
        if mode.startswith("slow "):
            deadline = time.monotonic() + float(mode.split()[1])
            check_at = 0.0
            while time.monotonic() < deadline:
                sum(range(1000))  # work, holding the GIL as pure Python does
                if time.monotonic() >= check_at:  # told to stop early (control changed)?
                    check_at = time.monotonic() + 0.1
                    if _control() != mode:
                        break
        result: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
        for member_id in group.member_ids:  # sorted: the first subscriber is the smallest
            for topic_id in group.member_subscription(member_id).subscribed_topic_ids:
                if not any(topic_id in held for held in result.values()):
                    partitions = frozenset(range(topics.num_partitions(topic_id)))
                    result.setdefault(member_id, {})[topic_id] = partitions
        _note("done")
        return result


def _control() -> str:
    path = os.environ.get("GROUPCOORD_TEST_ASSIGNOR_CONTROL")
    try:
        return Path(path).read_text().strip() if path else ""
    except FileNotFoundError:
        return ""


def _note(line: str) -> None:
    path = os.environ.get("GROUPCOORD_TEST_ASSIGNOR_CONTROL")
    if path:
        with open(f"{path}.calls", "a") as calls:
            calls.write(line + "\n")

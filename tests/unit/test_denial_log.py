"""security/denials.py: one line per denial, at most lines_max per window, the count of
those dropped carried by the next line logged."""

from __future__ import annotations

from typing import Any

from groupcoord.coordinator.security.acl_model import AclOperation, ResourceType
from groupcoord.coordinator.security.denials import DenialLog


def test_denials_are_capped_per_window_and_the_dropped_counted() -> None:
    now = [0.0]
    lines: list[dict[str, Any]] = []
    denials = DenialLog(2, 10.0, clock=lambda: now[0], emit=lambda event, **f: lines.append(f))

    def deny(name: str) -> bool:
        return denials.denied(
            "JOIN_GROUP", "User:m", "127.0.0.1", AclOperation.READ, ResourceType.GROUP, name
        )

    assert [deny(f"g{i}") for i in range(5)] == [True, True, False, False, False]
    assert [x["resource_name"] for x in lines] == ["g0", "g1"]
    assert lines[0]["operation"] == "READ" and lines[0]["resource_type"] == "GROUP"
    now[0] = 10.5
    assert deny("g5")
    assert lines[-1]["suppressed_denials"] == 3
    assert deny("g6") and "suppressed_denials" not in lines[-1]

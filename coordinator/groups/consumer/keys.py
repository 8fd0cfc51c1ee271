"""The consumer groups' timer keys (as Kafka's, plus `assignment-<group>`: a held-back or
offloaded target, `fence-<group>`: members whose timers fired, removed in slices, and
`regex-<group>`: a resolution of the group's regexes, Kafka's `<group>-regex` task)."""

from __future__ import annotations


def session_timeout_key(group_id: str, member_id: str) -> str:
    return f"session-timeout-{group_id}-{member_id}"


def rebalance_timeout_key(group_id: str, member_id: str) -> str:
    return f"rebalance-timeout-{group_id}-{member_id}"


def assignment_key(group_id: str) -> str:
    return f"assignment-{group_id}"


def fence_key(group_id: str) -> str:
    return f"fence-{group_id}"


def regex_key(group_id: str) -> str:
    return f"regex-{group_id}"

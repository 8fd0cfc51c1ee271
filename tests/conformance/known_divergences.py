"""Sequences whose answers differ from Kafka's, each with both answers, until the lead decides:
fixed (remove the entry: the test is strict and fails once the answers agree) or a deliberate
decision written down in the README."""

from __future__ import annotations

_COMMIT_TOPIC_ORDER = (
    "OffsetCommit naming an existing topic and then an unknown one: Kafka answers the unknown "
    "topic first (UNKNOWN_TOPIC_OR_PARTITION), then the known one (NONE): topics "
    "[cf-no-such-topic, cf-t]; groupcoord keeps the request's order [cf-t, cf-no-such-topic]. "
    "Same errors and the same offsets committed; only the order of the response's topics "
    "differs (clients match topics by name)."
)

KNOWN_DIVERGENCES: dict[str, str] = {
    "offsets/commit-v2-known-then-unknown-topic": _COMMIT_TOPIC_ORDER,
    "offsets/commit-v9-known-then-unknown-topic": _COMMIT_TOPIC_ORDER,
}

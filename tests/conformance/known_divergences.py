"""Sequences whose answers differ from Kafka's, each with both answers, until the lead decides:
fixed (remove the entry: the test is strict and fails once the answers agree) or a deliberate
decision written down in the README."""

from __future__ import annotations

KNOWN_DIVERGENCES: dict[str, str] = {
    "consumer/regex-subscription": (
        "Issue 17 item 7b. ConsumerGroupHeartbeat v1 joining with SubscribedTopicNames=[cf-t] "
        "and SubscribedTopicRegex='cf-u.*': Kafka's first answer (epoch 2) assigns cf-t "
        "[0,1,2] only and the regex's cf-u [0] arrives later (a heartbeat 2 s on: epoch 3, "
        "cf-t [0,1,2] + cf-u [0]); groupcoord's first answer (epoch 2) already assigns cf-t "
        "[0,1,2] + cf-u [0], and 2 s on answers epoch 2 with no assignment change."
    ),
}

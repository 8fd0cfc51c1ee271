"""Sequences whose answers differ from Kafka's, each with both answers, until the lead decides:
fixed (remove the entry: the test is strict and fails once the answers agree) or a deliberate
decision written down in the README."""

from __future__ import annotations

KNOWN_DIVERGENCES: dict[str, str] = {}

"""The authorizer's denials in the log: one line per denied check, as Kafka's authorizer
logger writes them ("Principal = ... is Denied operation = ... from host = ... on resource
= ..."), rate-limited.

Two limits apply. Identical lines (same principal, host, operation, resource, API) are
suppressed and counted by the logging setup's RepeatLimiter (observability/logging.py), as
every repeated line is. Distinct lines are capped here: at most `lines_max` per
`window_s`; the first line after a window that dropped some carries `suppressed_denials`
(how many were not logged), so a client probing many names cannot flood the log either.
Pure but for the injected clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

from .acl_model import AclOperation, ResourceType

# structlog's own logger (configured by observability/logging.py at start): security/ does
# not import observability/, which imports it.
log = structlog.get_logger("groupcoord.authorizer")


class DenialLog:
    """Logs denials, at most `lines_max` distinct lines per `window_s` (module docstring)."""

    __slots__ = ("lines_max", "window_s", "_clock", "_emit", "_window_ends", "_lines", "_dropped")

    def __init__(
        self,
        lines_max: int = 20,
        window_s: float = 10.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        emit: Callable[..., Any] | None = None,
    ) -> None:
        self.lines_max = lines_max
        self.window_s = window_s
        self._clock = clock
        self._emit = emit or log.info
        self._window_ends = 0.0
        self._lines = 0
        self._dropped = 0

    def denied(
        self,
        api: str,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        """Log one denial unless the window's lines are spent; True if it was logged."""
        now = self._clock()
        if now >= self._window_ends:
            self._window_ends = now + self.window_s
            self._lines = 0
        if self._lines >= self.lines_max:
            self._dropped += 1
            return False
        self._lines += 1
        fields: dict[str, Any] = {}
        if self._dropped:
            fields["suppressed_denials"] = self._dropped
            self._dropped = 0
        self._emit(
            "authorization denied",
            principal=principal,
            host=host,
            operation=operation.name,
            resource_type=resource_type.name,
            resource_name=resource_name,
            api=api,
            **fields,
        )
        return True

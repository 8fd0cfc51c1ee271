"""structlog JSON logs on stderr: one line per event, never one per request at INFO.

Repeated lines are rate-limited here, once for every logger (RepeatLimiter): a failing
disk made each Produce log the same error, 23,000 identical lines in 15 s. The first of a
run of identical lines is logged; identical ones within `window_s` after it are counted,
not logged. When the window has passed, the next identical line is logged with
``suppressed_repeats`` (how many were dropped), and a run that simply stops is closed by
one "repeated log lines suppressed" line with the count. Identical means: same level,
same event, same fields (the timestamp is added after this check). structlog loggers go
through it as a processor, the standard library's (asyncio's among them) as a filter.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

# Distinct lines tracked at once; beyond it, lines are logged untracked (fail open).
_KEYS_MAX = 4096


class _Run:
    __slots__ = ("ends", "suppressed", "level", "fields")

    def __init__(self, ends: float, level: str, fields: dict[str, Any]) -> None:
        self.ends = ends  # monotonic time the window closes
        self.suppressed = 0
        self.level = level
        self.fields = fields


class RepeatLimiter:
    """Drops identical log lines within a window and counts them; see the module
    docstring. Thread-safe: storage threads log too."""

    def __init__(
        self,
        window_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        emit: Callable[[str, int, dict[str, Any]], None] | None = None,
        background: bool = True,
    ) -> None:
        """`emit(level, count, fields)` writes the summary of a run that stopped (default:
        a warning through structlog); with `background` a timer thread calls `flush` when
        a window with suppressed lines closes, else only later log calls do (tests)."""
        self.window_s = window_s
        self._clock = clock
        self._emit = emit or _emit_summary
        self._background = background
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, tuple[tuple[str, str], ...]], _Run] = {}
        self._next_close = float("inf")  # earliest window with suppressed lines to close
        self._timer: threading.Timer | None = None

    # structlog processor
    def __call__(
        self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        key = (method_name, tuple(sorted((k, repr(v)) for k, v in event_dict.items())))
        suppressed = self._check(key, method_name, event_dict)
        if suppressed < 0:
            raise structlog.DropEvent
        if suppressed:
            event_dict["suppressed_repeats"] = suppressed
        return event_dict

    def filter(self, record: logging.LogRecord) -> bool:
        """A logging.Filter for the standard library's loggers (same rule)."""
        fields = {"event": str(record.msg), "logger": record.name, "args": repr(record.args)}
        key = (record.levelname.lower(), tuple(sorted(fields.items())))
        suppressed = self._check(key, record.levelname.lower(), fields)
        if suppressed < 0:
            return False
        if suppressed:
            record.msg = f"{record.msg} [{suppressed} identical lines suppressed]"
        return True

    def _check(
        self,
        key: tuple[str, tuple[tuple[str, str], ...]],
        level: str,
        fields: MutableMapping[str, Any],
    ) -> int:
        """-1: drop the line; else log it, with that many earlier repeats suppressed."""
        now = self._clock()
        ended: list[_Run] = []
        with self._lock:
            if now >= self._next_close:
                ended = self._take_ended(now, keep=key)
            run = self._runs.get(key)
            if run is not None and now < run.ends:
                run.suppressed += 1
                if run.suppressed == 1:
                    self._next_close = min(self._next_close, run.ends)
                    self._start_timer(now)
                return -1
            suppressed = run.suppressed if run is not None else 0
            if run is not None or len(self._runs) < _KEYS_MAX:
                self._runs[key] = _Run(now + self.window_s, level, dict(fields))
        self._emit_all(ended)
        return suppressed

    def flush(self) -> None:
        """Log the summary of every run whose window closed with suppressed lines."""
        with self._lock:
            ended = self._take_ended(self._clock(), keep=None)
        self._emit_all(ended)

    def _take_ended(self, now: float, keep: object) -> list[_Run]:
        """Remove the runs whose window closed; return those with suppressed lines,
        except `keep`'s (that line is being logged now and carries the count)."""
        ended = []
        next_close = float("inf")
        for key, run in list(self._runs.items()):
            if now >= run.ends:
                if key != keep:
                    del self._runs[key]
                    if run.suppressed:
                        ended.append(run)
            elif run.suppressed:
                next_close = min(next_close, run.ends)
        self._next_close = next_close
        if next_close != float("inf"):
            self._start_timer(now)
        return ended

    def _start_timer(self, now: float) -> None:
        if not self._background or self._timer is not None:
            return
        self._timer = threading.Timer(max(self._next_close - now, 0.0) + 0.01, self._on_timer)
        self._timer.daemon = True
        self._timer.start()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self.flush()

    def _emit_all(self, ended: list[_Run]) -> None:
        for run in ended:
            self._emit(run.level, run.suppressed, run.fields)


def _emit_summary(level: str, count: int, fields: dict[str, Any]) -> None:
    repeated = dict(fields)
    event = repeated.pop("event", "")
    structlog.get_logger("groupcoord.logging").warning(
        "repeated log lines suppressed",
        repeated_event=event,
        repeated_level=level,
        repeated_fields=repeated,
        suppressed_repeats=count,
    )


def setup_logging(level: str, repeat_window_ms: int = 0) -> None:
    """JSON lines on stderr at `level`; identical lines within `repeat_window_ms` after
    one is logged are suppressed and counted (0: every line is logged)."""
    numeric = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=numeric)
    processors: list[Any] = []
    if repeat_window_ms > 0:
        limiter = RepeatLimiter(repeat_window_ms / 1000)
        processors.append(limiter)
        for handler in logging.getLogger().handlers:
            handler.addFilter(limiter)
    structlog.configure(
        processors=[
            *processors,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]

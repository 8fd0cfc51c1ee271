"""Rate-limited repeated log lines (observability/logging.py) and storage health
(storage/health.py): pure, with a manual clock."""

from __future__ import annotations

import errno
import logging
from typing import Any

import pytest
import structlog

from groupcoord.coordinator.observability.logging import RepeatLimiter
from groupcoord.storage.errors import LogFailed
from groupcoord.storage.health import StorageHealth, describe_error


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _limiter() -> tuple[RepeatLimiter, Clock, list[tuple[str, int, dict[str, Any]]]]:
    clock = Clock()
    summaries: list[tuple[str, int, dict[str, Any]]] = []
    limiter = RepeatLimiter(
        10.0,
        clock=clock,
        emit=lambda level, n, fields: summaries.append((level, n, fields)),
        background=False,
    )
    return limiter, clock, summaries


def _log(limiter: RepeatLimiter, level: str = "error", **fields: Any) -> dict[str, Any] | None:
    event = {"event": "append failed", **fields}
    try:
        return dict(limiter(None, level, event))
    except structlog.DropEvent:
        return None


def test_identical_lines_in_a_window_are_counted_not_logged() -> None:
    limiter, clock, summaries = _limiter()
    logged = [_log(limiter, topic="t", error="ENOSPC") for _ in range(23_000)]
    assert sum(line is not None for line in logged) == 1
    assert "suppressed_repeats" not in logged[0]  # type: ignore[operator]
    # Different fields or level: another line, logged.
    assert _log(limiter, topic="u", error="ENOSPC") is not None
    assert _log(limiter, "warning", topic="t", error="ENOSPC") is not None
    clock.now = 10.5
    again = _log(limiter, topic="t", error="ENOSPC")
    assert again is not None and again["suppressed_repeats"] == 22_999
    assert summaries == []  # the count went with the line let through
    assert _log(limiter, topic="t", error="ENOSPC") is None


def test_a_run_that_stops_is_closed_by_a_summary() -> None:
    limiter, clock, summaries = _limiter()
    for _ in range(5):
        _log(limiter, topic="t")
    _log(limiter, topic="quiet")  # logged once, nothing suppressed: no summary
    clock.now = 9.0
    limiter.flush()
    assert summaries == []
    clock.now = 11.0
    limiter.flush()
    assert summaries == [("error", 4, {"event": "append failed", "topic": "t"})]
    limiter.flush()
    assert len(summaries) == 1
    # Any later line closes ended runs too, without a flush.
    for _ in range(3):
        _log(limiter, topic="t")
    clock.now = 30.0
    assert _log(limiter, topic="other") is not None
    assert summaries[-1] == ("error", 2, {"event": "append failed", "topic": "t"})


def test_standard_library_records_are_limited_by_the_same_rule() -> None:
    limiter, clock, _ = _limiter()
    records = [
        logging.LogRecord("asyncio", logging.ERROR, "", 0, "accept failed %s", ("x",), None)
        for _ in range(4)
    ]
    assert [limiter.filter(r) for r in records] == [True, False, False, False]
    clock.now = 11.0
    record = logging.LogRecord("asyncio", logging.ERROR, "", 0, "accept failed %s", ("x",), None)
    assert limiter.filter(record)
    assert record.getMessage() == "accept failed x [3 identical lines suppressed]"


def test_storage_health_tracks_each_log_until_a_later_flush() -> None:
    health = StorageHealth()
    assert health.healthy
    mark_before = health.mark()
    full = OSError(errno.ENOSPC, "No space left on device")
    health.write_failed("append", "/data/t-0", full)
    health.write_failed("append", "/data/t-0", full)
    health.write_failed("flush", "/data/t-1", LogFailed("failed earlier"))
    assert not health.healthy
    assert [(f.kind, f.log, f.error) for f in health.failures()] == [
        ("append", "/data/t-0", "ENOSPC: No space left on device"),
        ("flush", "/data/t-1", "LogFailed: failed earlier"),
    ]
    assert health.failed_writes == {"append": 2, "flush": 1}
    # A flush that began before the failure says nothing about it.
    assert not health.write_succeeded("/data/t-0", mark_before)
    assert health.write_succeeded("/data/t-0", health.mark())
    assert not health.write_succeeded("/data/t-2", health.mark())  # never failed
    assert [f.log for f in health.failures()] == ["/data/t-1"]
    health.write_succeeded("/data/t-1", health.mark())
    assert health.healthy


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (OSError(errno.EFBIG, "File too large"), "EFBIG: File too large"),
        (ValueError("x"), "ValueError: x"),
    ],
)
def test_describe_error(error: BaseException, text: str) -> None:
    assert describe_error(error) == text
    wrapped = LogFailed("log failed earlier")
    wrapped.__cause__ = error
    expected = text if isinstance(error, OSError) else "LogFailed: log failed earlier"
    assert describe_error(wrapped) == expected

"""coordinator/server/recovery_report.py: the clean-shutdown marker and the report of data
cut off by log recovery."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from groupcoord.coordinator.server.recovery_report import (
    mark_clean_shutdown,
    report_recovery,
    take_clean_shutdown_marker,
)


def test_the_marker_counts_for_one_start_only(tmp_path: Path) -> None:
    assert not take_clean_shutdown_marker(tmp_path)  # a first start, or after a crash
    mark_clean_shutdown(tmp_path)
    assert take_clean_shutdown_marker(tmp_path)
    assert not take_clean_shutdown_marker(tmp_path)  # this run may still crash


def test_only_logs_that_lost_bytes_are_reported() -> None:
    def log(dropped: int, salvaged: int = 0) -> Any:
        return SimpleNamespace(
            recovered_truncated_bytes=dropped,
            recovered_salvaged_bytes=salvaged,
            recovered_damaged_offsets=[(3, 4)] if salvaged else [],
            directory=Path("p"),
            next_offset=7,
        )

    logs = [("a-0", log(0)), ("b-0", log(120)), ("c-3", log(5)), ("d-1", log(0, 300))]
    assert report_recovery(logs, after_clean_shutdown=False) == 3
    assert report_recovery(logs, after_clean_shutdown=True) == 3
    assert report_recovery([("a-0", log(0))], after_clean_shutdown=True) == 0

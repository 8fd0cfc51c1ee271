"""The analytics report: a group's lag and its rebalances over time, drawn as a PNG from the
tables the analytics job writes (analytics.py), read with pyarrow (no Spark needed).

Top: lag in records per topic partition (one line each, a point per micro-batch). Bottom:
the group's timeline, one row per kind of event (members joining and leaving, rebalances,
assignment changes, emptied, deleted), and a vertical line at each completed rebalance
across both, so a lag spike can be read against the rebalance that caused it.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds

# Event kinds in the order of the timeline's rows (bottom to top), with their markers.
EVENT_ROWS = (
    ("member_joined", "^", "tab:green"),
    ("member_left", "v", "tab:red"),
    ("member_expired", "v", "tab:purple"),
    ("member_fenced", "x", "tab:brown"),
    ("assignment_changed", "s", "tab:blue"),
    ("rebalance_started", ">", "tab:orange"),
    ("rebalance_completed", "D", "black"),
    ("group_emptied", "o", "tab:gray"),
    ("group_deleted", "X", "tab:red"),
)


class NothingToDraw(LookupError):
    """The tables hold neither lag nor events of the group."""


def read_group(output: Path, table: str, group: str) -> list[dict[str, Any]]:
    """The group's rows of one of the job's tables (none when the table is not there)."""
    path = Path(output) / table
    if not path.is_dir():
        return []
    dataset = ds.dataset(path, format="parquet", partitioning="hive")
    return list(dataset.to_table(filter=pc.field("group") == group).to_pylist())


def draw_report(output: Path, group: str, png: Path) -> Path:
    """Draw `group`'s lag and rebalances from the job's tables under `output` into `png`."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt

    lag = read_group(output, "lag", group)
    events = read_group(output, "group_events", group)
    if not lag and not events:
        raise NothingToDraw(f"no lag and no event of group {group!r} under {output}")
    fig, (lag_ax, events_ax) = plt.subplots(
        2, 1, figsize=(11, 7), sharex=True, height_ratios=(3, 2), constrained_layout=True
    )
    series: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    for row in lag:
        if row["lag_records"] is not None:
            name = f"{row['topic']}[{row['partition']}]"
            series[name].append((_time(row["time_ms"]), row["lag_records"]))
    for name, points in sorted(series.items()):
        points.sort()
        lag_ax.plot([t for t, _ in points], [n for _, n in points], marker="o", label=name)
    lag_ax.set_ylabel("lag (records)")
    lag_ax.set_title(f"group {group}: lag and rebalances")
    if series:
        lag_ax.legend(loc="upper left", fontsize="small", ncol=2)
    else:
        lag_ax.text(0.5, 0.5, "no committed offsets", ha="center", transform=lag_ax.transAxes)
    rows = {kind: i for i, (kind, _, _) in enumerate(EVENT_ROWS)}
    for kind, marker, colour in EVENT_ROWS:
        times = [_time(e["time_ms"]) for e in events if e["event"] == kind]
        if times:
            events_ax.scatter(times, [rows[kind]] * len(times), marker=marker, color=colour)
    for event in events:
        if event["event"] == "rebalance_completed":
            when = _time(event["time_ms"])
            for ax in (lag_ax, events_ax):
                ax.axvline(when, color="black", alpha=0.25, linewidth=1)
    events_ax.set_yticks(range(len(EVENT_ROWS)), [kind for kind, _, _ in EVENT_ROWS])
    events_ax.set_ylim(-0.5, len(EVENT_ROWS) - 0.5)
    events_ax.set_xlabel("time (UTC)")
    fig.autofmt_xdate()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)

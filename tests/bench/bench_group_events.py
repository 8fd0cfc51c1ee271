"""What the group event log and the rebalance timeline cost heartbeats and durable commits
(issue 20's target: no measurable change): bench_groups run on our server with them and
without them (GROUPCOORD_TEST_NO_GROUP_EVENTS=1, coordinator/groups/events_off.py), one
after the other, alternating which goes first, for several rounds, in the same run; or,
with --together, both of a round at the same time.

    python -m tests.bench.bench_group_events [--rounds 3] [--quick] [--together]
                                             [-- BENCH_GROUPS_ARGS...]

Each run is bench_groups --servers ours --sections heartbeats,commits --hb-rate 0
--commit-rate 0 (closed loops: heartbeats/s of Heartbeat v4 and durable OffsetCommit v9
commits/s) plus any arguments after `--`. Prints each run's figures, the ratio with / without
per round, and the median ratio; the server's CPU time per heartbeat and per commit too,
less sensitive than throughput to other processes on the machine. Never asserts: figures
only (on a loaded machine, read the spread of the ratios before concluding anything).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from groupcoord.coordinator.groups.events_off import NO_GROUP_EVENTS_ENV

BENCH_GROUPS = Path(__file__).resolve().parent / "bench_groups.py"
FIGURES = ("heartbeats/s", "commits/s", "server CPU us/heartbeat", "server CPU us/commit")


def start(events: bool, extra: list[str], tmp: Path) -> subprocess.Popen[bytes]:
    """A bench_groups run, with or without group events, writing its figures in `tmp`."""
    env = dict(os.environ)
    env.pop(NO_GROUP_EVENTS_ENV, None)
    if not events:
        env[NO_GROUP_EVENTS_ENV] = "1"
    cmd = [
        sys.executable,
        str(BENCH_GROUPS),
        "--servers",
        "ours",
        "--sections",
        "heartbeats,commits",
        "--hb-rate",
        "0",
        "--commit-rate",
        "0",
        "--json",
        str(tmp / "figures.json"),
        *extra,
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)


def figures_of(tmp: Path) -> dict[str, float | None]:
    """The figures a finished run wrote in `tmp` (None: not measured)."""
    figures: dict[str, float | None] = dict.fromkeys(FIGURES)
    out = tmp / "figures.json"
    if not out.exists():
        return figures
    doc = json.loads(out.read_text())
    ours = doc.get("servers", {}).get("ours", {})
    heartbeat, commits = ours.get("heartbeat", {}), ours.get("commits", {})
    duration_s = float(doc.get("config", {}).get("duration") or 0)
    figures["heartbeats/s"] = heartbeat.get("heartbeats_per_s")
    figures["server CPU us/heartbeat"] = heartbeat.get("server_cpu_us_per_hb")
    figures["commits/s"] = commits.get("commits_per_s")
    done = (commits.get("commits_per_s") or 0) * duration_s
    if done and commits.get("server_cpu_s") is not None:
        figures["server CPU us/commit"] = commits["server_cpu_s"] / done * 1e6
    return figures


def run_round(order: tuple[bool, bool], extra: list[str], together: bool) -> dict:
    """Both runs of a round, one after the other in `order`, or at the same time."""
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {events: Path(tmp) / str(events) for events in order}
        for d in dirs.values():
            d.mkdir()
        if together:
            procs = [start(events, extra, dirs[events]) for events in order]
            for proc in procs:
                proc.wait()
        else:
            for events in order:
                start(events, extra, dirs[events]).wait()
        for events in order:
            got[events] = figures_of(dirs[events])
    return got


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="bench_groups --quick")
    parser.add_argument(
        "--together",
        action="store_true",
        help="run the two of a round at the same time (each then has half the machine, but"
        " both see the same other load: steadier ratios on a busy machine)",
    )
    parser.add_argument("extra", nargs="*", help="more bench_groups arguments (after --)")
    args = parser.parse_args()
    extra = (["--quick"] if args.quick else []) + args.extra
    ratios: dict[str, list[float]] = {name: [] for name in FIGURES}
    for round_no in range(args.rounds):
        order = (True, False) if round_no % 2 == 0 else (False, True)
        got = run_round(order, extra, args.together)
        for name in FIGURES:
            with_events, without = got[True][name], got[False][name]
            line = (
                f"round {round_no}: {name} with events {_shown(with_events)},"
                f" without {_shown(without)}"
            )
            if with_events and without:
                ratios[name].append(with_events / without)
                line += f", ratio {with_events / without:.3f}"
            print(line, flush=True)
    for name, values in ratios.items():
        if values:
            shown = ", ".join(f"{v:.3f}" for v in values)
            print(
                f"{name}: with / without events, median {statistics.median(values):.3f} ({shown})"
            )


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


if __name__ == "__main__":
    main()

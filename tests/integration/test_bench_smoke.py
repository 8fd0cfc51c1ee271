"""The group benchmark still runs: every phase of tests/bench/bench_groups.py against our
server alone, with tiny loads. Its figures are not checked here (benchmarks never assert
a time); what is checked is that each phase completes without errors, that commits are
verified by OffsetFetch, and that heartbeats, formation and the static restart did what
they measure. Why: the README's figures come from this script, and a load generator that
no longer runs (it once broke unnoticed) is evidence that cannot be reproduced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import bench_groups, bench_vs_kafka

pytestmark = pytest.mark.integration


def _run_on_ours(tmp_path: Path, *args: str) -> dict:
    """bench_groups on our server alone with tiny loads; our figures, checked error-free."""
    out = tmp_path / "figures.json"
    common = ["--servers=ours", "--quick", "--duration=0.5", "--commit-conns=4"]
    rc = bench_groups.main([*common, *args, f"--work-dir={tmp_path}", f"--json={out}"])
    assert rc == 0
    ours = json.loads(out.read_text())["servers"]["ours"]
    assert ours["errors"] == {}
    return ours


def test_bench_groups_runs_every_phase_on_our_server(tmp_path: Path) -> None:
    ours = _run_on_ours(
        tmp_path,
        "--members=100",
        "--form-conns=100",
        "--hb-conns=4",
        "--hb-inflight=8",
        "--hb-rate=500",
        "--commit-inflight=2",
        "--commit-partitions=2",
        "--commit-rate=400",
        "--formation-sizes=3",
        "--formation-delay-ms=100",
        "--static-members=2",
    )
    for key in ("commits", "commits_paced_400"):
        commits = ours[key]
        assert commits["commits"] > 0 and commits["errors"] == 0, commits
        assert commits["verify_keys"] == 8 and commits["verify_mismatches"] == 0, commits
        assert commits["unanswered_after_drain"] == 0
    assert ours["form"]["members_formed"] == 100 and ours["form"]["failures"] == 0
    for key in ("heartbeat", "heartbeat_paced"):
        assert ours[key]["heartbeats_per_s"] > 0 and ours[key]["errors"] == 0, ours[key]
    assert ours["leave"] == {"groups": 2, "errors": 0}
    assert ours["formation_3"]["synced"] == 3
    restart = ours["static_restart"]
    assert restart["restarted"] == 2 and restart["restart_failures"] == 0
    assert not restart["generation_changed"] and restart["others_rejoins"] == 0


def test_paced_drivers_are_staggered_not_sent_in_one_tick() -> None:
    # 100 drivers at 5 requests/s each (500/s in all), checked every millisecond as the
    # paced runs do: the total follows the rate, and no millisecond sends more than one
    # request (the unstaggered ticker sent all 100 in the same millisecond every 200 ms).
    gl = bench_groups.gl
    drivers, share = 100, 5.0
    due = [0] * drivers
    per_tick = []
    for ms in range(1, 2001):
        sent = 0
        for k in range(drivers):
            n = gl.paced_count(ms / 1000, share, k, drivers) - due[k]
            if n >= 1:
                due[k] += n
                sent += n
        per_tick.append(sent)
    assert sum(per_tick) == 1000  # 2 s at 500/s
    assert max(per_tick) == 1
    assert all(9 <= d <= 11 for d in due)


def test_bench_groups_commits_only_runs_just_the_commit_phases(tmp_path: Path) -> None:
    ours = _run_on_ours(tmp_path, "--commits-only", "--commit-inflight=2", "--commit-rate=300,400")
    for key in ("commits_paced_300", "commits_paced_400"):
        assert ours[key]["commits"] > 0 and ours[key]["verify_mismatches"] == 0, ours[key]
    assert ours["paced_rate_p99_below_10ms"] in (None, 300.0, 400.0)
    assert ours["commit_target_met"] is bench_groups.commit_target_met(ours["commits"])
    assert "form" not in ours and "static_restart" not in ours


def _paced(rate: float, p99_ms: float, served: float = 1.0, errors: int = 0) -> dict:
    return {
        "commits_per_s": rate * served,
        "p99_ms": p99_ms,
        "errors": errors,
        "verify_mismatches": 0,
    }


def test_paced_rate_within_is_the_highest_rate_served_under_the_p99_bound() -> None:
    rates = [10_000.0, 20_000.0, 30_000.0, 40_000.0]
    res = {
        "commits_paced_10000": _paced(10_000, 3.0),
        "commits_paced_20000": _paced(20_000, 9.9),
        "commits_paced_30000": _paced(30_000, 14.0),  # p99 too high
        "commits_paced_40000": _paced(40_000, 2.0, served=0.9),  # fell behind the rate
    }
    assert bench_groups.paced_rate_within(res, rates) == 20_000.0
    res["commits_paced_20000"] = _paced(20_000, 5.0, errors=3)
    assert bench_groups.paced_rate_within(res, rates) == 10_000.0
    assert bench_groups.paced_rate_within({}, rates) is None


def test_commit_target_needs_throughput_and_p99_in_the_same_run() -> None:
    assert bench_groups.commit_target_met(_paced(50_000, 9.9)) is True
    assert bench_groups.commit_target_met(_paced(50_000, 10.0)) is False  # p99 not below
    assert bench_groups.commit_target_met(_paced(50_000, 5.0, served=0.99)) is False
    assert bench_groups.commit_target_met(_paced(60_000, 5.0, errors=1)) is False
    mismatch = {**_paced(60_000, 5.0), "verify_mismatches": 2}
    assert bench_groups.commit_target_met(mismatch) is False
    assert bench_groups.commit_target_met(None) is None


def test_bench_vs_kafka_entry_point_runs_on_our_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The comparison's entry point, on our server alone with tiny loads: a bench_groups
    process (its phases are all run by the test above) and the process of its own sections
    (idle RSS, produce and fetch), then the table. The Kafka peers start through
    peers.run_kafka, i.e. the JVM tests' reference broker."""
    out = tmp_path / "figures.json"
    rc = bench_vs_kafka.main(
        [
            "--peers=ours",
            "--sections=commits,rss,data",
            "--quick",
            "--duration=0.5",
            "--warmup=0.2",
            "--process-warmup=0.3",
            "--commit-inflight=2",
            "--commit-rate=300",
            "--messages=2000",
            "--groups-arg=--commit-conns=4",
            f"--work-dir={tmp_path}",
            f"--json={out}",
        ]
    )
    assert rc == 0
    ours = json.loads(out.read_text())["peers"]["ours"]
    groups, c = ours["groups"], ours["c"]
    assert groups["errors"] == {} and c["errors"] == {}
    assert groups["commits"]["commits"] > 0 and groups["commits"]["verify_mismatches"] == 0
    assert groups["commits_paced_300"]["errors"] == 0
    assert groups["commits_warmup"]["commits"] > 0
    assert "heartbeat" not in groups and "kip848" not in c
    assert c["data"]["fetch"]["messages"] == 2000 and c["rss_idle_mib"] > 0
    table = capsys.readouterr().out
    assert "| figure | unit | better | ours (fsync per ack) |" in table
    assert "| durable commits, closed loop, 4 conns x 2 | commit/s | higher |" in table
    assert "| idle RSS, 2 s after start | MiB | lower |" in table
    assert bench_vs_kafka.main([f"--table-from={out}"]) == 0  # the same table, from the JSON
    assert "| durable commits, closed loop, 4 conns x 2 |" in capsys.readouterr().out


def test_vs_kafka_table_names_each_ratio_ours_over_the_peer() -> None:
    rows = [
        ("commits", "commits", "commit/s", "higher", lambda r: r.get("v")),
        ("commits", "  p99", "ms", "lower", lambda r: r.get("p99")),
        ("commits", "  p50", "ms", "lower", lambda r: r.get("p50")),
    ]
    results = {
        "ours": {"v": 30_000.0, "p99": 5.0, "p50": float("nan")},
        "kafka": {"v": 20_000.0, "p99": "n/a"},
        "kafka-fsync": {"v": 10_000.0, "p99": 10.0},
    }
    table, ratios = bench_vs_kafka.markdown_table(rows, results, ["ours", "kafka", "kafka-fsync"])
    lines = table.splitlines()
    assert lines[0].endswith("| ours/kafka | ours/kafka-fsync |")
    assert lines[2] == (
        "| commits | commit/s | higher | 30,000 | 20,000 | 10,000 | 1.50x | 3.00x |"
    )
    assert lines[3] == "| - p99 | ms | lower | 5 | n/a | 10.0 | - | 0.50x |"
    assert lines[4] == "| - p50 | ms | lower | nan | - | - | - | - |"
    assert ratios == {
        "commits": {"ours/kafka": 1.5, "ours/kafka-fsync": 3.0},
        "p99": {"ours/kafka-fsync": 0.5},
    }


def test_bench_transactions_runs_on_our_server(capsys: pytest.CaptureFixture[str]) -> None:
    """bench_transactions on our server alone with tiny loads: both parts complete and the
    read_committed check of the concurrent producers finds every record exactly once."""
    from tests.bench import bench_transactions

    args = ["--peers=ours", "--seconds=0.5", "--producers=3", "--txns-per-producer=2"]
    assert bench_transactions.main(args) == 0
    out = capsys.readouterr().out
    assert "ours: (b) read_committed check exact" in out
    assert "mean ms from a request's arrival to its answer" in out

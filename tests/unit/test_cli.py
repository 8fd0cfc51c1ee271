"""The command line's parts that need no server: help, version, usage exit codes, the
layout of its tables, the timeline's formatting (from the JSON the server's HTTP port
answers), describe's rows and the reset planner."""

from __future__ import annotations

import io
import json
import urllib.error
from typing import Any

import pytest

from groupcoord.coordinator.cli import main
from groupcoord.coordinator.cli import timeline as tl
from groupcoord.coordinator.cli.group_view import Group, Member, offset_rows
from groupcoord.coordinator.cli.offset_reset import (
    ResetError,
    at_time,
    clamp,
    parse_duration_ms,
    parse_scope,
    shifted,
)
from groupcoord.coordinator.cli.output import kafka_table


def test_bare_groupcoord_prints_short_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: groupcoord COMMAND")
    assert "groups describe GROUP" in out and "serve" in out
    assert len(out.splitlines()) < 20


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("groupcoord ")


@pytest.mark.parametrize(
    "argv",
    [
        ["groups", "describe"],
        ["groups", "reset-offsets", "g", "--all-topics"],  # no --to-...
        ["groups", "reset-offsets", "g", "--to-latest"],  # no --topic / --all-topics
        ["groups", "reset-offsets", "g", "--all-topics", "--to-latest", "--to-earliest"],
        ["groups", "list", "--type", "share"],
        ["no-such-command"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_a_command_without_its_subcommand_shows_its_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["groups"]) == 2
    assert "reset-offsets" in capsys.readouterr().out
    assert main(["topics"]) == 2
    assert "alter-config" in capsys.readouterr().out


def test_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "exit codes: 0 ok; 1 the server answered an error" in out


def test_kafka_table_layout() -> None:
    out = io.StringIO()
    kafka_table(
        ("GROUP", "TOPIC", "PARTITION", "LAG"),
        [("g", "a-rather-long-topic-name", 0, None), ("g", "t", 12, 5)],
        (None, None, 10, None),
        out,
    )
    assert out.getvalue() == (
        "\nGROUP           TOPIC                    PARTITION  LAG"
        "\ng               a-rather-long-topic-name 0          -"
        "\ng               t                        12         5\n"
    )


def test_describe_rows_follow_kafka_consumer_groups() -> None:
    group = Group(
        "g",
        "consumer",
        "Stable",
        "uniform",
        3,
        0,
        [
            Member("m-small", None, "c1", "/10.0.0.1", [("t", 2)]),
            Member("m-idle", None, "c2", "/10.0.0.2", []),
            Member("m-big", None, "c3", "/10.0.0.3", [("u", 0), ("t", 1), ("t", 0)]),
        ],
    )
    rows = offset_rows(group, {("t", 0): 5, ("t", 2): 9, ("old", 0): 1}, {("t", 0): 8, ("t", 1): 4})
    assert [(r.topic, r.partition, r.consumer_id) for r in rows] == [
        ("t", 0, "m-big"),  # the member with most partitions first, by topic and partition
        ("t", 1, "m-big"),
        ("u", 0, "m-big"),
        ("t", 2, "m-small"),
        ("old", 0, None),  # committed, owned by nobody
    ]
    assert [(r.current_offset, r.log_end_offset, r.lag) for r in rows] == [
        (5, 8, 3),
        (None, 4, None),  # no commit: no lag
        (None, None, None),
        (9, None, None),  # no log end offset (no leader): no lag
        (1, None, None),
    ]


def test_reset_planning() -> None:
    assert parse_duration_ms("PT1H30M") == 90 * 60_000
    assert parse_duration_ms("P1DT0.5S") == 86_400_000 + 500
    for bad in ("1h", "PT", "P"):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)
    scope = parse_scope(["t", "u:0,2"], False)
    assert scope.whole_topics == ("t",) and scope.partitions == (("u", 0), ("u", 2))
    with pytest.raises(ValueError):
        parse_scope(["u:x"], False)
    start, end = {("t", 0): 10, ("t", 1): 0}, {("t", 0): 20, ("t", 1): 5}
    assert clamp({("t", 0): 3, ("t", 1): 99}, start, end) == {("t", 0): 10, ("t", 1): 5}
    assert shifted([("t", 0)], {("t", 0): 7}, -2) == {("t", 0): 5}
    with pytest.raises(ResetError, match="no committed offset"):
        shifted([("t", 1)], {("t", 0): 7}, 1)
    # No record that late: the log end, as Kafka falls back.
    assert at_time([("t", 0), ("t", 1)], {("t", 0): 12, ("t", 1): -1}, end) == {
        ("t", 0): 12,
        ("t", 1): 5,
    }


# The answer of GET /api/groups/<group>/timeline (built by the server's event log).
TIMELINE = {
    "group": "orders-app",
    "events": [
        {
            "time_ms": 1_795_000_000_123,
            "event": "member_joined",
            "generation_or_epoch": 1,
            "member_id": "m-1",
            "cause": "join",
            "details": {"client_id": "c1"},
        },
        {
            "time_ms": 1_795_000_045_000,
            "event": "member_expired",
            "generation_or_epoch": 2,
            "member_id": None,
            "cause": "session timeout",
            "details": {"moved": [["t", 0]]},
        },
    ],
}


def test_timeline_table(capsys: pytest.CaptureFixture[str]) -> None:
    tl.print_table(TIMELINE)
    assert capsys.readouterr().out == (
        "\nTIME                     EVENT           EPOCH      MEMBER-ID       CAUSE"
        "           DETAILS"
        "\n2026-11-18T11:06:40.123Z member_joined   1          m-1             join"
        "            client_id=c1"
        "\n2026-11-18T11:07:25.000Z member_expired  2          -               session timeout"
        ' moved=[["t",0]]\n'
    )


class _Answer(io.BytesIO):
    def __enter__(self) -> _Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_timeline_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []

    def urlopen(url: str, timeout: float) -> Any:
        asked.append(url)
        if "missing" in url:
            body = io.BytesIO(json.dumps({"error": "unknown group 'missing'"}).encode())
            raise urllib.error.HTTPError(url, 404, "Not Found", {}, body)  # type: ignore[arg-type]
        if "down" in url:
            raise urllib.error.URLError("connection refused")
        return _Answer(json.dumps(TIMELINE).encode())

    monkeypatch.setattr(tl.urllib.request, "urlopen", urlopen)
    assert main(["groups", "timeline", "orders app", "--bootstrap-server", "kafka1:9092"]) == 0
    assert asked == ["http://kafka1:9464/api/groups/orders%20app/timeline"]  # default port
    assert "member_expired" in capsys.readouterr().out
    assert main(["groups", "timeline", "g", "--http", "h:1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == TIMELINE
    assert main(["groups", "timeline", "missing", "--http", "h:1"]) == 1
    assert "unknown group 'missing'" in capsys.readouterr().err
    assert main(["groups", "timeline", "down", "--http", "h:1"]) == 3

"""What the command line prints: exit codes, Kafka's column layout, JSON for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import IntEnum
from typing import Any, TextIO

MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE


class Exit(IntEnum):
    """Exit codes scripts can rely on."""

    OK = 0
    KAFKA_ERROR = 1  # the server answered an error, or refused (e.g. a group with members)
    USAGE = 2  # bad arguments
    UNREACHABLE = 3  # the server could not be reached, or the connection broke


EXIT_CODES_HELP = (
    "exit codes: 0 ok; 1 the server answered an error or refused the operation (e.g. a "
    "group with live members, an unknown group); 2 usage error; 3 server unreachable"
)


def cell(value: object) -> str:
    return MISSING if value is None else str(value)


def kafka_table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    widths: Sequence[int | None],
    out: TextIO | None = None,
) -> None:
    """Print as kafka-consumer-groups.sh does: each line starts with a newline, columns are
    left-justified to `widths` (None: grown to the longest value, at least 15; the last
    column is never padded), and a newline ends the table."""
    out = out or sys.stdout
    text_rows = [[cell(v) for v in row] for row in rows]
    sized = [
        w if w is not None else max([15, len(h), *(len(r[i]) for r in text_rows)])
        for i, (h, w) in enumerate(zip(header, widths, strict=True))
    ]

    def line(values: Sequence[str]) -> str:
        head = " ".join(v.ljust(w) for v, w in zip(values[:-1], sized[:-1], strict=True))
        return f"{head} {values[-1]}" if head else values[-1]

    out.write("".join("\n" + line(r) for r in [list(header), *text_rows]))
    out.write("\n")


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")


def error(message: str) -> None:
    print(f"groupcoord: {message}", file=sys.stderr)

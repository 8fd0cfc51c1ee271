"""`groups reset-offsets`: which partitions, and the offsets they are reset to. Pure: the
caller fetches log start/end offsets, offsets for a time and the committed offsets.

As Kafka's GroupOffsetsResetter: --to-offset and --shift-by are clamped to the log's
start and end; --to-datetime and --by-duration take the first offset at or after that time,
or the log end offset when no record is that late."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]

EARLIEST, LATEST = -2, -1  # ListOffsets' special timestamps


class ResetError(ValueError):
    """A reset that cannot be planned (exit code 1)."""


@dataclass(frozen=True)
class Scope:
    """`--topic T` (every partition), `--topic T:0,2`, or `--all-topics` (the committed ones)."""

    all_topics: bool
    whole_topics: tuple[str, ...]
    partitions: tuple[TopicPartition, ...]


def parse_scope(topics: list[str], all_topics: bool) -> Scope:
    whole, parts = [], []
    for arg in topics:
        if ":" in arg:
            name, _, listed = arg.partition(":")
            try:
                parts.extend((name, int(p)) for p in listed.split(","))
            except ValueError:
                raise ValueError(
                    f"invalid topic argument {arg!r}: expected TOPIC:0,1,..."
                ) from None
        else:
            whole.append(arg)
    return Scope(all_topics, tuple(whole), tuple(parts))


_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse reads it (PnDTnHnMn.nS), in ms."""
    match = _DURATION.fullmatch(text.strip())
    if not match or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ValueError(f"invalid duration {text!r}: expected e.g. PT1H30M or P1DT2H")
    d, h, m, s = (float(match.group(k) or 0) for k in "dhms")
    return int(((d * 24 + h) * 60 + m) * 60_000 + s * 1000)


def parse_datetime_ms(text: str) -> int:
    """ISO date and time (YYYY-MM-DDTHH:mm:SS[.sss][zone]); without a zone, local time."""
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"invalid date-time {text!r}: expected e.g. 2026-11-27T10:00:00.000 or with +01:00"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def clamp(
    requested: Mapping[TopicPartition, int],
    log_start: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    out = {}
    for tp, offset in requested.items():
        if tp not in log_end or tp not in log_start:
            raise ResetError(f"the log offsets of {tp[0]}-{tp[1]} are unknown")
        out[tp] = min(max(offset, log_start[tp]), log_end[tp])
    return out


def shifted(
    partitions: list[TopicPartition], committed: Mapping[TopicPartition, int], shift: int
) -> dict[TopicPartition, int]:
    out = {}
    for tp in partitions:
        if tp not in committed:
            raise ResetError(
                f"cannot shift the offset of {tp[0]}-{tp[1]}: the group has no committed offset"
            )
        out[tp] = committed[tp] + shift
    return out


def at_time(
    partitions: list[TopicPartition],
    by_time: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """The offset for a time, or the log end where no record is that late (-1)."""
    out = {}
    for tp in partitions:
        offset = by_time.get(tp, -1)
        if offset < 0:
            offset = log_end.get(tp, -1)
        if offset < 0:
            raise ResetError(f"the offsets of {tp[0]}-{tp[1]} are unknown")
        out[tp] = offset
    return out

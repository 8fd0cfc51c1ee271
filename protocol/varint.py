"""Kafka's variable-length integers: the one reader and writer of each form.

Unsigned varint (Kafka's ByteUtils.readUnsignedVarint): seven bits a byte, lowest group
first, the top bit set on every byte but the last. Compact strings, bytes and arrays,
tagged-field sections and nullable-struct markers use it; Kafka reads at most 5 bytes.
Record fields (Kafka's DefaultRecord: lengths, timestamp and offset deltas) use the zigzag
form of the same bytes (readVarint, readVarlong: at most 5 and 10 bytes), in which 0, -1,
1, -2, ... are written as 0, 1, 2, 3, ...

The readers take the position to read at, the end of the bytes they may read (a tagged
field's window, a frame's length; by default the buffer's end) and `max_bytes`, the longest
encoding accepted (callers differ: see each one's constant). They raise VarintError, a
ValueError, when the bytes end first or the encoding is longer (IndexError at the buffer's
end when no `end` is given); callers turn it into their own error where they already turn
the other decoding errors. No byte at or past `end` is ever read.

A value below 0x80 is its own single byte. Code on a hot path tests `buf[pos] < 0x80`
inline, takes the value from ONE_BYTE_VARINTS (zigzag) or the byte itself (unsigned), and
calls a reader for longer values only (guard.py's generated walks, record_fast.py,
batch_rewrite.py); writers take a small value's bytes from SMALL_UVARINTS.
"""

from __future__ import annotations

import sys
from typing import Final

# Kafka's limits: an int32 in an unsigned varint or a zigzag varint, an int64 in a zigzag
# varlong.
UVARINT_MAX_BYTES: Final = 5
VARINT_MAX_BYTES: Final = 5
VARLONG_MAX_BYTES: Final = 10
# The readers' default `end`: no bound but the buffer's own. Cheaper than passing
# len(buf) where a read past the end may raise IndexError (the record codecs catch it).
BUFFER_END: Final = sys.maxsize

# The one-byte encodings (b < 0x80), for inline fast paths: the bytes of each unsigned value
# below 0x80 (for writers), and the value of each one-byte zigzag varint (for readers).
SMALL_UVARINTS: Final = tuple(bytes((b,)) for b in range(0x80))
ONE_BYTE_VARINTS: Final = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))


class VarintError(ValueError):
    """A varint cut short by the end of its bytes, or longer than allowed."""


def read_uvarint(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int = BUFFER_END,
    max_bytes: int = UVARINT_MAX_BYTES,
) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at `pos`, reading nothing at or
    past `end` and at most `max_bytes` bytes. Raises VarintError (IndexError when it runs
    past the buffer's end instead, with `end` left at BUFFER_END)."""
    if pos >= end:
        raise VarintError("varint runs past the end of its bytes")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    last = pos + max_bytes - 1  # where the last byte allowed sits
    pos += 1
    while True:
        if pos > last:
            raise VarintError(f"varint longer than {max_bytes} bytes")
        if pos >= end:
            raise VarintError("varint runs past the end of its bytes")
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        pos += 1
        shift += 7


def read_varint(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int = BUFFER_END,
    max_bytes: int = VARINT_MAX_BYTES,
) -> tuple[int, int]:
    """(value, position after it) of the zigzag varint (or varlong) at `pos`; as
    read_uvarint."""
    value, pos = read_uvarint(buf, pos, end, max_bytes)
    return (value >> 1) ^ -(value & 1), pos


def uvarint_bytes(value: int) -> bytes:
    """The unsigned varint encoding of `value` (>= 0)."""
    if value < 0x80:
        return SMALL_UVARINTS[value]
    # Up to four bytes without a loop (a record's length, a timestamp delta of days).
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x20_0000:
        return bytes(((value & 0x7F) | 0x80, (value >> 7 & 0x7F) | 0x80, value >> 14))
    if value < 0x1000_0000:
        return bytes(
            (
                (value & 0x7F) | 0x80,
                (value >> 7 & 0x7F) | 0x80,
                (value >> 14 & 0x7F) | 0x80,
                value >> 21,
            )
        )
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_bytes(value: int) -> bytes:
    """The zigzag varint (or varlong) encoding of `value`, a signed int64 (OverflowError
    outside that range)."""
    if not -0x8000_0000_0000_0000 <= value <= 0x7FFF_FFFF_FFFF_FFFF:
        raise OverflowError(f"{value} is not an int64")
    return uvarint_bytes((value << 1) ^ (value >> 63))

"""Field readers and writers shared by the coordinator record codecs (record_schema.py, the
generic one, and record_fast.py, the hand-written fast paths): strings, bytes, array counts
and tagged-field sections in their flexible form (compact: unsigned varint length + 1, 0 =
null) and their classic one (int16 / int32 length, -1 = null).

Readers take (buf, pos) and return (value, position after it); they read a one-byte varint
inline, a longer one with varint.py's reader. They raise MalformedRecord, or one of
DECODE_ERRORS (a struct or index error, bad UTF-8, a bad varint), which the record decoders
turn into MalformedRecord with the record's name.
"""

from __future__ import annotations

import functools
import struct
import uuid
from typing import Final

from .record_types import MalformedRecord
from .varint import VarintError, read_uvarint, uvarint_bytes

# Each module declares the structs it calls methods on: a name imported from another module
# gets no method-call optimisation from the compiler (LOAD_ATTR builds a bound method on
# every call), about 6% of an OffsetCommitValue encode.
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

MAX_STRING = 0x7FFF
ZERO_UUID: Final = uuid.UUID(int=0)
ZERO_UUID_BYTES: Final = bytes(16)
DECODE_ERRORS = (struct.error, IndexError, UnicodeDecodeError, VarintError)


@functools.lru_cache(maxsize=512)
def int32s(n: int) -> struct.Struct:
    return struct.Struct(f">{n}i")


_uuid_memo: dict[bytes, uuid.UUID] = {}
_UUID_MEMO_SIZE = 4096


def cached_uuid(raw: bytes) -> uuid.UUID:
    """UUID from 16 bytes; memoised because topic ids repeat and UUID() costs ~1 us."""
    u = _uuid_memo.get(raw)
    if u is None:
        if len(raw) != 16:
            raise MalformedRecord("uuid truncated")
        u = uuid.UUID(bytes=raw)
        if len(_uuid_memo) >= _UUID_MEMO_SIZE:
            _uuid_memo.clear()
        _uuid_memo[raw] = u
    return u


def get_str(buf: bytes, pos: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        n = buf[pos]
        if n < 0x80:  # one byte: read inline
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
    if n < 0:
        raise MalformedRecord("null in a non-nullable string")
    end = pos + n
    if n > MAX_STRING or end > len(buf):
        raise MalformedRecord("string overlong or truncated")
    return buf[pos:end].decode(), end


def get_nstr(buf: bytes, pos: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        n = buf[pos]
        if n < 0x80:  # one byte: read inline
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if n > MAX_STRING or end > len(buf):
        raise MalformedRecord("string overlong or truncated")
    return buf[pos:end].decode(), end


def get_bytes(buf: bytes, pos: int, flexible: bool) -> tuple[bytes, int]:
    if flexible:
        n = buf[pos]
        if n < 0x80:  # one byte: read inline
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
    if n < 0:
        raise MalformedRecord("null in non-nullable bytes")
    end = pos + n
    if end > len(buf):
        raise MalformedRecord("bytes truncated")
    return buf[pos:end], end


def get_count(buf: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array length (-1 = null); rejects counts larger than the bytes left, as Kafka does."""
    if flexible:
        n = buf[pos]
        if n < 0x80:  # one byte: read inline
            pos += 1
        else:
            n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
    if n > len(buf) - pos:
        raise MalformedRecord(f"array of {n} elements in {len(buf) - pos} bytes")
    return n, pos


def skip_tags(buf: bytes, pos: int) -> int:
    if buf[pos] == 0:  # no tagged field: the usual case
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise MalformedRecord("tagged field truncated")
    return pos


def put_str(out: list[bytes], s: str, flexible: bool) -> None:
    raw = s.encode()
    if len(raw) > MAX_STRING:
        raise ValueError(f"string of {len(raw)} bytes exceeds {MAX_STRING}")
    out.append(uvarint_bytes(len(raw) + 1) if flexible else _I16.pack(len(raw)))
    out.append(raw)


def put_nstr(out: list[bytes], s: str | None, flexible: bool) -> None:
    if s is None:
        out.append(b"\x00" if flexible else b"\xff\xff")
    else:
        put_str(out, s, flexible)


def put_bytes(out: list[bytes], b: bytes, flexible: bool) -> None:
    out.append(uvarint_bytes(len(b) + 1) if flexible else _I32.pack(len(b)))
    out.append(b)


def put_count(out: list[bytes], n: int, flexible: bool) -> None:
    out.append(uvarint_bytes(n + 1) if flexible else _I32.pack(n))

"""Request header v1/v2 parsing and response header encoding, by hand for speed."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .frozen import fast_new
from .varint import UVARINT_MAX_BYTES, VarintError, read_uvarint

_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class MalformedHeader(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


# Every request gets a header: built without the frozen __init__'s object.__setattr__ calls.
new_request_header = fast_new(RequestHeader)


def peek_fixed(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the part every header version shares."""
    if len(frame) < 8:
        raise MalformedHeader("request header truncated")
    key, version, correlation_id = _FIXED.unpack_from(frame, 0)
    return key, version, correlation_id


def parse_header(frame: bytes, flexible: bool) -> tuple[RequestHeader, int]:
    """Parse header v1 (v2 for flexible versions); returns (header, body offset)."""
    key, version, correlation_id = peek_fixed(frame)
    pos = 8
    if len(frame) < pos + 2:
        raise MalformedHeader("client id truncated")
    (size,) = _I16.unpack_from(frame, pos)
    pos += 2
    client_id: str | None = None
    if size >= 0:
        if len(frame) < pos + size:
            raise MalformedHeader("client id truncated")
        try:
            client_id = frame[pos : pos + size].decode()
        except UnicodeDecodeError as e:
            raise MalformedHeader("client id is not UTF-8") from e
        pos += size
    if flexible:
        # Header tagged fields: none are defined that we use; skip them.
        end = len(frame)
        try:
            count, pos = read_uvarint(frame, pos, end, UVARINT_MAX_BYTES)
            for _ in range(count):
                _tag, pos = read_uvarint(frame, pos, end, UVARINT_MAX_BYTES)
                length, pos = read_uvarint(frame, pos, end, UVARINT_MAX_BYTES)
                pos += length
                if pos > end:
                    raise MalformedHeader("tagged field truncated")
        except VarintError as e:
            raise MalformedHeader(f"header tagged fields: {e}") from None
    return new_request_header(key, version, correlation_id, client_id), pos


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0 (correlation id) or v1 (plus an empty tagged-field section)."""
    if flexible:
        return _I32.pack(correlation_id) + b"\x00"
    return _I32.pack(correlation_id)

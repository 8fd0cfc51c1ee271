"""The client side of the codec: requests framed as a client sends them, responses read as
a client reads them (for the command line's admin client and the tests' raw client)."""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from .api import ApiKey, response_schema

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
_CORRELATION = struct.Struct(">i")


def encode_request(
    api_key: int, version: int, correlation_id: int, body: Any, client_id: str = "rawclient"
) -> bytes:
    """A whole frame: size, request header (v1, or v2 for flexible versions), body."""
    cls = type(body)
    buf = io.BytesIO()
    buf.write(_HEADER.pack(api_key, version, correlation_id))
    encoded = client_id.encode()
    buf.write(struct.pack(">h", len(encoded)) + encoded)
    if cls.__header_schema__.__version__ >= 2:
        buf.write(b"\x00")  # no tagged fields
    entity_writer(cls)(buf, body)
    payload = buf.getvalue()
    return _SIZE.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response frame without its size prefix."""
    correlation_id = _CORRELATION.unpack_from(frame, 0)[0]
    cls = response_schema(api_key, version)
    pos = 4
    if cls.__flexible__ and api_key != ApiKey.API_VERSIONS:
        pos += 1  # response header v1: empty tagged fields (ApiVersions always uses v0)
    body, _ = entity_reader(cls)(frame, pos)
    return correlation_id, body

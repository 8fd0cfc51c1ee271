"""One Kafka request to another node on a connection of our own, and its response: what
the nodes' own exchanges share (peer_sasl's SASL exchange with a peer listener,
topic_sync's requests to peer workers)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from groupcoord.protocol.client_codec import decode_response, encode_request

_SIZE = struct.Struct(">i")


async def exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    api_key: int,
    version: int,
    body: Any,
    client_id: str,
    timeout_s: float | None = None,
) -> Any:
    """Send one request (correlation id 1: one request at a time on the connection) and
    read its response body. asyncio.IncompleteReadError when the peer closes first,
    TimeoutError when a read waits longer than `timeout_s` (None: no limit here)."""
    writer.write(encode_request(api_key, version, 1, body, client_id))
    size = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), timeout_s))[0]
    frame = await asyncio.wait_for(reader.readexactly(size), timeout_s)
    return decode_response(api_key, version, frame)[1]

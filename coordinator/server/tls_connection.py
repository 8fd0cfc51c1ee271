"""A connection of an SSL or SASL_SSL listener, read as a buffered protocol.

Why: with a streaming protocol, the event loop's TLS layer (uvloop's sslproto) decrypts
each TLS record (16 KiB at most) into a fresh bytes object of its whole read size
(256 KiB, shrunk afterwards), then joins a read's records into one more bytes object.
As a buffered protocol, the TLS layer decrypts a read's records straight into one buffer
we give (get_buffer) and says how much it wrote (buffer_updated): no allocation per
record, and one copy into the bytes the frame decoder keeps. Measured on 1 MiB produce
frames, the event loop's CPU per MiB read over TLS fell by about a quarter.

The buffer is shared by every TLS connection of the process: buffer_updated runs right
after the decryption into it, on the event loop, and copies the bytes out before any
other connection reads. Plaintext connections stay streaming (connection.py): there the
loop reads the socket into bytes itself, and a buffered protocol would add a call per
read.

Writes: the TLS layer encrypts each buffer it is given as TLS records of its own, so the
small responses that became ready in one loop iteration (a round of commits) are joined
first: one record, one encryption, instead of one each.
"""

from __future__ import annotations

import asyncio

from .connection import Connection

# What the TLS layer decrypts per read at most: uvloop reads the socket 256 KiB at a time.
_READ_BUFFER_BYTES = 256 * 1024
# Responses waiting for one write are joined up to this many bytes (a TLS record holds
# 16 KiB; past that, the records' own overhead is small and a join would be one more copy).
_JOIN_BYTES_MAX = 16 * 1024


class _SharedReadBuffer:
    """One read buffer for every TLS connection of the process (made on first use)."""

    view: memoryview | None = None

    @classmethod
    def get(cls) -> memoryview:
        view = cls.view
        if view is None:
            view = cls.view = memoryview(bytearray(_READ_BUFFER_BYTES))
        return view


class TlsConnection(Connection, asyncio.BufferedProtocol):
    """Connection, fed by the TLS layer through get_buffer / buffer_updated."""

    def get_buffer(self, sizehint: int) -> memoryview:
        return _SharedReadBuffer.get()

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_SharedReadBuffer.get()[:nbytes].tobytes())

    def _write_out(self) -> None:
        out = self._out
        if len(out) > 1 and self._out_bytes <= _JOIN_BYTES_MAX:
            self._out = [b"".join(out)]
        super()._write_out()

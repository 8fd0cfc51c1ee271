"""A connection of an SSL or SASL_SSL listener, read as a buffered protocol.

Why: with a streaming protocol, the event loop's TLS layer (uvloop's sslproto) decrypts
each TLS record (16 KiB at most) into a fresh bytes object of its whole read size
(256 KiB, shrunk afterwards), then joins a read's records into one more bytes object.
As a buffered protocol, the TLS layer decrypts a read's records straight into memory we
give (get_buffer) and says how much it wrote (buffer_updated). The frames are read out of
it by a BufferedFrameDecoder (protocol/buffered_framing.py): a read goes into one scratch
buffer shared by every TLS connection of the process, its whole frames are copied out
once each, and a large frame it leaves partial is decrypted in place into the bytes
object that becomes the frame (a 1 MiB produce frame: no copy after the decryption,
instead of a copy out per read and one more to join them).

The scratch buffer is shared: buffer_updated runs right after the decryption into it, on
the event loop, and moves out what the connection did not take (keep_rest) before any
other connection reads. Plaintext connections stay streaming (connection.py): there the
loop reads the socket into bytes itself, and a buffered protocol would add a call per
read.

Writes: the TLS layer encrypts each buffer it is given as TLS records of its own, so the
small responses that became ready in one loop iteration (a round of commits) are joined
first: one record, one encryption, instead of one each.

Why the loop's TLS layer (a memory BIO) and not an ssl.SSLSocket read straight from the
socket: what TLS costs the server per MB produced is OpenSSL's, per record more than per
byte. librdkafka (confluent-kafka 2.16, bench_tls's 1 MB batches of 1 KiB values) sends
~470 records per MiB, not 64: about a fifth of each batch's messages go as two records
each (a few bytes, then the value). OpenSSL 3.0 decrypts that mix at ~1.06 ms/MiB, 0.50
in 16 KiB records (~1.3 us per extra record; TLS 1.3 AES-256-GCM, memory BIOs;
tests/bench/bench_tls_records.py measures both). The memory BIO's extra copies cost
~0.1 ms/MiB; a socket-BIO read would save them but, Python offering no read-ahead,
OpenSSL then reads each record with two recv calls (measured: 1,000 records, ~2,000
reads), ~950 system calls per MiB: more than the copies it saves.
"""

from __future__ import annotations

import asyncio
from typing import Any

from groupcoord.protocol.buffered_framing import BufferedFrameDecoder

from .connection import Connection

# What the TLS layer decrypts per read at most into the shared buffer: uvloop reads the
# socket 256 KiB at a time.
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decoder = self._frames = BufferedFrameDecoder(
            self.server.config.frame_bytes_max, _SharedReadBuffer.get()
        )

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        frames = self._frames
        frames.wrote(nbytes)
        self._received(nbytes)
        # A frame is allocated at its announced size only once the server's byte budget
        # granted it (frame_budget.py): a connection waiting for bytes keeps what it read.
        frames.keep_rest(in_place=not (self._bytes_wait or self.closed))

    def _write_out(self) -> None:
        out = self._out
        if len(out) > 1 and self._out_bytes <= _JOIN_BYTES_MAX:
            self._out = [b"".join(out)]
        super()._write_out()

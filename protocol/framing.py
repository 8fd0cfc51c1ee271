"""Length-prefixed Kafka frames: a 4-byte big-endian size, then the request."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(ValueError):
    """A frame announced a size above the limit (or a negative size)."""


class FrameDecoder:
    """Accumulates bytes from a socket and yields whole frames.

    Feed whatever arrived; `next_frame()` returns the next complete frame (without its size
    prefix) or None. A size above `frame_bytes_max` raises FrameTooLarge before any of the
    body is buffered, so a hostile size cannot make us allocate.
    """

    __slots__ = ("_buf", "_pos", "frame_bytes_max")

    def __init__(self, frame_bytes_max: int) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.frame_bytes_max = frame_bytes_max

    def feed(self, data: bytes) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def next_frame(self) -> bytes | None:
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < 4:
            return None
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < 0 or size > self.frame_bytes_max:
            raise FrameTooLarge(
                f"frame of {size} bytes exceeds the limit of {self.frame_bytes_max}"
            )
        end = pos + 4 + size
        if len(buf) < end:
            return None
        frame = bytes(buf[pos + 4 : end])
        if end == len(buf):
            buf.clear()
            self._pos = 0
        elif end > 1 << 20:
            # Drop consumed bytes now and then, so a long pipelined stream stays small.
            del buf[:end]
            self._pos = 0
        else:
            self._pos = end
        return frame


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its size."""
    return _SIZE.pack(len(payload)) + payload

"""Length-prefixed Kafka frames: a 4-byte big-endian size, then the request."""

from __future__ import annotations

import struct
from collections import deque

_SIZE = struct.Struct(">i")


class FrameTooLarge(ValueError):
    """A frame announced a size above the limit (or a negative size)."""


class FrameDecoder:
    """Accumulates bytes from a socket and yields whole frames.

    Feed whatever arrived; `next_frame()` returns the next complete frame (without its size
    prefix) or None. Received chunks are kept as they are and joined only once a frame is
    complete, so a large produce request is copied once, not once per chunk. A size above
    `frame_bytes_max` raises FrameTooLarge before any of the body is buffered, so a
    hostile size cannot make us allocate.
    """

    __slots__ = ("_chunks", "_offset", "_size", "_need", "frame_bytes_max")

    def __init__(self, frame_bytes_max: int) -> None:
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # bytes of _chunks[0] already consumed
        self._size = 0  # bytes buffered and not consumed
        self._need = -1  # size of the frame being assembled, once its prefix is read
        self.frame_bytes_max = frame_bytes_max

    def feed(self, data: bytes) -> None:
        if data:
            self._chunks.append(data)
            self._size += len(data)

    @property
    def buffered_bytes(self) -> int:
        return self._size

    @property
    def claimed_bytes(self) -> int:
        """What the frames held here will take: the bytes buffered, or the announced size
        of the frame being assembled when that is more (0 when nothing is held)."""
        return self._need if self._need > self._size else self._size

    def next_frame(self) -> bytes | None:
        chunks = self._chunks
        if self._need < 0 and len(chunks) == 1:
            # The common case, without _take: the size and the whole frame in one chunk.
            first = chunks[0]
            offset = self._offset
            if len(first) - offset >= 4:
                (size,) = _SIZE.unpack_from(first, offset)
                end = offset + 4 + size
                if 0 <= size <= self.frame_bytes_max and end <= len(first):
                    self._size -= 4 + size
                    if end == len(first):
                        chunks.popleft()
                        self._offset = 0
                    else:
                        self._offset = end
                    return first[offset + 4 : end]
        if self._need < 0:
            if self._size < 4:
                return None
            (size,) = _SIZE.unpack(self._take(4))
            if size < 0 or size > self.frame_bytes_max:
                raise FrameTooLarge(
                    f"frame of {size} bytes exceeds the limit of {self.frame_bytes_max}"
                )
            self._need = size
        if self._size < self._need:
            return None
        frame = self._take(self._need)
        self._need = -1
        return frame

    def _take(self, n: int) -> bytes:
        """Remove and return the first n buffered bytes (n <= buffered)."""
        chunks = self._chunks
        if n == 0:
            return b""
        first = chunks[0]
        offset = self._offset
        self._size -= n
        if offset + n <= len(first):
            end = offset + n
            if end == len(first):
                chunks.popleft()
                self._offset = 0
            else:
                self._offset = end
            # A whole chunk comes back without a copy (bytes[0:len] is the same object).
            return first[offset:end]
        parts = [first[offset:]]
        chunks.popleft()
        left = n - (len(first) - offset)
        self._offset = 0
        while left:
            chunk = chunks[0]
            if len(chunk) <= left:
                parts.append(chunk)
                chunks.popleft()
                left -= len(chunk)
            else:
                parts.append(chunk[:left])
                self._offset = left
                left = 0
        return b"".join(parts)


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its size."""
    return _SIZE.pack(len(payload)) + payload

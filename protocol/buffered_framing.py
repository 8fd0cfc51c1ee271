"""Length-prefixed Kafka frames read through a buffered protocol (get_buffer /
buffer_updated), as the TLS layer delivers them: decrypted straight into memory we give.

Why: the TLS layer decrypts each read into a buffer of ours. Copied out as bytes per read
and joined per frame (FrameDecoder), a 1 MiB produce frame cost two copies and five
allocations of its size on the server's one thread, on top of the decryption. Here:

- a read lands in a scratch buffer shared by the connections (`shared`); the frames it
  holds whole are copied out once each (bytes, as the codec wants them);
- a frame the read leaves partial, once its size is known and it is large, is assembled
  in place: a bytes object of its size is made without initialising it, what was read of
  it is copied there, and the next reads decrypt straight into the rest of it (get_buffer
  returns a view of exactly what it still lacks). Complete, that bytes object is the frame:
  no further copy;
- anything else left over (frames that wait for the in-flight limit, a size prefix split
  between reads, a small partial frame) is copied into a FrameDecoder, which this decoder
  then reads from (and feeds the next reads to) until it is empty.

The scratch buffer is shared: `wrote` (buffer_updated) runs right after the decryption into
it, on the event loop, and `keep_rest` moves out what the connection did not take before
any other connection reads.

Writing into a fresh bytes object before anything else sees it is what CPython's own
readers do (PyBytes_FromStringAndSize(NULL, n)); from Python it takes ctypes. Where that is
unavailable (checked once, at import), large frames go through the FrameDecoder as well.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from .framing import FrameDecoder, FrameTooLarge

_SIZE = struct.Struct(">i")

# Frames at least this large that a read leaves partial are assembled in place; smaller
# ones are copied into the FrameDecoder (a copy of a few KiB costs less than the calls).
IN_PLACE_MIN_BYTES = 64 * 1024


Fillable = Callable[[int], tuple[bytes, memoryview]]


def _fillable_bytes_factory() -> Fillable | None:
    """fillable(n) -> (a new bytes object of n >= 2 bytes, not initialised, and a writable
    memoryview of its contents), or None where the interpreter offers no such thing."""
    try:
        import ctypes

        new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
        new_bytes.restype = ctypes.py_object
        new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
        view_of = ctypes.pythonapi.PyMemoryView_FromMemory
        view_of.restype = ctypes.py_object
        view_of.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int)
        data_offset = bytes.__basicsize__ - 1  # PyBytesObject's ob_sval
        pybuf_write = 0x200

        def fillable(n: int) -> tuple[bytes, memoryview]:
            made = new_bytes(None, n)
            return made, view_of(id(made) + data_offset, n, pybuf_write)

        made, view = fillable(8)
        view[:] = b"groupcrd"
        if made != b"groupcrd" or view.format != "B" or view.readonly:
            return None
        return fillable
    except Exception:  # pragma: no cover - another interpreter than CPython
        return None


fillable_bytes = _fillable_bytes_factory()


class BufferedFrameDecoder:
    """FrameDecoder's reading side (next_frame, buffered_bytes, claimed_bytes), fed by
    get_buffer / wrote(n) / keep_rest() instead of feed(data)."""

    __slots__ = (
        "_shared",
        "_start",
        "_end",
        "_need",
        "_frame",
        "_frame_view",
        "_filled",
        "_queued",
        "_frame_bytes_max",
    )

    def __init__(self, frame_bytes_max: int, shared: memoryview) -> None:
        self._shared = shared
        # The last read's bytes not yet taken, in shared[_start:_end] (until keep_rest).
        self._start = 0
        self._end = 0
        self._need = -1  # size of the frame at _start, once its prefix was read there
        # The frame being assembled in place, its writable view, and how much it holds.
        self._frame: bytes | None = None
        self._frame_view: memoryview | None = None
        self._filled = 0
        # Whatever else was left over, and the reads that follow it, until it is empty.
        # It holds something while it claims bytes: buffered ones, or a frame whose size
        # prefix it read already (then it may buffer none).
        self._queued = FrameDecoder(frame_bytes_max)
        self._frame_bytes_max = frame_bytes_max

    @property
    def frame_bytes_max(self) -> int:
        return self._frame_bytes_max

    @frame_bytes_max.setter
    def frame_bytes_max(self, value: int) -> None:
        """A new limit (SASL lowers it until authenticated), for the sizes read from now
        on, whichever way the bytes are held."""
        self._frame_bytes_max = value
        self._queued.frame_bytes_max = value

    def get_buffer(self) -> memoryview:
        """Where the next read goes: the rest of the frame assembled in place, else the
        shared scratch buffer."""
        view = self._frame_view
        if view is not None:
            frame = self._frame
            assert frame is not None
            if self._filled < len(frame):
                return view[self._filled :]
            # Complete but not taken yet (the in-flight limit): it waits in the
            # FrameDecoder (whole, so without a copy) and the read goes on as usual.
            self._queued.feed(_SIZE.pack(len(frame)))
            self._queued.feed(frame)
            self._frame = self._frame_view = None
            self._filled = 0
        return self._shared

    def wrote(self, n: int) -> None:
        """The read wrote n bytes into the last get_buffer()."""
        if self._frame_view is not None:
            self._filled += n
        elif self._queued.claimed_bytes:
            self._queued.feed(self._shared[:n].tobytes())
        else:
            self._start = 0
            self._end = n

    def keep_rest(self, in_place: bool = True) -> None:
        """After the read was handled: move what is left of it out of the shared buffer
        (into a frame assembled in place, or the FrameDecoder). `in_place=False`: not
        into a frame of its announced size (the connection's claim on the server's bytes
        for it was refused, or it is closed): then only the bytes read are kept."""
        start, end = self._start, self._end
        if start == end:
            return
        self._start = self._end = 0
        need = self._need
        self._need = -1
        shared = self._shared
        if in_place and need >= IN_PLACE_MIN_BYTES and fillable_bytes is not None:
            # The read ended inside this frame (next_frame saw it incomplete).
            frame, view = fillable_bytes(need)
            body = end - start - 4
            view[:body] = shared[start + 4 : end]
            self._frame, self._frame_view, self._filled = frame, view, body
            return
        self._queued.feed(shared[start:end].tobytes())  # its size prefix included
        if need >= 0:
            # The rest is one partial frame whose size was read: the FrameDecoder reads it
            # again now, so that it claims the frame's size as this read did.
            partial = self._queued.next_frame()
            assert partial is None

    @property
    def buffered_bytes(self) -> int:
        if self._frame is not None:
            return 4 + self._filled
        return self._queued.buffered_bytes + self._end - self._start

    @property
    def claimed_bytes(self) -> int:
        """What the frames held here will take (as FrameDecoder.claimed_bytes)."""
        if self._frame is not None:
            return len(self._frame)
        if self._queued.claimed_bytes:
            return self._queued.claimed_bytes
        held = self._end - self._start
        if self._need >= 0:
            return max(self._need, held - 4)
        return held

    def next_frame(self) -> bytes | None:
        """The next complete frame (without its size prefix), or None. Raises
        FrameTooLarge for a size above the limit, before any of its body is kept."""
        frame = self._frame
        if frame is not None:
            if self._filled < len(frame):
                return None
            self._frame = self._frame_view = None
            self._filled = 0
            return frame
        if self._queued.claimed_bytes:
            return self._queued.next_frame()
        start, end = self._start, self._end
        if end - start < 4:
            return None
        shared = self._shared
        size = self._need
        if size < 0:
            (size,) = _SIZE.unpack_from(shared, start)
            if size < 0 or size > self._frame_bytes_max:
                raise FrameTooLarge(
                    f"frame of {size} bytes exceeds the limit of {self._frame_bytes_max}"
                )
        stop = start + 4 + size
        if stop > end:
            self._need = size
            return None
        self._need = -1
        self._start = stop
        return shared[start + 4 : stop].tobytes()

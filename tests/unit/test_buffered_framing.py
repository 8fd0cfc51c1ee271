"""BufferedFrameDecoder (protocol/buffered_framing.py): frames read through get_buffer /
wrote / keep_rest, as a TLS connection's reads deliver them. Each test drives it as the TLS
layer and the connection do: a read writes into get_buffer() (never past its end), the
connection takes frames (sometimes fewer than are complete: the in-flight limit), then
keep_rest(); and since the scratch buffer is shared, another connection's read overwrites
it between two reads of ours."""

from __future__ import annotations

import random
import struct

import pytest

from groupcoord.protocol.buffered_framing import (
    IN_PLACE_MIN_BYTES,
    BufferedFrameDecoder,
    fillable_bytes,
)
from groupcoord.protocol.framing import FrameTooLarge, frame

SHARED_BYTES = 256 * 1024
MiB = 1024 * 1024


def _payload(rng: random.Random, size: int, tag: int) -> bytes:
    head = struct.pack(">I", tag)
    return (head + rng.randbytes(size))[:size] if size >= 4 else rng.randbytes(size)


class _Reader:
    """Feeds a byte stream to a decoder as reads of given sizes (each at most what
    get_buffer offers) and collects the frames the connection takes."""

    def __init__(self, decoder: BufferedFrameDecoder, shared: memoryview) -> None:
        self.decoder = decoder
        self.shared = shared
        self.frames: list[bytes] = []
        self.read_sizes: list[tuple[int, int]] = []  # (offered, written)

    def read(
        self,
        data: bytes,
        take_max: int | None = None,
        later: bool = False,
        in_place: bool = True,
    ) -> int:
        """One read of up to len(data) bytes; returns how many were written. `later`: the
        connection handles frames once more before the next read (frames it left waiting
        are handled in a later loop iteration)."""
        buffer = self.decoder.get_buffer()
        n = min(len(buffer), len(data))
        assert n > 0
        buffer[:n] = data[:n]
        self.read_sizes.append((len(buffer), n))
        self.decoder.wrote(n)
        self.take(take_max)
        self.decoder.keep_rest(in_place)
        # Another connection's read lands in the shared buffer before our next one.
        self.shared[:] = b"\xee" * len(self.shared)
        if later:
            self.take()
        return n

    def take(self, take_max: int | None = None) -> None:
        taken = 0
        while self.decoder.buffered_bytes and (take_max is None or taken < take_max):
            got = self.decoder.next_frame()
            if got is None:
                break
            self.frames.append(got)
            taken += 1


def _stream(rng: random.Random, sizes: list[int]) -> tuple[list[bytes], bytes]:
    payloads = [_payload(rng, size, i) for i, size in enumerate(sizes)]
    return payloads, b"".join(frame(p) for p in payloads)


def _new(frame_bytes_max: int = 8 * MiB) -> tuple[BufferedFrameDecoder, memoryview]:
    shared = memoryview(bytearray(SHARED_BYTES))
    return BufferedFrameDecoder(frame_bytes_max, shared), shared


@pytest.mark.parametrize("seed", range(4))
def test_mixed_frames_split_anywhere_come_out_intact_and_in_order(seed: int) -> None:
    rng = random.Random(seed)
    sizes = []
    for _ in range(80):
        kind = rng.random()
        if kind < 0.6:
            sizes.append(rng.randrange(0, 300))  # small requests, some empty
        elif kind < 0.8:
            sizes.append(rng.randrange(300, IN_PLACE_MIN_BYTES + 2))
        else:
            sizes.append(rng.randrange(IN_PLACE_MIN_BYTES, 3 * MiB // 2))  # produce-like
    payloads, stream = _stream(rng, sizes)
    decoder, shared = _new()
    reader = _Reader(decoder, shared)
    pos = 0
    while pos < len(stream):
        # Reads of odd sizes: TLS records are 16 KiB, a read a few of them, sometimes 1-3
        # bytes (a size prefix split between reads); now and then the connection takes
        # fewer frames than are complete (they wait in the decoder).
        want = rng.choice([1, 2, 3, 7, 4096, 16384, 40000, 200000, SHARED_BYTES])
        take_max = rng.choice([None, None, None, 0, 1])
        pos += reader.read(
            stream[pos : pos + want],
            take_max,
            later=rng.random() < 0.3,
            in_place=rng.random() < 0.8,
        )
    reader.take()
    assert len(reader.frames) == len(payloads)
    for got, expected in zip(reader.frames, payloads, strict=True):
        assert type(got) is bytes
        assert got == expected
    assert decoder.buffered_bytes == 0
    # No read was written past what get_buffer offered (_Reader checks each as it goes).
    assert all(0 < n <= offered for offered, n in reader.read_sizes)


def test_a_large_frame_is_decrypted_in_place_into_the_frame_itself() -> None:
    """Once a read leaves a large frame partial, the next reads are offered exactly the
    rest of that frame (no more: the bytes after it go to the shared buffer), and the
    frame comes out as the very object they were written into."""
    assert fillable_bytes is not None  # CPython: the in-place path is the one taken
    rng = random.Random(7)
    large = _payload(rng, 3 * MiB + 5, 1)
    after = _payload(rng, 100, 2)
    stream = frame(large) + frame(after)
    decoder, shared = _new()
    reader = _Reader(decoder, shared)
    first = reader.read(stream[:SHARED_BYTES])
    assert first == SHARED_BYTES and reader.frames == []
    assert decoder.claimed_bytes == len(large)
    pos = first
    offered = []
    while not reader.frames:
        offered.append(len(decoder.get_buffer()))
        pos += reader.read(stream[pos : pos + SHARED_BYTES])
    # In place: each read offered the rest of the frame, whatever the read size.
    left = len(large) - (SHARED_BYTES - 4)
    for size in offered:
        assert size == left
        left -= min(size, SHARED_BYTES)
    assert pos == 4 + len(large)  # nothing of the next frame was read into it
    assert reader.frames == [large]
    reader.read(stream[pos:])
    assert reader.frames == [large, after]


def test_a_frame_not_granted_its_bytes_keeps_only_what_was_read() -> None:
    """keep_rest(in_place=False) (the connection waits for the server's byte budget):
    the partial large frame is not allocated at its announced size; the next read goes to
    the shared buffer as usual, and the frame still comes out intact."""
    rng = random.Random(5)
    large = _payload(rng, 2 * MiB, 1)
    stream = frame(large)
    decoder, shared = _new()
    reader = _Reader(decoder, shared)
    pos = reader.read(stream[:1000], in_place=False)
    assert decoder.claimed_bytes == len(large)
    assert decoder.get_buffer() is shared
    while pos < len(stream):
        pos += reader.read(stream[pos : pos + SHARED_BYTES])
    assert reader.frames == [large]


def test_a_complete_in_place_frame_left_waiting_is_kept_when_reading_goes_on() -> None:
    """The in-flight limit can leave a finished in-place frame untaken while the TLS
    layer still reads: it is kept whole, before what follows."""
    rng = random.Random(3)
    large = _payload(rng, IN_PLACE_MIN_BYTES * 3, 1)
    small = [_payload(rng, 50, i) for i in range(2, 6)]
    stream = frame(large) + b"".join(frame(s) for s in small)
    decoder, shared = _new()
    reader = _Reader(decoder, shared)
    pos = reader.read(stream[:1000])
    while pos < 4 + len(large):
        pos += reader.read(stream[pos : pos + 16384], take_max=0)
    pos += reader.read(stream[pos:], take_max=0)
    assert pos == len(stream) and reader.frames == []
    reader.take()
    assert reader.frames == [large, *small]


def test_a_size_prefix_read_alone_is_not_lost_when_frames_are_handled_again() -> None:
    """A read that ends right after a small frame's size prefix leaves just the prefix; the
    connection's next pass reads it (the body still missing), and the next read must
    continue that frame, not begin a new one."""
    decoder, shared = _new()
    reader = _Reader(decoder, shared)
    first, second = b"a" * 300, b"b" * 40
    stream = frame(first) + frame(second)
    pos = reader.read(stream[:4], later=True)
    while pos < len(stream):
        pos += reader.read(stream[pos : pos + 100], later=True)
    assert reader.frames == [first, second]


def test_a_size_above_the_limit_is_refused_before_its_body() -> None:
    decoder, shared = _new(frame_bytes_max=1000)
    shared[:8] = struct.pack(">i", 1001) + b"abcd"
    decoder.wrote(8)
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()
    decoder2, shared2 = _new(frame_bytes_max=1000)
    shared2[:4] = struct.pack(">i", -1)
    decoder2.wrote(4)
    with pytest.raises(FrameTooLarge):
        decoder2.next_frame()


def test_a_lowered_limit_holds_whichever_way_the_bytes_are_held() -> None:
    """SASL lowers the frame limit until the client is authenticated (sasl_auth.py sets
    decoder.frame_bytes_max): a size above it is refused in the shared buffer and in the
    bytes kept from an earlier read (a size prefix split between reads) alike."""
    for split in (None, 2):
        decoder, shared = _new()
        decoder.frame_bytes_max = 100
        reader = _Reader(decoder, shared)
        stream = frame(b"x" * 50) + frame(b"y" * 101)
        with pytest.raises(FrameTooLarge):
            if split is None:
                reader.read(stream)
            else:  # the second prefix split between two reads: it is read from the kept bytes
                reader.read(stream[: 54 + split])
                reader.read(stream[54 + split :])
        assert reader.frames == [b"x" * 50]

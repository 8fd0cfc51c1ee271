"""CPU per MB of getting frames out of a TLS connection's reads, as main read them and as
the BufferedFrameDecoder does (protocol/buffered_framing.py), side by side in one run:

    python tests/bench/bench_tls_framing.py [--frames 8] [--trials 5]

Both get 1 MB produce-like frames through reads of 256 KiB (uvloop's TLS read size), the
decryption stood in for by a copy into the buffer given, 16 KiB (a TLS record) at a time:

- bytes per read: each read copied out of the shared buffer as bytes, fed to a
  FrameDecoder, which joins a frame's reads into one more bytes object;
- buffered: BufferedFrameDecoder, a large frame "decrypted" in place into the bytes object
  that becomes the frame.

Prints the thread CPU per MB of each per trial and the medians. CPU time, not wall time:
what one core spends, whatever else loads the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from groupcoord.protocol.buffered_framing import BufferedFrameDecoder  # noqa: E402
from groupcoord.protocol.framing import FrameDecoder, frame  # noqa: E402

READ_BYTES = 256 * 1024
RECORD_BYTES = 16 * 1024


def _decrypt(into: memoryview, source: memoryview) -> None:
    for pos in range(0, len(source), RECORD_BYTES):
        into[pos : pos + RECORD_BYTES] = source[pos : pos + RECORD_BYTES]


def bytes_per_read(stream: memoryview, shared: memoryview) -> int:
    decoder = FrameDecoder(8 << 20)
    frames = 0
    for pos in range(0, len(stream), READ_BYTES):
        n = min(READ_BYTES, len(stream) - pos)
        _decrypt(shared[:n], stream[pos : pos + n])
        decoder.feed(shared[:n].tobytes())
        while decoder.buffered_bytes and decoder.next_frame() is not None:
            frames += 1
    return frames


def buffered(stream: memoryview, shared: memoryview) -> int:
    decoder = BufferedFrameDecoder(8 << 20, shared)
    frames = pos = 0
    while pos < len(stream):
        into = decoder.get_buffer()
        n = min(len(into), READ_BYTES, len(stream) - pos)
        _decrypt(into[:n], stream[pos : pos + n])
        pos += n
        decoder.wrote(n)
        while decoder.buffered_bytes and decoder.next_frame() is not None:
            frames += 1
        decoder.keep_rest()
    return frames


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    data = b"".join(frame(os.urandom(1_000_000)) for _ in range(args.frames))
    stream = memoryview(data)
    shared = memoryview(bytearray(READ_BYTES))
    figures: dict[str, list[float]] = {"bytes per read": [], "buffered": []}
    for trial in range(args.trials):
        line = []
        for name, read in (("bytes per read", bytes_per_read), ("buffered", buffered)):
            started = time.thread_time()
            assert read(stream, shared) == args.frames
            ms_mb = (time.thread_time() - started) / (len(data) / 1e6) * 1000
            figures[name].append(ms_mb)
            line.append(f"{name} {ms_mb:.3f} ms/MB")
        print(f"trial {trial + 1}: " + ", ".join(line), flush=True)
    print(
        "median: "
        + ", ".join(f"{name} {statistics.median(v):.3f} ms/MB" for name, v in figures.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

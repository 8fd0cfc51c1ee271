"""The TLS records a producer sends, and what OpenSSL costs to decrypt them.

    python tests/bench/bench_tls_records.py [--messages N]

Why: on TLS the server's extra CPU per MB produced is mostly OpenSSL's, and OpenSSL's
cost goes per record as much as per byte, so the record sizes the client writes decide
it. This measures both, in two steps:

1. **Records per MB**: a groupcoord with an SSL listener (TLS 1.3) and a counting shim
   on its PYTHONPATH (tls_records/sitecustomize.py: each read out of a TLS record,
   counted by size; slower, so nothing here is timed against the server) receives N
   1 KiB messages from one confluent-kafka Producer configured as bench_tls.py's
   (acks=1, linger.ms=5, batch.size 1,000,000). Prints the records per MB and the sizes
   that carry the messages.
2. **OpenSSL's decrypt cost per MB** in this process (memory BIOs, as the event loop's
   TLS layer reads, TLS 1.3 with the default suite): the same MB sent once as 16 KiB
   records (the fewest TLS allows) and once as the record sizes step 1 counted, in
   alternating rounds; medians of CPU ms per MB, and the cost per extra record.

The machine is shared: read the two decrypt figures as a ratio, measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench_tls import VALUE, produce_mb_s  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from peers import free_port, run_groupcoord  # noqa: E402

from tests.tls_certs import make_pki  # noqa: E402

MB = 1 << 20
RECORD_BYTES_MAX = 16 * 1024  # TLS's largest record (plaintext bytes)


def count_records(messages: int, work: Path, ca: Path, cert: Path, key: Path) -> dict[int, int]:
    """{bytes one read returned: how many reads} on a server receiving `messages` 1 KiB
    messages over TLS from bench_tls's producer."""
    plain, secure = free_port(), free_port()
    out = work / "records.json"
    shim = Path(__file__).resolve().parent / "tls_records"
    saved = dict(os.environ)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(shim), saved.get("PYTHONPATH", "")) if p
    )
    os.environ["BENCH_TLS_RECORDS_FILE"] = str(out)
    extra = [
        "--set",
        f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}",
        "--set",
        f"ssl_certificate_file={cert}",
        "--set",
        f"ssl_key_file={key}",
    ]
    try:
        with run_groupcoord(plain, work / "data", extra):
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain}"})
            for future in admin.create_topics([NewTopic("records", 1, 1)]).values():
                future.result(60)
            conf = {
                "bootstrap.servers": f"127.0.0.1:{secure}",
                "log_level": 0,
                "security.protocol": "SSL",
                "ssl.ca.location": str(ca),
            }
            produce_mb_s(conf, "records", messages)
        # The shim writes its counts when the server exits (SIGTERM: a clean stop).
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {int(size): count for size, count in json.loads(out.read_text()).items()}


def _tls_pair(
    cert: Path, key: Path
) -> tuple[ssl.SSLObject, ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    """(server, client, server's incoming BIO, client's outgoing BIO), handshake done."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(10):
        for end in (client, server):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                pass
        if c_out.pending:
            s_in.write(c_out.read())
        if s_out.pending:
            c_in.write(s_out.read())
    return server, client, s_in, c_out


def decrypt_ms_per_mb(
    sizes: list[int], rounds: int, cert: Path, key: Path
) -> tuple[float, float, int, int]:
    """Median CPU ms to decrypt 1 MiB sent as 16 KiB records, and as `sizes` repeated
    (cut to 1 MiB), alternating; with the record count of each."""
    server, client, s_in, c_out = _tls_pair(cert, key)
    data = b"x" * MB
    big = [RECORD_BYTES_MAX] * (MB // RECORD_BYTES_MAX)
    mix: list[int] = []
    while sum(mix) < MB:
        mix.extend(sizes)
    while sum(mix) > MB:
        mix[-1] -= min(mix[-1], sum(mix) - MB)
        if not mix[-1]:
            mix.pop()
    into = memoryview(bytearray(MB))
    times: dict[str, list[float]] = {"big": [], "mix": []}
    for r in range(rounds * 2):
        kind = ("big", "mix")[(r + r // 2) % 2]
        pos = 0
        for size in big if kind == "big" else mix:
            client.write(data[pos : pos + size])
            pos += size
        wire = c_out.read()
        started = time.process_time()
        s_in.write(wire)
        got = 0
        while got < MB:
            got += server.read(MB - got, into[got:])
        times[kind].append(time.process_time() - started)
    return (
        statistics.median(times["big"]) * 1000,
        statistics.median(times["mix"]) * 1000,
        len(big),
        len(mix),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-tls-records-"))
    try:
        return _run(args.messages, args.rounds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the server's log: ~1 MiB per 1,000 messages


def _run(messages: int, rounds: int, work: Path) -> int:
    pki = make_pki(work / "pki")
    cert, key = pki.issue("server", "/CN=localhost", server=True)
    counts = count_records(messages, work, pki.ca, cert, key)
    reads = sum(counts.values())
    data_bytes = sum(size * n for size, n in counts.items())
    mb = data_bytes / MB
    print(
        f"records per MiB the server decrypted: {reads / mb:.0f} "
        f"(16 KiB records: {MB / RECORD_BYTES_MAX:.0f}); {reads} reads, {mb:.1f} MiB, "
        f"{messages * len(VALUE) / MB:.1f} MiB of values sent"
    )
    by_kib: dict[str, list[int]] = {}
    for size, n in counts.items():
        band = (
            "16 KiB"
            if size == RECORD_BYTES_MAX
            else "< 1 KiB"
            if size < 1024
            else "1-2 KiB"
            if size < 2048
            else "other"
        )
        entry = by_kib.setdefault(band, [0, 0])
        entry[0] += n
        entry[1] += size * n
    for band, (n, total) in sorted(by_kib.items(), key=lambda item: -item[1][1]):
        print(f"  {band:>8}: {n / mb:6.0f} records per MiB, {total / data_bytes:4.0%} of the bytes")
    # One MiB's worth of the counted sizes, in proportion (fractions carried over from one
    # size to the next), shuffled so that the cut at 1 MiB takes a fair sample.
    sizes: list[int] = []
    carried = 0.0
    for size, n in sorted(counts.items()):
        carried += n / mb
        whole = int(carried)
        carried -= whole
        sizes.extend([size] * whole)
    random.Random(0).shuffle(sizes)
    big_ms, mix_ms, big_n, mix_n = decrypt_ms_per_mb(sizes, rounds, cert, key)
    per_record_us = (mix_ms - big_ms) / max(mix_n - big_n, 1) * 1000
    print(
        f"OpenSSL decrypt, CPU ms per MiB: 16 KiB records ({big_n}) {big_ms:.2f}, the "
        f"producer's sizes ({mix_n}) {mix_ms:.2f} (x{mix_ms / big_ms:.2f}; "
        f"{per_record_us:.2f} us per extra record); {ssl.OPENSSL_VERSION}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

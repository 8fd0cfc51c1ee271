"""Benchmarks only: put on a server's PYTHONPATH (bench_tls_records.py), it counts the TLS
records the server's TLS connections decrypt, by size, and writes the counts as JSON to
the file named by BENCH_TLS_RECORDS_FILE when the process exits. The count costs a Python
call per record: never on a server whose speed is being measured."""

import atexit
import json
import os
import ssl
from collections import Counter

_sizes: Counter[int] = Counter()  # bytes one read returned -> how many reads did


class _CountingObject(ssl.SSLObject):
    def read(self, len: int = 1024, buffer: object = None) -> object:  # noqa: A002
        got = super().read(len, buffer)  # type: ignore[arg-type]
        if buffer is not None:
            # One read returns at most one record's data (less only at the end of the
            # buffer it was given, once per frame).
            _sizes[got] += 1  # type: ignore[index]
        return got


def _dump() -> None:
    path = os.environ.get("BENCH_TLS_RECORDS_FILE")
    if path:
        with open(path, "w") as f:
            json.dump({str(size): count for size, count in _sizes.items()}, f)


ssl.SSLContext.sslobject_class = _CountingObject
atexit.register(_dump)

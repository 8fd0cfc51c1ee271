"""A scan of a log's batch headers that also hands over each control batch whole: what the
data plane's producer state is rebuilt from at start-up (coordinator/topics/producers.py
needs the marker's record, COMMIT or ABORT, and nothing else of any body).

Reading headers only, as PartitionLog.batch_headers does, plus one pread of each control
batch (a marker is ~80 bytes): a log of 50,000 transactions rebuilds in a fraction of the
time one PartitionLog.read per marker took (locating the batch again through the index and
verifying it as a fetch would). A control batch failing its CRC is handed over as None:
the caller must not trust it (it is damage the next read reports).
"""

from __future__ import annotations

from collections.abc import Iterator

from groupcoord.protocol.batches import BatchHeader, InvalidBatch, crc_ok

from .log import PartitionLog


def headers_and_controls(log: PartitionLog) -> Iterator[tuple[BatchHeader, bytes | None]]:
    """(header, the whole batch if it is a control batch with a valid CRC, else None) of
    each stored batch from the log start to the current end."""
    start = log.log_start_offset
    _, _, closed, active, _ = log.segments_snapshot()
    for segment in (*closed, active):
        try:
            for position, header in segment.iter_headers(0):
                if header.last_offset < start:
                    continue
                batch = None
                if header.is_control:
                    data = segment.pread(position, header.size_bytes)
                    if crc_ok(data, 0, header):
                        batch = data
                yield header, batch
        except InvalidBatch:
            pass  # the rest of a damaged segment: reads of it raise CorruptBatch

"""The ACLs, durable: a log (storage/log.py's PartitionLog, the storage every coordinator
state log uses) of one record per ACL change, replayed into the StandardAuthorizer at start.

Theory of operation. As Kafka's metadata log holds AccessControlEntryRecord and
RemoveAccessControlEntryRecord, each CreateAcls or DeleteAcls request appends one record
batch: key = the ACL (`encode_acl`), value = the same bytes for a creation, none (a
tombstone) for a deletion. The batch is fsynced before the change reaches the authorizer
and before the request is answered, so an acknowledged change survives a crash and a
refused one was never applied; a change costs one small append whatever the number of ACLs.
Changes are serialized (one append and fsync at a time, in request order).

Recovery is the log's (a torn tail after a crash is cut, damage is removed and reported
by the server with the log's directory: recovery_report.py); a record that decodes to no
ACL is refused with DataDirError naming the directory and offset, never skipped.

Compaction. Creations and deletions would grow the log forever, so once it holds at least
twice what it held after the last compaction plus COMPACT_SLACK_BYTES, the change that
got it there (still under the lock, after it is applied) rolls the active segment and
compacts the log with the storage's cleaner (storage/cleaner.py, as the coordinator's
shard logs are compacted): each ACL's latest record stays, a deletion goes together with
the creations it deleted (no tombstone retention: nothing else replays this log). What
stays are the live ACLs' creations, at their offsets, so a replay adds them in the order
the authorizer holds them. The cleaner's output is fsynced before a marker file commits
the swap, and PartitionLog.open completes or undoes a swap a crash interrupted
(compaction_swap.py): after a SIGKILL at any point the log replays to the same ACLs.
A compaction that fails leaves the change made (it is durable already); a failed swap
fails the log until the server restarts, as for every log.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog

from groupcoord.protocol.batches import DefaultRecordBatch, DefaultRecordBatchBuilder, parse_header
from groupcoord.storage import (
    CorruptBatch,
    DataDirError,
    LogConfig,
    PartitionLog,
    install_compaction,
    prepare_compaction,
)

from .acl_binding import AclBinding
from .acl_model import AclOperation, AclPermissionType, PatternType, ResourceType
from .standard_authorizer import StandardAuthorizer

log = structlog.get_logger("groupcoord.acls")

# A bound on what clients can make us store (Kafka has none; its metadata log is the bound).
ACLS_MAX = 1_000_000
_READ_CHUNK_BYTES = 1 << 20
# ACLs are never deleted by age or size: no retention, segments rolled at 64 MiB.
_LOG_CONFIG = LogConfig(
    segment_bytes_max=64 * 1024 * 1024, retention_ms=-1, retention_bytes=-1, segment_ms=1 << 62
)
# Compact once the log holds this much more than twice its size after the last compaction
# (about 500 one-ACL changes over a small live set): the work of a compaction (reading and
# rewriting the log, a few fsyncs) stays proportional to the changes that called for it.
COMPACT_SLACK_BYTES = 64 * 1024


def encode_acl(acl: AclBinding) -> bytes:
    return json.dumps(
        [
            int(acl.resource_type),
            acl.resource_name,
            int(acl.pattern_type),
            acl.principal,
            acl.host,
            int(acl.operation),
            int(acl.permission_type),
        ],
        separators=(",", ":"),
    ).encode()


def decode_acl(data: bytes) -> AclBinding:
    """Raises ValueError (or TypeError) when `data` is not an encoded ACL."""
    rtype, name, pattern, principal, host, op, perm = json.loads(data)
    if not (isinstance(name, str) and isinstance(principal, str) and isinstance(host, str)):
        raise ValueError("malformed ACL record")
    return AclBinding(
        ResourceType(rtype),
        name,
        PatternType(pattern),
        principal,
        host,
        AclOperation(op),
        AclPermissionType(perm),
    )


class AclStore:
    """The authorizer's ACLs and their log in `directory`. `open` before use; `change`
    from the event loop."""

    def __init__(self, directory: Path, authorizer: StandardAuthorizer) -> None:
        self.directory = directory
        self.authorizer = authorizer
        self.log: PartitionLog | None = None
        self._lock = asyncio.Lock()
        # The log's size after the last compaction (0 until one: a log grown before
        # compaction existed is compacted at the first change past the slack).
        self._compacted_bytes = 0
        self.compactions = 0

    def open(self, salvage: bool, report_damage: Callable[..., None] | None = None) -> PartitionLog:
        """Open the log (recovering it; `salvage` as PartitionLog.open) and replay it into
        the authorizer. `report_damage`: how damage removed from the log is reported
        (observability/storage_damage.py's report_damage_removed with the server's metrics,
        passed in: security/ does not import observability/); without it, damage met while
        replaying raises CorruptBatch. Raises DataDirError naming the directory for a record
        that is no ACL, OSError when the log cannot be read."""
        log_ = PartitionLog.open(self.directory, _LOG_CONFIG, salvage=salvage)
        self.log = log_
        offset = log_.log_start_offset
        while offset < log_.next_offset:
            try:
                chunk = log_.read(offset, _READ_CHUNK_BYTES)
            except CorruptBatch as exc:
                # Damage in a segment trusted at open: removed and reported as every log's.
                if report_damage is None:
                    raise
                removed, dropped = log_.salvage_damaged(exc.path)
                if not removed:
                    raise
                report_damage(
                    self.directory.name,
                    exc.path,
                    dropped,
                    removed,
                    reason=exc.reason,
                )
                continue
            if not chunk:
                break
            offset = self._replay(chunk, offset)
        return log_

    def _replay(self, chunk: bytes, offset: int) -> int:
        pos = 0
        authorizer = self.authorizer
        while pos < len(chunk):
            header = parse_header(chunk, pos)
            end = pos + header.size_bytes
            if end > len(chunk):
                break
            for record in DefaultRecordBatch(memoryview(chunk)[pos:end]):
                if record.offset < offset or record.key is None:
                    continue
                try:
                    acl = decode_acl(bytes(record.key))
                except (ValueError, TypeError) as e:
                    raise DataDirError(
                        f"ACL log {self.directory}: the record at offset {record.offset} is no "
                        f"ACL ({e}); restore the directory from a backup or repair it"
                    ) from None
                if record.value is None:
                    authorizer.remove(acl)
                else:
                    authorizer.add(acl)
            offset = header.last_offset + 1
            pos = end
        return offset

    async def change(self, added: Sequence[AclBinding], removed: Sequence[AclBinding]) -> None:
        """Persist (append and fsync) then apply: `added` ACLs not yet present, `removed`
        ones present. Raises OSError / StorageError when the log cannot be written (nothing
        is applied then), ValueError past ACLS_MAX."""
        async with self._lock:
            authorizer = self.authorizer
            added = [a for a in dict.fromkeys(added) if a not in authorizer]
            removed = [a for a in dict.fromkeys(removed) if a in authorizer]
            if not added and not removed:
                return
            if len(authorizer) + len(added) - len(removed) > ACLS_MAX:
                raise ValueError(f"at most {ACLS_MAX} ACLs can be stored")
            log_ = self.log
            assert log_ is not None
            builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
            timestamp_ms = int(time.time() * 1000)
            delta = 0
            for acl in removed:
                builder.append(delta, timestamp_ms, encode_acl(acl), None, [])
                delta += 1
            for acl in added:
                key = encode_acl(acl)
                builder.append(delta, timestamp_ms, key, key, [])
                delta += 1
            data: bytearray = builder.build()
            log_.append(data, [parse_header(data)])
            await asyncio.to_thread(log_.flush)
            for acl in removed:
                authorizer.remove(acl)
            for acl in added:
                authorizer.add(acl)
            if log_.size_bytes >= 2 * self._compacted_bytes + COMPACT_SLACK_BYTES:
                try:
                    await self._compact(log_)
                except Exception as e:  # the change is made and durable: answer it
                    # Tried again once the log has grown as much again, not at every change.
                    self._compacted_bytes = log_.size_bytes
                    log.warning(
                        "ACL log compaction failed", directory=str(self.directory), error=repr(e)
                    )

    async def _compact(self, log_: PartitionLog) -> None:
        """Roll the active segment and compact the log (see the module docstring); under
        the lock, so no change is appended meanwhile and everything in the log is durable.
        The reading and rewriting runs in a worker thread, the swap here."""
        _, _, _, _, active_bytes = log_.segments_snapshot()
        if active_bytes:
            log_.roll()
        now_ms = int(time.time() * 1000) + 1  # every deletion so far is older than this
        plan = await asyncio.to_thread(prepare_compaction, log_, now_ms, 0)
        install_compaction(log_, plan)
        # The swap's last step (its marker removed) and the roll become durable now, not
        # with the next change.
        await asyncio.to_thread(log_.flush)
        self._compacted_bytes = log_.size_bytes
        self.compactions += 1
        log.info(
            "ACL log compacted",
            acls=len(self.authorizer),
            log_bytes=log_.size_bytes,
            segments=log_.segment_count,
        )

    def close(self) -> None:
        if self.log is not None:
            self.log.close()

"""Coordinator records: byte-for-byte Kafka ``__consumer_offsets`` keys and values.

Theory of operation. A record key is an int16 *record type* (the schema's ``apiKey``) followed
by the key struct at version 0; a value is an int16 *value version* followed by the value struct
at that version; a null value is a tombstone. Versions listed in a schema's
``flexibleVersions`` use compact strings/bytes/arrays (unsigned varint length + 1, 0 = null)
and end every struct with a tagged-field section (uvarint count, then uvarint tag, uvarint
size, data, in tag order); the others use int16-length strings and int32-length bytes and
arrays (-1 = null). A nullable struct carries an int8 marker (-1 null, 1 present), or, as a
tagged field, a uvarint marker (Kafka's generator, KIP-893).

This module is the codec's public face: it dispatches each record type to one of two codecs
and re-exports the record types (record_types.py) and the fast paths' helpers that loaders
use.

* A generic one (record_schema.py), compiled at import from the JSON schemas in ``schemas/``
  (copies of Kafka's, see its NOTICE.md) into one reader/writer closure pair per (record
  type, version). Fields map to frozen dataclass attributes by snake_case name; the mapping
  is checked at import, so a dataclass that drifts from its schema fails loudly.
* Hand-written fast paths (record_fast.py), using precompiled ``struct.Struct`` objects, for
  what a load replays by the million: OffsetCommit keys (types 0 and 1) and values (v0-v4),
  and GroupMetadata keys and values (v0-v4). The unit tests check them byte for byte against
  the generic codec at every version.

Both read and write their fields through record_fields.py, and varints through varint.py.

Two more things make replay fast. Frozen dataclasses are built through a slotted twin class
(``fast_new``): a frozen ``__init__`` pays for ``object.__setattr__`` per field (about 3.5x a
plain one). And decoded keys are memoised on their bytes (bounded), since an uncompacted log
commits the same (group, topic, partition) over and over; keys are immutable, so sharing them
is safe.

Compatibility notes: type 0 (LegacyOffsetCommit) keys decode to ``OffsetCommitKey``; type 0
values decode with the OffsetCommitValue reader (LegacyOffsetCommitValue v0 has the same
layout as OffsetCommitValue v0, and accepting every OffsetCommitValue version there is a
superset of what Kafka reads). As in Kafka, writing a value at a version that lacks an
``ignorable`` field drops that field. Unknown tagged fields are skipped (not preserved).
Unlike Kafka's readers, trailing bytes after a struct are an error (``MalformedRecord``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from .record_fast import (
    OffsetCommitFields,
    decode_group_metadata_key,
    decode_group_metadata_value,
    decode_offset_commit_key,
    decode_offset_commit_value,
    encode_group_member_key,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    new_offset_commit_key,
    new_offset_commit_value,
    offset_commit_key_fields,
    offset_commit_value_fields,
)
from .record_schema import (
    GENERIC_KEYS,
    GENERIC_VALUES,
    SCHEMAS,
    generic_decode_key,
    generic_decode_value,
    generic_encode_key,
    generic_encode_value,
)
from .record_types import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    Key,
    MalformedRecord,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    PartitionMetadata,
    RecordError,
    RecordType,
    TopicMetadata,
    TopicPartitions,
    TopicPartitionsWithEpochs,
    UnknownRecordType,
    UnsupportedRecordVersion,
    Value,
)

__all__ = [
    "new_offset_commit_key",
    "new_offset_commit_value",
    "ClassicMemberMetadata",
    "ClassicProtocol",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "Key",
    "MalformedRecord",
    "MemberMetadata",
    "OffsetCommitFields",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "PartitionMetadata",
    "RecordError",
    "RecordType",
    "TopicMetadata",
    "TopicPartitions",
    "TopicPartitionsWithEpochs",
    "UnknownRecordType",
    "UnsupportedRecordVersion",
    "Value",
    "decode_key",
    "decode_record",
    "decode_value",
    "default_value_version",
    "encode_key",
    "encode_value",
    "offset_commit_key_fields",
    "offset_commit_value_fields",
]


def _generic_key_decoder(data: bytes) -> Key:
    return generic_decode_key(data)


def _generic_value_decoder(record_type: int) -> Callable[[bytes], Value]:
    def decode(data: bytes) -> Value:
        return generic_decode_value(record_type, data)

    return decode


_KEY_DECODERS: Final[dict[int, Callable[[bytes], Key]]] = {
    t: _generic_key_decoder for t in GENERIC_KEYS
}
_KEY_DECODERS[int(RecordType.LEGACY_OFFSET_COMMIT)] = decode_offset_commit_key
_KEY_DECODERS[int(RecordType.OFFSET_COMMIT)] = decode_offset_commit_key
_KEY_DECODERS[int(RecordType.GROUP_METADATA)] = decode_group_metadata_key

_VALUE_DECODERS: Final[dict[int, Callable[[bytes], Value]]] = {
    t: _generic_value_decoder(t) for t in GENERIC_VALUES
}
_VALUE_DECODERS[int(RecordType.LEGACY_OFFSET_COMMIT)] = decode_offset_commit_value
_VALUE_DECODERS[int(RecordType.OFFSET_COMMIT)] = decode_offset_commit_value
_VALUE_DECODERS[int(RecordType.GROUP_METADATA)] = decode_group_metadata_value

_KEY_ENCODERS: Final[dict[type, Callable[[Any], bytes]]] = {
    cls: generic_encode_key
    for classes in SCHEMAS.values()
    for cls in classes.values()
    if cls.__name__.endswith("Key")
}
_KEY_ENCODERS[OffsetCommitKey] = encode_offset_commit_key
_KEY_ENCODERS[GroupMetadataKey] = encode_group_metadata_key
for _member_key in (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
):
    _KEY_ENCODERS[_member_key] = encode_group_member_key

_VALUE_ENCODERS: Final[dict[type, Callable[[Any, int], bytes]]] = {
    cls: generic_encode_value
    for name, classes in SCHEMAS.items()
    if name.endswith("Value") and not name.startswith("Legacy")
    for cls in classes.values()
    if cls.__name__ == name
}
_VALUE_ENCODERS[OffsetCommitValue] = encode_offset_commit_value
_VALUE_ENCODERS[GroupMetadataValue] = encode_group_metadata_value

# Decoded keys by their bytes. A log that is not yet compacted commits the same few keys over
# and over: a hit costs a dict lookup instead of a decode. A compacted one holds each key about
# once, and memoising those only keeps objects alive for the GC to walk (it slowed a run of
# distinct keys by a third), so when a filled memo served fewer hits than it stored keys,
# memoising pauses for _KEY_MEMO_PAUSE decodes before trying again.
_key_memo: dict[bytes, Key] = {}
_KEY_MEMO_SIZE = 16384
_KEY_MEMO_PAUSE = 16 * _KEY_MEMO_SIZE
_key_memo_hits = 0
_key_memo_paused = 0


def _key_memo_reset() -> None:
    global _key_memo_hits, _key_memo_paused
    _key_memo.clear()
    _key_memo_hits = _key_memo_paused = 0


def _key_memo_miss(data: bytes) -> Key:
    global _key_memo_hits, _key_memo_paused
    key = _decode_key_uncached(data)
    if _key_memo_paused:
        _key_memo_paused -= 1
        return key
    if len(_key_memo) >= _KEY_MEMO_SIZE:
        if _key_memo_hits < _KEY_MEMO_SIZE:
            _key_memo_paused = _KEY_MEMO_PAUSE
        _key_memo.clear()
        _key_memo_hits = 0
        if _key_memo_paused:
            return key
    _key_memo[data] = key
    return key


def _decode_key_uncached(data: bytes) -> Key:
    if len(data) < 2:
        raise MalformedRecord("coordinator key shorter than its record type")
    record_type = data[0] << 8 | data[1]
    decode = _KEY_DECODERS.get(record_type)
    if decode is None:
        raise UnknownRecordType(record_type - 0x10000 if record_type & 0x8000 else record_type)
    return decode(data)


def decode_key(data: bytes) -> Key:
    """Decode key bytes. Legacy type 0 keys decode to ``OffsetCommitKey``.

    Raises ``UnknownRecordType`` (skip the record) or ``MalformedRecord``.
    """
    global _key_memo_hits
    key = _key_memo.get(data)
    if key is None:
        return _key_memo_miss(data)
    _key_memo_hits += 1
    return key


def decode_value(record_type: int, data: bytes | None) -> Value | None:
    """Decode the value of a record of ``record_type``; None (a tombstone) stays None.

    Raises ``UnknownRecordType``, ``UnsupportedRecordVersion`` or ``MalformedRecord``.
    """
    decode = _VALUE_DECODERS.get(record_type)
    if decode is None:
        raise UnknownRecordType(record_type)
    if data is None:
        return None
    return decode(data)


def decode_record(key: bytes, value: bytes | None) -> tuple[Key, Value | None]:
    """``decode_key`` and ``decode_value`` in one call, for loading a log."""
    global _key_memo_hits
    k = _key_memo.get(key)
    if k is None:
        k = _key_memo_miss(key)
    else:
        _key_memo_hits += 1
    if value is None:
        return k, None
    return k, _VALUE_DECODERS[k.RECORD_TYPE.value](value)


def encode_key(key: Key) -> bytes:
    """Record type (int16) + key struct at version 0. Offset commit keys are written as type 1."""
    encode = _KEY_ENCODERS.get(type(key))
    if encode is None:
        raise TypeError(f"not a coordinator record key: {type(key).__name__}")
    try:
        return encode(key)
    except struct.error as e:
        raise ValueError(f"{type(key).__name__}: {e}") from e


def default_value_version(value: Value) -> int:
    """The version Kafka trunk writes: OffsetCommitValue v4, or v1 when it has an expire
    timestamp (v1 alone carries one); GroupMetadataValue v3; the others their latest."""
    if isinstance(value, OffsetCommitValue):
        return 1 if value.expire_timestamp != -1 else 4
    if isinstance(value, GroupMetadataValue):
        return 3
    return max(GENERIC_VALUES[value.RECORD_TYPE])


def encode_value(value: Value, version: int | None = None) -> bytes:
    """Value version (int16) + value struct, at ``version`` or ``default_value_version``.

    Fields the version lacks are dropped if the schema marks them ignorable (as Kafka does);
    otherwise a non-default value there raises ValueError.
    """
    encode = _VALUE_ENCODERS.get(type(value))
    if encode is None:
        raise TypeError(f"not a coordinator record value: {type(value).__name__}")
    if version is None:
        if type(value) is OffsetCommitValue:  # default_value_version, inlined: every commit
            version = 1 if value.expire_timestamp != -1 else 4
        else:
            version = default_value_version(value)
    try:
        return encode(value, version)
    except struct.error as e:
        raise ValueError(f"{type(value).__name__}: {e}") from e

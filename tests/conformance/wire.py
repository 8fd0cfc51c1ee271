"""Requests from plain values, responses to plain values, with the project's codec (kio).

`make(cls, fields)` builds a request entity from keyword values where nested entities are
dicts (or sequences of dicts) and durations are integers in milliseconds, so a sequence reads
like the request it sends. `plain(entity)` turns a decoded response into dicts, lists, ints and
strings (error codes by name, durations in ms), which is what the comparison walks.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import struct
import sys
import types
import typing
import uuid
from functools import cache
from typing import Any

from aiokafka.record.util import calc_crc32c
from kio.serial import entity_reader

from groupcoord.protocol.api import build, response_schema


@cache
def _hints(cls: type[Any]) -> dict[str, Any]:
    return {
        f.name: typing.get_type_hints(cls)[f.name]
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
    }


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    tp = _strip_optional(tp)
    if typing.get_origin(tp) is tuple:
        (item_tp, *_) = typing.get_args(tp)
        return tuple(_convert(item_tp, v) for v in value)
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return make(tp, **value)  # type: ignore[arg-type]
    if isinstance(tp, type) and issubclass(tp, datetime.timedelta) and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if tp is uuid.UUID and isinstance(value, str):
        return uuid.UUID(value)
    return value


def make(cls: type[Any], **fields: Any) -> Any:
    """An entity of `cls`: nested dicts become entities, ints become timedeltas (ms); fields
    this version lacks are dropped and required ones not given are zero-filled (api.build)."""
    hints = _hints(cls)
    converted = {k: _convert(hints[k], v) for k, v in fields.items() if k in hints}
    return build(cls, **converted)


def plain(value: Any) -> Any:
    """A decoded entity as dicts/lists/scalars: error codes by name, durations in ms, record
    sets as their batches (header fields by name, records as hex)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            out[f.name] = batches(v) if f.name == "records" and isinstance(v, bytes) else plain(v)
        return out
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


# Record batch v2 header after base offset and length: leader epoch, magic, crc, attributes,
# last offset delta, first and max timestamps, producer id, epoch, base sequence, count.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_BATCH_FIELDS = (
    "base_offset",
    "batch_length",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "records_count",
)


def batches(data: bytes) -> list[dict[str, Any]]:
    """A record set as a list of batches, so a comparison names the header field that
    differs; a trailing partial batch (as a fetch may return) stays hex."""
    out: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            out.append({"partial": data[pos:].hex()})
            break
        length = struct.unpack_from(">i", data, pos + 8)[0]
        end = pos + 12 + length
        if end > len(data) or length < _BATCH_HEADER.size - 12:
            out.append({"partial": data[pos:].hex()})
            break
        header = dict(zip(_BATCH_FIELDS, _BATCH_HEADER.unpack_from(data, pos), strict=True))
        header["crc_valid"] = calc_crc32c(data[pos + 21 : end]) == header["crc"]
        header["records"] = data[pos + _BATCH_HEADER.size : end].hex()
        out.append(header)
        pos = end
    return out


def decode_response(api_key: int, version: int, frame: bytes, pos: int) -> Any:
    """A response body with the project's codec, except DescribeTransactions: kio cannot read
    its start time -1 (a transaction not started: Kafka's answer for Empty), so that one
    response is read here, the start time -1 becoming the datetime 1 ms before the epoch
    (what the server side writes as -1)."""
    if api_key == DESCRIBE_TRANSACTIONS:
        return _describe_transactions(version, frame, pos)
    value, _ = entity_reader(response_schema(api_key, version))(frame, pos)
    return value


DESCRIBE_TRANSACTIONS = 65


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def fixed(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def varint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def string(self) -> str:
        length = self.varint() - 1
        text = self.data[self.pos : self.pos + length].decode()
        self.pos += length
        return text

    def array(self, item: Any) -> tuple[Any, ...]:
        return tuple(item() for _ in range(self.varint() - 1))

    def tags(self) -> None:
        for _ in range(self.varint()):
            self.varint()
            self.pos += self.varint()


def _describe_transactions(version: int, frame: bytes, pos: int) -> Any:
    from groupcoord.protocol.errors import ErrorCode

    m = sys.modules[response_schema(DESCRIBE_TRANSACTIONS, version).__module__]
    r = _Reader(frame, pos)

    def topic() -> Any:
        name = r.string()
        partitions = r.array(lambda: r.fixed(">i"))
        r.tags()
        return m.TopicData(topic=name, partitions=partitions)

    def state() -> Any:
        error = ErrorCode(r.fixed(">h"))
        txn_id, txn_state = r.string(), r.string()
        timeout_ms, start_ms = r.fixed(">i"), r.fixed(">q")
        producer_id, epoch = r.fixed(">q"), r.fixed(">h")
        topics = r.array(topic)
        r.tags()
        return m.TransactionState(
            error_code=error,
            transactional_id=txn_id,
            transaction_state=txn_state,
            transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
            transaction_start_time=datetime.datetime.fromtimestamp(start_ms / 1000, datetime.UTC),
            producer_id=producer_id,
            producer_epoch=epoch,
            topics=topics,
        )

    throttle_ms = r.fixed(">i")
    states = r.array(state)
    r.tags()
    return m.DescribeTransactionsResponse(
        throttle_time=datetime.timedelta(milliseconds=throttle_ms), transaction_states=states
    )

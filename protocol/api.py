"""API keys, the versions this server serves, and request/response (de)serialisation.

Only this module (and `protocol/records.py` later) touches `kio`, so the pinned codec can be
swapped without touching the server.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import sys
import types
import typing
import uuid
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.serial import entity_reader

from .encoder import FRAME_ENCODERS
from .errors import ErrorCode
from .frozen import fast_new
from .guard import MalformedBody, check_body
from .header import MalformedHeader, RequestHeader, parse_header, peek_fixed

ZERO_UUID = uuid.UUID(int=0)
# Kafka sends INT32_MIN for "authorized operations not requested"; -1 breaks kafka-python.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75


class RequestError(Exception):
    """A request that cannot be decoded. `correlation_id` is set when the header was readable."""

    def __init__(self, message: str, correlation_id: int | None = None) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id


class UnknownApi(RequestError):
    """An API key or version the codec does not know at all: the connection is closed."""


class UnsupportedVersion(RequestError):
    """A version the codec knows but this server does not serve: answered with error 35."""

    def __init__(self, header: RequestHeader, body: Any | None) -> None:
        super().__init__(
            f"api {header.api_key} v{header.api_version} is not supported", header.correlation_id
        )
        self.header = header
        self.body = body


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version


new_request = fast_new(Request)  # one per request: see protocol/frozen.py


@cache
def request_schema(api_key: int, version: int) -> type[Any] | None:
    try:
        return load_request_schema(api_key, version)
    except (KioIndexError, ImportError):
        return None


@cache
def response_schema(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


_READERS: dict[type[Any], Any] = {}


def _reader(cls: type[Any]) -> Any:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def is_flexible(api_key: int, version: int) -> bool:
    cls = request_schema(api_key, version)
    return bool(cls is not None and cls.__flexible__)


def decode_request(frame: bytes, supported: dict[int, tuple[int, int]]) -> Request:
    """Decode one frame. Raises UnknownApi, UnsupportedVersion or RequestError."""
    try:
        api_key, version, correlation_id = peek_fixed(frame)
    except MalformedHeader as e:
        raise RequestError(str(e)) from None
    cls = request_schema(api_key, version)
    if cls is None:
        if api_key == ApiKey.API_VERSIONS:
            # KIP-511: a newer ApiVersions than we know gets our version list at v0, if its
            # header (v1, which every version can be read as) is whole.
            try:
                header, _ = parse_header(frame, flexible=False)
            except MalformedHeader as e:
                raise RequestError(str(e), correlation_id) from None
            raise UnsupportedVersion(header, None)
        raise UnknownApi(f"unknown api key {api_key} version {version}", correlation_id)
    try:
        header, pos = parse_header(frame, flexible=cls.__header_schema__.__version__ >= 2)
        check_body(cls, frame, pos)
        body, _size = _reader(cls)(frame, pos)
    except (MalformedHeader, MalformedBody) as e:
        raise RequestError(str(e), correlation_id) from None
    except Exception as e:  # the native reader raises assorted errors on garbage
        raise RequestError(f"malformed {cls.__name__}: {e}", correlation_id) from None
    span = supported.get(api_key)
    if span is None or not span[0] <= version <= span[1]:
        raise UnsupportedVersion(header, body)
    return new_request(header, body)


_API_VERSIONS = int(ApiKey.API_VERSIONS)  # an enum member lookup costs ~70 ns per call


class Encoded:
    """A response whose body is already encoded (what follows the response header): a
    handler that answers the same thing over and over (a steady heartbeat) keeps one and
    skips building and encoding it each time. `error_code` is for the metrics."""

    __slots__ = ("body", "flexible_header", "error_code")

    def __init__(self, response: Any, api_key: int, version: int) -> None:
        """Encodes `response` once, with the codec, so the bytes are exactly its."""
        self.flexible_header = bool(type(response).__flexible__) and api_key != _API_VERSIONS
        frame = encode_response(api_key, version, 0, response)
        self.body: bytes = frame[4 + 4 + (1 if self.flexible_header else 0) :]
        self.error_code = getattr(response, "error_code", 0)


_CORRELATION = struct.Struct(">ii")


def encode_response(api_key: int, version: int, correlation_id: int, response: Any) -> bytes:
    """Frame a response: size, header (v0, or v1 for flexible versions but ApiVersions), body.

    Encoded by code compiled per class (`protocol.encoder`), byte-identical to kio's writer.
    """
    cls = type(response)
    if cls is Encoded:
        body: bytes = response.body
        if response.flexible_header:  # header v1: correlation id, no tagged fields
            return _CORRELATION.pack(len(body) + 5, correlation_id) + b"\x00" + body
        return _CORRELATION.pack(len(body) + 4, correlation_id) + body
    flexible = 1 if cls.__flexible__ and api_key != _API_VERSIONS else 0
    return FRAME_ENCODERS[flexible][cls](response, correlation_id)


@cache
def response_types(api_key: int, version: int) -> types.ModuleType:
    """The module holding a response's nested entity classes (e.g. PartitionData)."""
    return sys.modules[response_schema(api_key, version).__module__]


def request_types(api_key: int, version: int) -> types.ModuleType:
    """The module holding a request's class and its nested entity classes (e.g.
    CreateTopicsRequest, CreatableTopic): for requests the server sends itself."""
    return sys.modules[load_request_schema(api_key, version).__module__]


_FILL_INS: dict[type[Any], tuple[frozenset[str], tuple[tuple[str, Any], ...]]] = {}


def _fill_ins(cls: type[Any]) -> tuple[frozenset[str], tuple[tuple[str, Any], ...]]:
    """(field names, zero values for the fields that have no default) of an entity class."""
    cached = _FILL_INS.get(cls)
    if cached is None:
        cached = _FILL_INS[cls] = _compute_fill_ins(cls)
    return cached


def _compute_fill_ins(cls: type[Any]) -> tuple[frozenset[str], tuple[tuple[str, Any], ...]]:
    hints = typing.get_type_hints(cls)
    names = []
    required = []
    for f in dataclasses.fields(cls):
        names.append(f.name)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append((f.name, _default_for(hints[f.name])))
    return frozenset(names), tuple(required)


def build(cls: type[Any], **values: Any) -> Any:
    """An entity of `cls` from `values`, dropping names this version lacks and zero-filling
    required fields not given. Lets one handler serve every version of an API."""
    names, required = _fill_ins(cls)
    kwargs = {k: v for k, v in values.items() if k in names}
    for name, zero in required:
        if name not in kwargs:
            kwargs[name] = zero
    return cls(**kwargs)


def _default_for(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)):
            return None
        tp = args[0]
        origin = typing.get_origin(tp)
    if origin is tuple:
        return ()
    if tp is bool:
        return False
    if tp is uuid.UUID:
        return ZERO_UUID
    if isinstance(tp, type):
        if issubclass(tp, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(tp, str):
            return ""
        if issubclass(tp, bytes):
            return b""
        if issubclass(tp, int):
            return 0
        if issubclass(tp, float):
            return 0.0
        if dataclasses.is_dataclass(tp):
            return build(tp)
    return None


def error_response(api_key: int, version: int, error: ErrorCode) -> Any:
    """A response of the request's own version carrying `error` at the top level if it can."""
    cls = response_schema(api_key, version)
    names = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    if "error_code" in names:
        values["error_code"] = error
    return build(cls, **values)

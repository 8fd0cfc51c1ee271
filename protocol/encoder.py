"""Compiled response encoders: kio's wire format at a fraction of its cost.

kio's writer walks a tree of closures and does one `struct.pack` plus one `BytesIO.write`
per field. Here, per entity class (cached), a specialised function is generated from the
dataclass schema and compiled with `exec`. The generated code:

* reads every field with a plain attribute access, nested entities and arrays inlined
  (no call per nested entity);
* packs runs of consecutive fixed-size fields (ints, error codes, bools, timedeltas,
  datetimes, uuids, legacy length prefixes, the empty tagged-field byte, the nullable
  entity marker) with ONE precompiled `struct.Struct.pack`;
* collects parts in a list joined once, and for framed responses packs the size prefix and
  the response header together with the leading fixed-size fields.

The source text comes only from schema metadata (field names, kafka types, tags, and
constants bound by name), never from data. Anything the generator does not know is encoded
by kio's own field writer; anything that fails at run time (a value of an unexpected
type, a length out of range) is re-encoded by kio's writer, so results and errors match
kio exactly. The output is byte-for-byte what `kio.serial.entity_writer` produces.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from collections.abc import Callable
from dataclasses import MISSING
from functools import cache
from typing import Any

from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._serialize import get_field_writer

from .varint import SMALL_UVARINTS, uvarint_bytes

__all__ = [
    "BODY_ENCODERS",
    "FRAME_ENCODERS",
    "body_encoder",
    "encode",
    "encode_frame",
    "fallback_count",
    "fallback_fields",
    "frame_encoder",
    "generated_source",
]

BodyEncoder = Callable[[Any], bytes]
FrameEncoder = Callable[[Any, int], bytes]

# kafka type -> struct code, for types kio writes with a single non-nullable struct.pack
_FIXED = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "float64": "d",
    "bool": "?",
    "error_code": "h",  # IntEnum members and plain ints pack alike
}
_BLOBS = ("string", "bytes", "records")

_ZERO_UUID = bytes(16)


def _compact_array_length(items: Any) -> bytes:
    return b"\x00" if items is None else uvarint_bytes(len(items) + 1)


def _size_prefixed(data: bytes) -> bytes:
    return uvarint_bytes(len(data)) + data


def _kio_field_bytes(writer: Callable[[Any, Any], None], value: Any) -> bytes:
    buf = io.BytesIO()
    writer(buf, value)
    return buf.getvalue()


_HELPERS: dict[str, Any] = {
    "_UVT": SMALL_UVARINTS,
    "_uv": uvarint_bytes,
    "_calen": _compact_array_length,
    "_lp": _size_prefixed,
    "_kiob": _kio_field_bytes,
    "_ZU": _ZERO_UUID,
    "_ZTD": datetime.timedelta(0),
    "_SP": struct.pack,
}

# ---------------------------------------------------------------------------------------
# Fallbacks: kio's own writer.

_fallbacks = 0  # how many encodes went through kio at run time (tests assert it stays 0)
_FALLBACK_FIELDS: dict[type, list[str]] = {}  # fields compiled as calls to kio's writer
_I32 = struct.Struct(">i")


def fallback_count() -> int:
    """How many encodes were re-done by kio's writer because the compiled code failed."""
    return _fallbacks


def fallback_fields(cls: type[Any]) -> list[str]:
    """Fields of `cls` (and its nested entities) encoded by kio's writer, not compiled code.
    `["*"]` means the whole class could not be compiled."""
    body_encoder(cls)
    return list(_FALLBACK_FIELDS.get(cls, ()))


def _kio_body(entity: Any) -> bytes:
    global _fallbacks
    _fallbacks += 1
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _kio_frame(entity: Any, correlation_id: int, flexible_header: bool) -> bytes:
    global _fallbacks
    _fallbacks += 1
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    buf.write(_I32.pack(correlation_id))
    if flexible_header:
        buf.write(b"\x00")
    entity_writer(type(entity))(buf, entity)
    data = buf.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    del data
    return out


# ---------------------------------------------------------------------------------------
# Code generation.


class _Unsupported(Exception):
    pass


Item = tuple[str, str | int | None]  # (struct code, argument expression | int constant | None)


class _Gen:
    """Accumulates the lines of one generated function.

    `pending` is the current run of fixed-size items: it is packed with one Struct when
    something variable-sized has to be appended (`flush`), or a block starts or ends.
    Plain statements (`line`) may be interleaved freely: they never append, and every name
    they bind is fresh, so the deferred pack still sees the right values.
    """

    def __init__(self, framed: bool, flexible_header: bool = False) -> None:
        self.flexible_header = flexible_header
        self.lines: list[str] = []
        self.depth = 0
        self.pending: list[Item] = []
        self.ns: dict[str, Any] = dict(_HELPERS)
        self.counter = 0
        self.framed = framed
        self.head: list[Item] | None = None  # framed: the leading run, packed with the header
        self.head_open = framed
        self.appends = False
        self.fallbacks: list[str] = []

    def var(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any, prefix: str = "K") -> str:
        self.counter += 1
        name = f"_{prefix}{self.counter}"
        self.ns[name] = value
        return name

    def literal(self, value: Any) -> str:
        """Source for a default value: a literal for plain scalars, else a bound name."""
        plain = type(value) in (type(None), bool, int, str, bytes)
        if plain or (type(value) is tuple and value == ()):
            return repr(value)
        return self.const(value)

    def line(self, text: str) -> None:
        self.lines.append("    " * (2 + self.depth) + text)

    def bind(self, expr: str) -> str:
        if expr.isidentifier():
            return expr
        name = self.var()
        self.line(f"{name} = {expr}")
        return name

    def fixed(self, code: str, expr: str | int | None) -> None:
        self.pending.append((code, expr))

    def pack_expr(self, items: list[Item]) -> str:
        """Source packing `items`: a bytes literal when all are constants."""
        fmt = ">" + "".join(code for code, _ in items)
        if not any(isinstance(e, str) for _, e in items):
            return repr(struct.pack(fmt, *(e for _, e in items if e is not None)))
        args = [e if isinstance(e, str) else repr(e) for _, e in items if e is not None]
        pack = self.const(struct.Struct(fmt).pack, "S")
        return f"{pack}({', '.join(args)})"

    def flush(self) -> None:
        if self.head_open:
            # The first flush always happens at depth 0: blocks open only after one.
            assert self.depth == 0
            self.head, self.pending, self.head_open = self.pending, [], False
            return
        if self.pending:
            self.line(f"a({self.pack_expr(self.pending)})")
            self.pending = []
            self.appends = True

    def append(self, expr: str) -> None:
        self.flush()
        self.line(f"a({expr})")
        self.appends = True

    def stmt(self, text: str) -> None:
        """A statement that may append."""
        self.flush()
        self.line(text)
        self.appends = True

    def open_block(self, header: str) -> None:
        self.flush()
        self.line(header + ":")
        self.depth += 1
        self.appends = True

    def close_block(self) -> None:
        self.flush()
        if self.lines[-1].endswith(":"):
            self.line("pass")
        self.depth -= 1


def _prim_supported(kafka_type: str, optional: bool) -> bool:
    if kafka_type in _FIXED or kafka_type in ("timedelta_i32", "timedelta_i64"):
        return not optional
    return kafka_type in _BLOBS or kafka_type in ("uuid", "datetime_i64")


def _emit_prim(g: _Gen, kafka_type: str, flexible: bool, optional: bool, expr: str) -> None:
    code = _FIXED.get(kafka_type)
    if code is not None:
        g.fixed(code, expr)
    elif kafka_type in ("timedelta_i32", "timedelta_i64"):
        # kio's exact arithmetic, skipped for the zero delta (0 either way) which is the
        # usual throttle time; an int 0 is not equal to _ZTD, so it still fails like kio.
        v = g.bind(expr)
        code = "i" if kafka_type == "timedelta_i32" else "q"
        g.fixed(code, f"0 if {v} == _ZTD else round({v}.total_seconds() * 1000)")
    elif kafka_type == "datetime_i64":
        if optional:
            v = g.bind(expr)
            g.fixed("q", f"-1 if {v} is None else round({v}.timestamp() * 1000)")
        else:
            g.fixed("q", f"round({expr}.timestamp() * 1000)")
    elif kafka_type == "uuid":  # kio writes None as the zero uuid, nullable or not
        v = g.bind(expr)
        g.fixed("16s", f"_ZU if {v} is None else {v}.bytes")
    elif kafka_type in _BLOBS:
        _emit_blob(g, kafka_type == "string", flexible, optional, expr)
    else:  # pragma: no cover - guarded by _prim_supported
        raise _Unsupported(kafka_type)


def _emit_blob(g: _Gen, text: bool, flexible: bool, optional: bool, expr: str) -> None:
    v = g.var()
    g.line(f"{v} = {expr}")
    if flexible:
        # Compact: uvarint(length + 1), 0 for null. (kio also accepts bytes for strings and
        # str for bytes; such values fail here and are re-encoded by kio.)
        if optional:
            g.open_block(f"if {v} is None")
            g.append('b"\\x00"')
            g.close_block()
            g.open_block("else")
        if text:
            g.line(f"{v} = {v}.encode()")
        n = g.var("n")
        g.line(f"{n} = len({v}) + 1")
        g.append(f"_UVT[{n}] if {n} < 128 else _uv({n})")
        g.append(v)
        if optional:
            g.close_block()
        return
    # Legacy: int16 (string) or int32 (bytes) length, -1 for null; out-of-range lengths
    # make struct raise, and kio then raises its own OutOfBoundValue.
    width = "h" if text else "i"
    if optional:
        if text:
            g.line(f"if {v} is not None: {v} = {v}.encode()")
        g.fixed(width, f"-1 if {v} is None else len({v})")
        g.stmt(f"if {v} is not None: a({v})")
    else:
        if text:
            g.line(f"{v} = {v}.encode()")
        g.fixed(width, f"len({v})")
        g.append(v)


def _emit_array_length(g: _Gen, v: str, flexible: bool) -> None:
    if flexible:
        g.append(f"_UVT[len({v}) + 1] if {v} is not None and len({v}) < 127 else _calen({v})")
    else:
        g.fixed("i", f"-1 if {v} is None else len({v})")


def _emit_prim_array(g: _Gen, kafka_type: str, flexible: bool, expr: str) -> None:
    v = g.bind(expr)
    _emit_array_length(g, v, flexible)
    code = _FIXED.get(kafka_type)
    if code is not None:
        g.stmt(f"if {v}: a(_SP('>%d{code}' % len({v}), *{v}))")
        return
    x = g.var("x")
    g.open_block(f"for {x} in {v} or ()")
    _emit_prim(g, kafka_type, flexible, False, x)
    g.close_block()


def _emit_field(
    g: _Gen, field: dataclasses.Field[Any], flexible: bool, is_header: bool, is_tag: bool, expr: str
) -> None:
    if is_header and field.name == "client_id":
        # kio special-cases RequestHeader.client_id: always a nullable legacy string.
        _emit_prim(g, "string", False, True, expr)
        return
    # Tagged fields are written with non-nullable writers (their absence means default).
    optional = False if is_tag else is_optional(field)
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField | PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        element_optional = optional if isinstance(kind, PrimitiveField) else False
        if not _prim_supported(kafka_type, element_optional):
            writer = get_field_writer(field, flexible, is_header, is_tag)
            g.append(f"_kiob({g.const(writer, 'W')}, {expr})")
            g.fallbacks.append(field.name)
        elif isinstance(kind, PrimitiveField):
            _emit_prim(g, kafka_type, flexible, optional, expr)
        else:
            _emit_prim_array(g, kafka_type, flexible, expr)
    elif isinstance(kind, EntityField):
        v = g.bind(expr)
        if optional:  # KIP-893 nullable struct: int8 -1 for null, 1 then the entity
            g.open_block(f"if {v} is None")
            g.append('b"\\xff"')
            g.close_block()
            g.open_block("else")
            g.fixed("b", 1)
            _emit_entity(g, kind.type_, v)
            g.close_block()
        else:
            _emit_entity(g, kind.type_, v)
    elif isinstance(kind, EntityTupleField):
        v = g.bind(expr)
        _emit_array_length(g, v, flexible)
        x = g.var("x")
        g.open_block(f"for {x} in {v} or ()")
        _emit_entity(g, kind.type_, x)
        g.close_block()
    else:  # pragma: no cover - classify_field has four outcomes
        raise _Unsupported(field.name)


def _emit_entity(g: _Gen, cls: type[Any], base: str) -> None:
    flexible = bool(cls.__flexible__)
    is_header = cls.__name__ == "RequestHeader"
    tagged: list[tuple[int, dataclasses.Field[Any]]] = []
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tagged.append((int(tag), field))
        else:
            _emit_field(g, field, flexible, is_header, False, f"{base}.{field.name}")
    if tagged and not flexible:
        raise _Unsupported("tagged fields on a non-flexible model")
    if not flexible:
        return
    if not tagged:
        g.fixed("x", None)  # empty tagged-field section
        return
    # Tagged fields: written only when different from the default, in tag order.
    tagged.sort(key=lambda item: item[0])
    tags = g.var("tg")
    g.line(f"{tags} = []")
    for tag_number, field in tagged:
        default = field.default
        reference = default if default is not MISSING else get_tagged_field_default(field)
        ref = g.literal(reference)
        v = g.var()
        g.line(f"{v} = {base}.{field.name}")
        if ref.startswith("_"):  # an object: identity first, it is by far the common case
            g.line(f"if not ({v} is {ref} or {v} == {ref}):")
        else:
            g.line(f"if not ({v} == {ref}):")
        sub = g.const(_tag_value_encoder(field, flexible), "T")
        g.line(f"    {tags}.append({g.const(uvarint_bytes(tag_number), 'G')} + _lp({sub}({v})))")
    if len(tagged) < 128:
        g.fixed("B", f"len({tags})")
    else:
        g.append(f"_uv(len({tags}))")
    g.stmt(f"if {tags}: a(b''.join({tags}))")


def _function(g: _Gen, name: str, params: str, fallback: Any | None) -> tuple[Any, str]:
    body: list[str] = []
    framed_header: list[Item] = []
    if g.framed:
        framed_header = [("i", "SIZE"), ("i", "c")] + ([("x", None)] if g.flexible_header else [])
    if g.framed and g.head_open:
        # Everything is fixed-size: one pack for size, header and body.
        items = framed_header + g.pending
        size = struct.calcsize(">" + "".join(code for code, _ in items)) - 4
        items[0] = ("i", size)
        body = g.lines + ["    " * 2 + f"return {g.pack_expr(items)}"]
    elif not g.framed and not g.appends:
        ret = g.pack_expr(g.pending) if g.pending else 'b""'
        body = g.lines + ["    " * 2 + f"return {ret}"]
    else:
        g.flush()
        first = "[b'']" if g.framed else "[]"
        body = ["    " * 2 + f"p = {first}", "    " * 2 + "a = p.append", *g.lines]
        if g.framed:
            assert g.head is not None
            items = framed_header + g.head
            size = struct.calcsize(">" + "".join(code for code, _ in items)) - 4
            items[0] = ("i", f"sum(map(len, p)) + {size}")
            body.append("    " * 2 + f"p[0] = {g.pack_expr(items)}")
        body.append("    " * 2 + "return b''.join(p)")
    if fallback is None:
        src = f"def {name}({params}):\n    if True:\n" + "\n".join(body) + "\n"
    else:
        g.ns["_fallback"] = fallback
        src = (
            f"def {name}({params}):\n    try:\n"
            + "\n".join(body)
            + f"\n    except Exception:\n        return _fallback({params})\n"
        )
    exec(compile(src, f"<encoder {name}>", "exec"), g.ns)  # noqa: S102 - schema-derived only
    fn = g.ns[name]
    fn.__source__ = src
    return fn, src


@cache
def _tag_value_encoder(field: dataclasses.Field[Any], flexible: bool) -> Callable[[Any], bytes]:
    """bytes of one tagged field's value (errors propagate to the entity's fallback)."""
    g = _Gen(framed=False)
    _emit_field(g, field, flexible, False, True, "e")
    fn, _ = _function(g, f"tag_{field.name}", "e", None)
    return fn  # type: ignore[no-any-return]


def _compile(cls: type[Any], framed: bool, flexible_header: bool) -> tuple[Any, str]:
    g = _Gen(framed, flexible_header)
    _emit_entity(g, cls, "e")
    if g.fallbacks:
        _FALLBACK_FIELDS[cls] = g.fallbacks
    name = f"encode_{cls.__name__}"
    if framed:
        return _function(g, name, "e, c", lambda e, c: _kio_frame(e, c, flexible_header))
    return _function(g, name, "e", _kio_body)


# ---------------------------------------------------------------------------------------
# Public API.


class _BodyEncoders(dict[type, BodyEncoder]):
    """cls -> compiled `encode(entity) -> bytes`, compiled on first use."""

    def __missing__(self, cls: type[Any]) -> BodyEncoder:
        try:
            fn: BodyEncoder = _compile(cls, False, False)[0]
        except Exception:
            _FALLBACK_FIELDS[cls] = ["*"]
            fn = _kio_body
        self[cls] = fn
        return fn


class _FrameEncoders(dict[type, FrameEncoder]):
    """cls -> compiled `encode(entity, correlation_id) -> bytes`, compiled on first use."""

    def __init__(self, flexible_header: bool) -> None:
        super().__init__()
        self.flexible_header = flexible_header

    def __missing__(self, cls: type[Any]) -> FrameEncoder:
        flexible = self.flexible_header
        try:
            fn: FrameEncoder = _compile(cls, True, flexible)[0]
        except Exception:
            _FALLBACK_FIELDS[cls] = ["*"]

            def fn(e: Any, c: int) -> bytes:
                return _kio_frame(e, c, flexible)

        self[cls] = fn
        return fn


BODY_ENCODERS = _BodyEncoders()
# Indexed by the header's flexibility: [0] response header v0, [1] header v1.
FRAME_ENCODERS = (_FrameEncoders(False), _FrameEncoders(True))


def body_encoder(cls: type[Any]) -> BodyEncoder:
    """`encode(entity) -> bytes` for entities of `cls`, identical to kio's entity_writer."""
    return BODY_ENCODERS[cls]


def frame_encoder(cls: type[Any], flexible_header: bool) -> FrameEncoder:
    """`encode(entity, correlation_id) -> bytes`: int32 size, response header v0
    (correlation id) or v1 (plus an empty tagged-field byte), then the body."""
    return FRAME_ENCODERS[1 if flexible_header else 0][cls]


def encode(entity: Any) -> bytes:
    """The body of `entity` as kio's entity_writer would write it."""
    return BODY_ENCODERS[type(entity)](entity)


def encode_frame(entity: Any, correlation_id: int, flexible_header: bool) -> bytes:
    """Size prefix, response header v0/v1 and body of `entity`."""
    return FRAME_ENCODERS[1 if flexible_header else 0][type(entity)](entity, correlation_id)


def generated_source(cls: type[Any], framed: bool = False, flexible_header: bool = False) -> str:
    """The generated source for `cls` (for debugging and review)."""
    return _compile(cls, framed, flexible_header)[1]

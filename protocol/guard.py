"""Structural pre-check of a request body before the native codec decodes it.

Why: kio's native reader reserves memory for an array from the length the client declares
before reading a single element, so a frame of a few bytes announcing four billion
elements aborts the whole process (an allocation failure is not an exception). This walk
follows the same schema and checks every declared length and count against the bytes
actually present, so only well-formed sizes ever reach the codec. It builds nothing.

How: it runs on every request, so the walk for each request class is generated once as
straight-line Python source and compiled. Nested entities are inlined; runs of fixed-size
fields add up to a single `pos += N` with one bounds check; length prefixes are read in
place (struct for int16/int32; an unsigned varint's single byte inline, a longer one by
protocol/varint.py's reader); arrays of fixed-size items are skipped with one
multiplication. A bounds check may be deferred past any number of additions to `pos`, but
never past a read of the buffer, a use of `end - pos`, or the return, so no byte at or
beyond `end` is ever read and the returned position never exceeds `end`.
"""

from __future__ import annotations

import dataclasses
import itertools
import linecache
import struct
from collections.abc import Callable
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

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

from .varint import VarintError, read_uvarint

Step = Callable[[bytes, int, int], int]

_FIXED_SIZES = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_BLOBS = ("string", "bytes", "records")
# The longest unsigned varint the walk accepts: one byte more than Kafka's 5, as the walk
# always did (tests/unit/test_guard.py pins it); it bounds lengths, the codec behind it
# rejects what Kafka would.
_VARINT_MAX_BYTES = 6


class MalformedBody(ValueError):
    pass


def _tagged(buf: bytes, pos: int, end: int, count: int, known: dict[int, Step]) -> int:
    """Walk `count` tagged fields: known tags must fill their window exactly."""
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos, end, _VARINT_MAX_BYTES)
        size, pos = read_uvarint(buf, pos, end, _VARINT_MAX_BYTES)
        field_end = pos + size
        if field_end > end:
            raise MalformedBody(f"tagged field {tag} runs past the end of the frame")
        step = known.get(tag)
        if step is not None and step(buf, pos, field_end) != field_end:
            raise MalformedBody(f"tagged field {tag} has a wrong size")
        pos = field_end
    return pos


def _null_allowed(tp: Any) -> bool:
    """Whether a value of type `tp` may be null on the wire: `X | None`."""
    return get_origin(tp) in (UnionType, Union) and NoneType in get_args(tp)


def _element_type(tp: Any) -> Any:
    """The element type of an array type `tuple[X, ...]` (or `tuple[X, ...] | None`)."""
    if get_origin(tp) is not tuple:
        tp = next(a for a in get_args(tp) if a is not NoneType)
    return get_args(tp)[0]


def _null_refused(what: str) -> str:
    return f"raise _M({f'non-nullable field {what} was serialized as null'!r})"


# --- per-class facts -----------------------------------------------------------------


def _fields(cls: type[Any]) -> list[tuple[dataclasses.Field[Any], Any, int | None]]:
    return [(f, classify_field(f), get_field_tag(f)) for f in dataclasses.fields(cls)]


_MIN: dict[type[Any], int] = {}


def _bytes_min(cls: type[Any]) -> int:
    """The least bytes one encoded `cls` can take (the bound that arrays are checked with)."""
    cached = _MIN.get(cls)
    if cached is not None:
        return cached
    total = 1 if cls.__flexible__ else 0  # the tagged-field count
    for field, kind, tag in _fields(cls):
        if tag is not None:
            continue
        if isinstance(kind, PrimitiveField):
            total += _FIXED_SIZES.get(get_schema_field_type(field), 1)
        elif isinstance(kind, PrimitiveTupleField | EntityTupleField):
            total += 1 if cls.__flexible__ else 4
        elif isinstance(kind, EntityField):
            total += 1 if is_optional(field) else _bytes_min(kind.type_)
        else:  # pragma: no cover - classify_field has four outcomes
            raise NotImplementedError(field)
    _MIN[cls] = total
    return total


def _fixed_size(cls: type[Any]) -> int | None:
    """The exact encoded size of `cls` if it never varies, else None."""
    if cls.__flexible__:
        return None
    total = 0
    for field, kind, _tag in _fields(cls):
        if isinstance(kind, PrimitiveField):
            size = _FIXED_SIZES.get(get_schema_field_type(field))
        elif isinstance(kind, EntityField) and not is_optional(field):
            size = _fixed_size(kind.type_)
        else:
            size = None
        if size is None:
            return None
        total += size
    return total


# --- code generation -------------------------------------------------------------------


class _Emitter:
    """Source lines of one function, with the pending bounds-check state.

    `acc` bytes of fixed-size fields are owed to `pos` but not yet added; `dirty` says `pos`
    was advanced past its last bounds check."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.acc = 0
        self.dirty = False

    def out(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def skip(self, size: int) -> None:
        self.acc += size

    def take(self, indent: int, size: int, what: str) -> None:
        """Advance over `size` bytes about to be read; they then sit at buf[pos-size:pos]."""
        total = self.acc + size
        if total:
            self.out(indent, f"pos += {total}")
        self.out(indent, "if pos > end:")
        self.out(indent + 1, f"raise _M({'a length runs past the end of the frame at ' + what!r})")
        self.acc = 0
        self.dirty = False

    def settle(self, indent: int) -> None:
        """Add what is owed to `pos` (unchecked): before the end of a block."""
        if self.acc:
            self.out(indent, f"pos += {self.acc}")
            self.acc = 0
            self.dirty = True

    def check(self, indent: int, what: str) -> None:
        if self.acc or self.dirty:
            self.take(indent, 0, what)

    def block(self, indent: int, body: Callable[[], None]) -> None:
        """Emit `body` as a block at `indent`; pos was exactly checked before it."""
        start = len(self.lines)
        self.acc, self.dirty = 0, False
        body()
        self.settle(indent)
        if len(self.lines) == start:
            self.out(indent, "pass")


class _Builder:
    def __init__(self) -> None:
        self.names: dict[str, Any] = {
            "_M": MalformedBody,
            "_uv": read_uvarint,
            "_tagged": _tagged,
            "_h": struct.Struct(">h").unpack_from,
            "_i": struct.Struct(">i").unpack_from,
            "_NOTAGS": {},
        }
        self.functions: list[list[str]] = []
        self.known: dict[type[Any], str] = {}
        self.stack: list[type[Any]] = []

    def function(self, name: str, emit: Callable[[_Emitter], None], what: str) -> None:
        em = _Emitter()
        em.out(0, f"def {name}(buf, pos, end):")
        emit(em)
        em.check(1, what)
        em.out(1, "return pos")
        self.functions.append(em.lines)

    def entity(self, em: _Emitter, ind: int, cls: type[Any], what: str) -> None:
        if cls in self.stack:  # pragma: no cover - Kafka schemas are not recursive
            raise NotImplementedError(f"recursive schema {cls.__qualname__}")
        self.stack.append(cls)
        flexible = bool(cls.__flexible__)
        for field, kind, tag in _fields(cls):
            if tag is None:
                self.field(em, ind, field, kind, flexible, f"{what}.{field.name}", marker=True)
        if flexible:
            known = self.tags(cls, what)
            em.take(ind, 1, f"{what} tagged fields")
            em.out(ind, "b = buf[pos - 1]")
            em.out(ind, "if b:")
            em.out(ind + 1, "if b >= 0x80:")
            em.out(ind + 2, f"b, pos = _uv(buf, pos - 1, end, {_VARINT_MAX_BYTES})")
            em.out(ind + 1, f"pos = _tagged(buf, pos, end, b, {known})")
        self.stack.pop()

    def tags(self, cls: type[Any], what: str) -> str:
        """The name of the {tag: step} dict for the tagged fields of `cls`."""
        name = self.known.get(cls)
        if name is not None:
            return name
        steps: dict[int, str] = {}
        for field, kind, tag in _fields(cls):
            if tag is None:
                continue
            fname = f"_t{len(self.functions)}_{int(tag)}"
            fwhat = f"{what}.{field.name}"

            def emit(
                em: _Emitter, field: Any = field, kind: Any = kind, fwhat: str = fwhat
            ) -> None:
                self.field(em, 1, field, kind, True, fwhat, marker=False)

            self.function(fname, emit, fwhat)
            steps[int(tag)] = fname
        if not steps:
            name = "_NOTAGS"
        else:
            name = f"_k{len(self.known)}"
            self.functions.append(
                [f"{name} = {{" + ", ".join(f"{t}: {f}" for t, f in steps.items()) + "}"]
            )
        self.known[cls] = name
        return name

    def field(
        self,
        em: _Emitter,
        ind: int,
        field: Any,
        kind: Any,
        flexible: bool,
        what: str,
        marker: bool,
    ) -> None:
        """Emit the walk over one field; `marker`: a nullable struct has its int8 marker
        (not inside a tagged field's window)."""
        null_ok = _null_allowed(field.type)
        if isinstance(kind, PrimitiveField):
            self.primitive(em, ind, get_schema_field_type(field), flexible, what, null_ok)
        elif isinstance(kind, EntityField):
            if marker and is_optional(field):
                em.take(ind, 1, what)
                em.out(ind, "if buf[pos - 1] != 0xFF:")
                em.block(ind + 1, lambda: self.entity(em, ind + 1, kind.type_, what))
            else:
                self.entity(em, ind, kind.type_, what)
        elif isinstance(kind, PrimitiveTupleField):
            kafka_type = get_schema_field_type(field)
            size = _FIXED_SIZES.get(kafka_type)
            if size is None:
                self.check_type(kafka_type)
            element_null_ok = _null_allowed(_element_type(field.type))
            self.array(
                em,
                ind,
                flexible,
                what,
                null_ok,
                element_min=max(1, _FIXED_SIZES.get(kafka_type, 1)),
                element_size=size,
                element=lambda i: self.primitive(
                    em, i, kafka_type, flexible, what + "[]", element_null_ok
                ),
            )
        elif isinstance(kind, EntityTupleField):
            inner = kind.type_
            self.array(
                em,
                ind,
                flexible,
                what,
                null_ok,
                element_min=max(1, _bytes_min(inner)),
                element_size=_fixed_size(inner),
                element=lambda i: self.entity(em, i, inner, what + "[]"),
            )
        else:  # pragma: no cover - classify_field has four outcomes
            raise NotImplementedError(field)

    @staticmethod
    def check_type(kafka_type: str) -> None:
        if kafka_type not in _FIXED_SIZES and kafka_type not in _BLOBS:
            raise NotImplementedError(f"no guard for kafka type {kafka_type!r}")

    def primitive(
        self, em: _Emitter, ind: int, kafka_type: str, flexible: bool, what: str, null_ok: bool
    ) -> None:
        self.check_type(kafka_type)
        size = _FIXED_SIZES.get(kafka_type)
        if size is not None:
            em.skip(size)
        elif flexible:  # compact string/bytes: uvarint length + 1, 0 is null
            em.take(ind, 1, what)
            em.out(ind, "b = buf[pos - 1]")
            em.out(ind, "if b >= 0x80:")
            em.out(ind + 1, f"b, pos = _uv(buf, pos - 1, end, {_VARINT_MAX_BYTES})")
            if null_ok:
                em.out(ind, "if b:")
                em.out(ind + 1, "pos += b - 1")
            else:
                em.out(ind, "if not b:")
                em.out(ind + 1, _null_refused(what))
                em.out(ind, "pos += b - 1")
            em.dirty = True
        else:  # legacy: int16 (string) or int32 (bytes) length, -1 is null
            width, read = (2, "_h") if kafka_type == "string" else (4, "_i")
            em.take(ind, width, what)
            em.out(ind, f"b = {read}(buf, pos - {width})[0]")
            if null_ok:
                em.out(ind, "if b >= 0:")
                em.out(ind + 1, "pos += b")
                em.out(ind, "elif b != -1:")
                em.out(ind + 1, f"raise _M({what + ': negative length'!r})")
            else:  # Kafka reads any negative length of a non-nullable field as a null
                em.out(ind, "if b < 0:")
                em.out(ind + 1, _null_refused(what))
                em.out(ind, "pos += b")
            em.dirty = True

    def array(
        self,
        em: _Emitter,
        ind: int,
        flexible: bool,
        what: str,
        null_ok: bool,
        element_min: int,
        element_size: int | None,
        element: Callable[[int], None],
    ) -> None:
        if flexible:  # uvarint count + 1, 0 is null
            em.take(ind, 1, what)
            em.out(ind, "n = buf[pos - 1]")
            em.out(ind, "if n >= 0x80:")
            em.out(ind + 1, f"n, pos = _uv(buf, pos - 1, end, {_VARINT_MAX_BYTES})")
            em.out(ind, "if n > 1:")
            em.out(ind + 1, "n -= 1")
            null = "not n"
        else:  # int32 count, -1 is null (Kafka: any negative count)
            em.take(ind, 4, what)
            em.out(ind, "n = _i(buf, pos - 4)[0]")
            em.out(ind, "if n > 0:")
            null = "n < 0"
        self.elements(em, ind + 1, what, element_min, element_size, element)
        if not null_ok:  # after the elements: no cost for an array that has some
            em.out(ind, f"elif {null}:")
            em.out(ind + 1, _null_refused(what))

    def elements(
        self,
        em: _Emitter,
        i: int,
        what: str,
        element_min: int,
        element_size: int | None,
        element: Callable[[int], None],
    ) -> None:
        """The body of `if n > 0:` (n elements follow)."""
        fit = "n" if element_min == 1 else f"n * {element_min}"
        em.out(i, f"if {fit} > end - pos:")
        em.out(i + 1, f"raise _M({what + ': array of '!r} + str(n) + ' elements cannot fit')")
        if element_size is not None:
            # Every element takes exactly element_size >= 1 bytes (or 0 with element_min 1),
            # so the check above already proves they all fit.
            if element_size:
                em.out(i, "pos += n" if element_size == 1 else f"pos += n * {element_size}")
            return
        em.out(i, "for _ in range(n):")

        def body() -> None:
            em.dirty = True  # the previous element may have left pos unchecked
            element(i + 1)

        # Afterwards pos is unchecked only if an element can end unchecked (an empty array
        # leaves the position checked when the count was read).
        em.block(i + 1, body)


_counter = itertools.count()
_VALIDATORS: dict[type[Any], Step] = {}
_SOURCES: dict[type[Any], str] = {}


def _build(cls: type[Any]) -> Step:
    builder = _Builder()
    what = cls.__name__
    # Emitting `validate` also emits the steps for tagged fields, ahead of it.
    builder.function("validate", lambda em: builder.entity(em, 1, cls, what), what)
    source = "\n".join("\n".join(lines) for lines in builder.functions) + "\n"
    filename = f"<guard {cls.__module__}.{cls.__qualname__} #{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(builder.names)
    exec(compile(source, filename, "exec"), namespace)
    validate: Step = namespace["validate"]
    _SOURCES[cls] = source
    _VALIDATORS[cls] = validate
    return validate


def validator_source(cls: type[Any]) -> str:
    """The generated source of the walk for `cls` (for debugging)."""
    if cls not in _SOURCES:
        _build(cls)
    return _SOURCES[cls]


def body_end(cls: type[Any], frame: bytes, pos: int) -> int:
    """Where the `cls` starting at `frame[pos]` ends; raises MalformedBody like check_body."""
    step = _VALIDATORS.get(cls)
    if step is None:
        step = _build(cls)
    try:
        return step(frame, pos, len(frame))
    except VarintError as e:
        raise MalformedBody(str(e)) from None


def check_body(cls: type[Any], frame: bytes, pos: int) -> None:
    """Raise MalformedBody unless `frame[pos:]` holds a structurally sound `cls`."""
    step = _VALIDATORS.get(cls)
    if step is None:
        step = _build(cls)
    try:
        step(frame, pos, len(frame))
    except VarintError as e:
        raise MalformedBody(str(e)) from None

"""Fast construction of frozen slotted dataclasses (see fast_new)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, cast

_T = TypeVar("_T")


def fast_new(cls: type[_T]) -> Callable[..., _T]:
    """A positional constructor for the frozen slotted dataclass ``cls`` at plain-class speed.

    A frozen dataclass ``__init__`` sets each field through ``object.__setattr__``. Instead,
    fill an instance of a twin class with the same ``__slots__`` (plain attribute stores),
    then switch its ``__class__`` to ``cls``, which CPython allows between classes of
    identical slot layout. The result is an ordinary ``cls`` instance (tests compare it with
    ``cls(...)``). Falls back to calling ``cls`` where the switch is refused.
    """
    names = tuple(f.name for f in dataclasses.fields(cast(Any, cls)))
    args = ", ".join(names)
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": names})
    env: dict[str, Any] = {"_alloc": object.__new__, "_twin": twin, "_cls": cls}
    src = (
        f"def new({args}):\n    o = _alloc(_twin)\n"
        + "".join(f"    o.{n} = {n}\n" for n in names)
        + "    o.__class__ = _cls\n    return o\n"
    )
    try:
        exec(src, env)  # noqa: S102 - generated from dataclass field names only
        probe = env["new"](*([None] * len(names)))
        if type(probe) is not cls:
            raise TypeError("class switch ignored")
    except TypeError:
        kwargs = ", ".join(f"{n}={n}" for n in names)
        exec(f"def new({args}):\n    return _cls({kwargs})\n", env)  # noqa: S102
    return cast(Callable[..., _T], env["new"])

"""Assignors of your own: the names in `group_consumer_assignors` that are not built in are
loaded here, at start-up, from the entry points of the group `groupcoord.assignors`, and the
shards are handed the objects (GroupConfig.consumer_assignor_plugins).

Why here and not in groups/: loading reads the installed distributions' metadata and imports
their code, which is I/O the pure shard does not do; and a missing or broken plugin should
stop the server before it starts, with a message saying which one and why (a ConfigError, as
for any bad setting). The interface the plugins implement is groups/assignors/spec.py.

An entry point names a class or a zero-argument factory returning the assignor, or the
assignor object itself. Its name must be the assignor's `name` (what clients ask for).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any, cast

from .config import ConfigError
from .groups.assignors import BUILTIN_ASSIGNOR_NAMES, ENTRY_POINT_GROUP, PartitionAssignor

SETTING = "group_consumer_assignors"


def assignor_names(setting: str) -> tuple[str, ...]:
    """The names a `group_consumer_assignors` value lists, in order."""
    return tuple(a.strip() for a in setting.split(",") if a.strip())


def load_assignor_plugins(names: Iterable[str]) -> tuple[PartitionAssignor, ...]:
    """The assignors of the `names` that are not built in, loaded from their entry points.
    Raises ConfigError when one is not installed (no entry point of that name, or two),
    cannot be loaded, or is not an assignor of that name."""
    wanted = [name for name in dict.fromkeys(names) if name not in BUILTIN_ASSIGNOR_NAMES]
    if not wanted:
        return ()
    declared: dict[str, list[EntryPoint]] = {}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        declared.setdefault(entry_point.name, []).append(entry_point)
    return tuple(_load(name, declared) for name in wanted)


def _load(name: str, declared: dict[str, list[EntryPoint]]) -> PartitionAssignor:
    found = declared.get(name, [])
    if not found:
        installed = ", ".join(sorted(declared)) or "none"
        raise ConfigError(
            f"{SETTING}: no assignor {name!r}: the built-in ones are "
            f"{', '.join(sorted(BUILTIN_ASSIGNOR_NAMES))}, and no installed distribution "
            f"declares {name!r} in the entry-point group {ENTRY_POINT_GROUP!r} "
            f"(declared there: {installed})"
        )
    if len({ep.value for ep in found}) > 1:
        raise ConfigError(
            f"{SETTING}: assignor {name!r} is declared more than once in the entry-point group "
            f"{ENTRY_POINT_GROUP!r}: {', '.join(sorted({ep.value for ep in found}))}"
        )
    entry_point = found[0]
    where = f"{name!r} ({entry_point.value})"
    try:
        loaded = entry_point.load()
        assignor: Any = loaded if _is_assignor(loaded) or not callable(loaded) else loaded()
    except Exception as e:
        raise ConfigError(f"{SETTING}: assignor {where} cannot be loaded: {e!r}") from e
    if not _is_assignor(assignor):
        raise ConfigError(
            f"{SETTING}: assignor {where} gives a {type(assignor).__name__}, not an assignor "
            "(a `name` and an `assign(group, topics)` method)"
        )
    if assignor.name != name:
        raise ConfigError(
            f"{SETTING}: assignor {where} is named {assignor.name!r}: the entry point's name "
            "must be the assignor's"
        )
    return cast(PartitionAssignor, assignor)


def _is_assignor(candidate: object) -> bool:
    """An assignor object (not a class or a factory)."""
    return (
        not isinstance(candidate, type)
        and isinstance(getattr(candidate, "name", None), str)
        and callable(getattr(candidate, "assign", None))
    )

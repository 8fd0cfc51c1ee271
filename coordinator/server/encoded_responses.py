"""What the group APIs' response builders share: responses encoded once and reused, and
the small conversions of wire fields."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from groupcoord.protocol.api import ApiKey, Encoded

NO_THROTTLE = datetime.timedelta(0)


class EncodedResponses:
    """Responses that repeat, encoded once per key and reused; bounded (emptied when full)
    so that clients cannot grow it without limit. The key starts with the version."""

    __slots__ = ("api_key", "_encoded")
    LIMIT = 100_000

    def __init__(self, api_key: ApiKey) -> None:
        self.api_key = api_key
        self._encoded: dict[tuple[Any, ...], Encoded] = {}

    def cached(self, key: tuple[Any, ...]) -> Encoded | None:
        return self._encoded.get(key)

    def get(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Encoded:
        encoded = self._encoded.get(key)
        if encoded is None:
            if len(self._encoded) >= self.LIMIT:
                self._encoded.clear()
            encoded = self._encoded[key] = Encoded(build(), self.api_key, key[0])
        return encoded


def ms(value: datetime.timedelta) -> int:
    """A codec duration (timedelta) in whole milliseconds."""
    return int(value.total_seconds() * 1000)


def entity_class(module: Any, *names: str) -> Any:
    """The first of `names` that `module` (a kio schema module) defines: entity names
    differ between versions."""
    for name in names:
        cls = getattr(module, name, None)
        if cls is not None:
            return cls
    raise AttributeError(names)

"""Minimal asyncio HTTP endpoint (GET only):

- /metrics: Prometheus text;
- /health: JSON {"status", ...}, 200 when "ok", else 503;
- /: the web page (web_page.html: inline script and style, nothing fetched from elsewhere,
  which its Content-Security-Policy also forbids), polling the API below;
- /api/groups: every group with state, protocol, members and total lag (group_api.py);
- /api/groups/<group>: one group's members, assignment and lag per partition;
- /api/groups/<group>/timeline: its rebalance timeline, {"group", "events"} oldest first.

A group id is percent-encoded in the path; a group not known is 404 {"error"}. With a
bearer token set, everything but /health and / answers 401 without it (http_access.py);
the token and other credentials are never part of an answer or a log line.

The server listens for it (server/listener.py, as for the Kafka listener, so that /health
still answers, or waits, when descriptors run out); `protocol` serves one connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .group_api import GroupApi
from .http_access import HttpAccess
from .metrics import ServerMetrics

REQUEST_BYTES_MAX = 16 * 1024
_GROUPS_API = "/api/groups/"
_TIMELINE = "/timeline"
_JSON = "application/json"
# The page may run its own inline script and style and call back this endpoint, nothing else.
_PAGE_HEADERS = (
    "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'\r\n"
)
_PAGE = Path(__file__).with_name("web_page.html")

Timeline = Callable[[str], list[dict[str, Any]] | None]
Answer = tuple[str, str, bytes]


class HttpEndpoint:
    def __init__(
        self,
        metrics: ServerMetrics,
        health: Callable[[], dict[str, object]],
        refresh: Callable[[], None],
        timeline: Timeline | None = None,
        more_metrics: Callable[[], Awaitable[bytes]] | None = None,
        groups: GroupApi | None = None,
        access: HttpAccess | None = None,
    ) -> None:
        """`timeline(group)`: the group's events (None: unknown group); `more_metrics()`:
        metrics text rendered outside the registry, appended to it (consumer lag:
        lag_metrics.py, measured while the scrape waits, yielding to the loop); `groups`:
        the page's API (none: 404); `access`: the token required (none: open)."""
        self.more_metrics = more_metrics
        self.metrics = metrics
        self.health = health
        self.refresh = refresh
        self.timeline = timeline
        self.groups = groups
        self.access = access
        self._page: bytes | None = None

    def protocol(self) -> asyncio.Protocol:
        """The protocol of one accepted connection (a protocol factory)."""
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._handle)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            if len(head) > REQUEST_BYTES_MAX:
                raise ValueError("request too large")
            lines = head.split(b"\r\n")
            parts = lines[0].decode("latin-1").split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            path = path.split("?")[0]
            extra = ""
            if method != "GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif self.access is not None and not self.access.allowed(
                path, _header(lines, b"authorization")
            ):
                status, ctype, body = "401 Unauthorized", "text/plain", b"bearer token required\n"
                extra = 'WWW-Authenticate: Bearer realm="groupcoord"\r\n'
            else:
                status, ctype, body = await self._answer(path)
                if path == "/":
                    extra = _PAGE_HEADERS
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                f"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n{extra}"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ValueError,
            ConnectionError,
        ):
            pass
        finally:
            writer.close()

    async def _answer(self, path: str) -> Answer:
        if path.startswith(_GROUPS_API) and path.endswith(_TIMELINE):
            return self._timeline(path)
        if path == "/metrics":
            more = b"" if self.more_metrics is None else await self.more_metrics()
            self.refresh()
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.metrics.registry) + more
        if path == "/health":
            state = self.health()
            ok = state.get("status") == "ok"
            status = "200 OK" if ok else "503 Service Unavailable"
            return status, _JSON, json.dumps(state).encode() + b"\n"
        if self.groups is not None:
            if path == "/":
                if self._page is None:
                    self._page = _PAGE.read_bytes()
                return "200 OK", "text/html; charset=utf-8", self._page
            if path == "/api/groups":
                answer = await self.groups.groups()
                return "200 OK", _JSON, json.dumps(answer, separators=(",", ":")).encode()
            if path.startswith(_GROUPS_API):
                group_id = unquote(path[len(_GROUPS_API) :])
                return _found(group_id, self.groups.group(group_id))
        return "404 Not Found", "text/plain", b"not found\n"

    def _timeline(self, path: str) -> Answer:
        """GET /api/groups/<group>/timeline (the group id percent-encoded)."""
        group_id = unquote(path[len(_GROUPS_API) : -len(_TIMELINE)])
        events = self.timeline(group_id) if self.timeline is not None else None
        return _found(group_id, None if events is None else {"group": group_id, "events": events})


def _found(group_id: str, answer: dict[str, Any] | None) -> Answer:
    if answer is None:
        answer = {"error": f"group {group_id!r} is not known"}
        return "404 Not Found", _JSON, json.dumps(answer).encode() + b"\n"
    return "200 OK", _JSON, json.dumps(answer).encode() + b"\n"


def _header(lines: list[bytes], name: bytes) -> bytes | None:
    """The value of header `name` (lower-case) in the request's head lines, or None."""
    for line in lines[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip()
    return None

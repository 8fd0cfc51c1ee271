"""Minimal asyncio HTTP endpoint: GET /metrics (Prometheus text), GET /health and
GET /api/groups/<group>/timeline (a group's rebalance timeline, JSON: {"group", "events"},
oldest first; 404 {"error"} for a group the coordinator does not know).

The server listens for it (server/listener.py, as for the Kafka listener, so that /health
still answers, or waits, when descriptors run out); `protocol` serves one connection."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .metrics import ServerMetrics

REQUEST_BYTES_MAX = 16 * 1024
_GROUPS_API = "/api/groups/"
_TIMELINE = "/timeline"

Timeline = Callable[[str], list[dict[str, Any]] | None]


class HttpEndpoint:
    def __init__(
        self,
        metrics: ServerMetrics,
        health: Callable[[], dict[str, object]],
        refresh: Callable[[], None],
        timeline: Timeline | None = None,
        more_metrics: Callable[[], Awaitable[bytes]] | None = None,
    ) -> None:
        """`timeline(group)`: the group's events (None: unknown group); `more_metrics()`:
        metrics text rendered outside the registry, appended to it (consumer lag:
        lag_metrics.py, measured while the scrape waits, yielding to the loop)."""
        self.more_metrics = more_metrics
        self.metrics = metrics
        self.health = health
        self.refresh = refresh
        self.timeline = timeline

    def protocol(self) -> asyncio.Protocol:
        """The protocol of one accepted connection (a protocol factory)."""
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._handle)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            if len(head) > REQUEST_BYTES_MAX:
                raise ValueError("request too large")
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            path = path.split("?")[0]
            if method != "GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path.startswith(_GROUPS_API) and path.endswith(_TIMELINE):
                status, ctype, body = self._timeline(path)
            elif path == "/metrics":
                more = b"" if self.more_metrics is None else await self.more_metrics()
                self.refresh()
                body = generate_latest(self.metrics.registry) + more
                status, ctype = "200 OK", CONTENT_TYPE_LATEST
            elif path == "/health":
                state = self.health()
                ok = state.get("status") == "ok"
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "application/json", json.dumps(state).encode() + b"\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
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

    def _timeline(self, path: str) -> tuple[str, str, bytes]:
        """GET /api/groups/<group>/timeline (the group id percent-encoded)."""
        group_id = unquote(path[len(_GROUPS_API) : -len(_TIMELINE)])
        events = self.timeline(group_id) if self.timeline is not None else None
        if events is None:
            status = "404 Not Found"
            answer: dict[str, Any] = {"error": f"group {group_id!r} is not known"}
        else:
            status = "200 OK"
            answer = {"group": group_id, "events": events}
        return status, "application/json", json.dumps(answer).encode() + b"\n"

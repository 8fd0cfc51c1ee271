"""Who may connect, and how long a connection may sit idle or dribble a frame.

Admission: at most connections_max connections in all and connections_max_per_ip from one
client address (Kafka's max.connections, max.connections.per.ip and its overrides). The
listener asks right after accept() (listener.py, through Server.protocol_for) and resets a
refused connection before any transport or protocol exists for it; an admitted connection
holds its count until its Connection is lost. One client opening thousands of connections
then takes its own share, not everyone's, at ~30-45 us per refusal (mostly the kernel's:
the accept and the reset). Refusals are
counted in a metric and logged as one line per address and reason per sweep (a flood of
12,000 attempts would otherwise be 12,000 lines).

Deadlines, without a timer per connection or per request: one periodic sweep visits at most
SWEEP_CONNECTIONS_PER_TICK connections per tick, continuing round-robin where it stopped,
so a tick's cost is bounded whatever the number of connections. Each visit
(Connection.sweep) closes a connection
- whose frame began arriving more than frame_read_timeout_ms ago and is still incomplete
  (a slowloris sending a byte a second), or
- with no request in flight that received nothing for connections_max_idle_ms
  (connections.max.idle.ms),
and measures its unsent responses for the byte budget (frame_budget.py). A connection
keeps the times the sweep reads (its last read, kept anyway for the queue-time metric, and
when its partial frame began), so the request path pays nothing for the deadlines. The tick
is a tenth of the shorter deadline, between 10 ms and 1 s: a deadline is enforced within a
tick of passing when there are at most SWEEP_CONNECTIONS_PER_TICK connections, and within a
round of ticks otherwise.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Collection
from typing import Protocol

from ..config import Config, per_ip_overrides
from ..observability.logging import get_logger
from ..observability.metrics import ServerMetrics

log = get_logger("groupcoord.connection")

# ~1 us per visit: a tick costs the loop about 1 ms at most.
SWEEP_CONNECTIONS_PER_TICK = 1000
SWEEP_TICK_S_MIN = 0.01
SWEEP_TICK_S_MAX = 1.0


class Swept(Protocol):
    """What the sweep uses of a connection (connection.Connection)."""

    def sweep(self, now: float, idle_s: float, frame_read_s: float) -> str | None: ...


class ConnectionLimits:
    """Per-address connection counts, and the sweep that enforces the deadlines."""

    def __init__(
        self,
        config: Config,
        metrics: ServerMetrics,
        connections: Collection[Swept],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.connections_max = config.connections_max
        self.per_ip_max = config.connections_max_per_ip
        self.per_ip_overrides = per_ip_overrides(config.connections_max_per_ip_overrides)
        self.idle_s = config.connections_max_idle_ms / 1000
        self.frame_read_s = config.frame_read_timeout_ms / 1000
        self.tick_s = min(
            SWEEP_TICK_S_MAX, max(SWEEP_TICK_S_MIN, min(self.idle_s, self.frame_read_s) / 10)
        )
        self.metrics = metrics
        self.clock = clock
        self._connections = connections
        self.per_ip: dict[str, int] = {}
        # Connections admitted and not yet released (the sum of per_ip).
        self.admitted = 0
        # Refusals and deadline closes since the last summary line.
        self._refused: Counter[tuple[str, str]] = Counter()
        self._expired: Counter[str] = Counter()
        # The round being swept: a snapshot of the connections, and how far it got.
        self._round: list[Swept] = []
        self._next = 0
        self._timer: asyncio.TimerHandle | None = None

    # admission ---------------------------------------------------------------------------

    def admit(self, host: str, open_connections: int | None = None) -> str | None:
        """Count a new connection from `host`, or say why it is refused (counted and logged
        with the next sweep's summary). `open_connections` defaults to the connections
        admitted and not yet released, those being set up included."""
        if open_connections is None:
            open_connections = self.admitted
        if open_connections >= self.connections_max:
            reason = "connections_max"
        else:
            count = self.per_ip.get(host, 0)
            if count < self.per_ip_overrides.get(host, self.per_ip_max):
                self.per_ip[host] = count + 1
                self.admitted += 1
                return None
            reason = "connections_max_per_ip"
        self._refused[reason, host] += 1
        self.metrics.connection_errors.labels(reason).inc()
        return reason

    def release(self, host: str) -> None:
        """An admitted connection from `host` is gone (once per admission)."""
        count = self.per_ip.get(host, 0)
        if count > 1:
            self.per_ip[host] = count - 1
        elif count:
            del self.per_ip[host]
        else:
            return  # never admitted: a caller's bug, but no count may go below zero
        self.admitted -= 1

    # the sweep ---------------------------------------------------------------------------

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.tick_s, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._summarise()

    def _tick(self) -> None:
        try:
            self.sweep_once()
        finally:
            self._timer = asyncio.get_running_loop().call_later(self.tick_s, self._tick)

    def sweep_once(self) -> None:
        """Visit the next SWEEP_CONNECTIONS_PER_TICK connections of the round (a new round,
        over the connections open now, once one ends), then log what was refused or
        closed since the last tick."""
        if self._next >= len(self._round):
            self._round = list(self._connections)
            self._next = 0
        end = min(len(self._round), self._next + SWEEP_CONNECTIONS_PER_TICK)
        now = self.clock()
        idle_s, frame_read_s = self.idle_s, self.frame_read_s
        for connection in self._round[self._next : end]:
            reason = connection.sweep(now, idle_s, frame_read_s)
            if reason is not None:
                self._expired[reason] += 1
        self._next = end
        if end >= len(self._round):
            self._round = []  # drop the references to closed connections early
            self._next = 0
        self._summarise()

    def _summarise(self) -> None:
        if self._refused:
            for (reason, host), count in self._refused.items():
                log.warning("connections refused", reason=reason, address=host, count=count)
            self._refused.clear()
        if self._expired:
            for reason, count in self._expired.items():
                log.info("connections closed", reason=reason, count=count)
            self._expired.clear()

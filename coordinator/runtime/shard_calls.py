"""Requests run as events of the shard that owns their group, and their answers.

A request's event runs at once on its shard (ShardRunner.call) and the shard replies with a
message (the groups' dataclasses), which the caller's `respond` turns into the response.
When the shard answered synchronously (nothing written and nothing in flight: most
heartbeats), the response is returned at once; otherwise a Pending of it is returned, set
when the records the answer depends on are durable. That is the gateway's "async" form:
no coroutine, future or await on the way, and a caller that needs several answers waits
for them with `when_all`. A shard that is loading answers `failed(COORDINATOR_LOAD_IN_
PROGRESS)`; one that failed or closed, or a write before the answer that failed (a
StorageFailure delivered to the reply), answers `failed(NOT_COORDINATOR)`, and the client
looks the coordinator up again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from groupcoord.protocol.errors import ErrorCode

from ..groups.result import Result
from ..groups.shard import GroupShard
from .log_runner import CoordinatorShardRunner, NotActive, ShardState, StorageFailure
from .pending import Pending
from .runner import ShardRunner

# An event of a request: `event(shard, call, now_ms)` runs it with `call.request`, handing
# `call` to the shard as the reply.
ShardEvent = Callable[[GroupShard, "ShardCall", int], Result]


def not_active_error(e: NotActive) -> ErrorCode:
    if e.state is ShardState.LOADING:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return ErrorCode.NOT_COORDINATOR


class ShardCall(Pending):
    """One request run on a shard: its argument (`request`), the reply the shard is handed
    (calling it with the shard's answer sets the response, `respond(answer)`, or
    `failed(NOT_COORDINATOR)` for a StorageFailure), and the Pending of the response. One
    object per request, rather than a closure binding the request, a Pending and a reply."""

    __slots__ = ("request", "_respond", "_failed")

    def __init__(
        self, request: Any, respond: Callable[[Any], Any], failed: Callable[[ErrorCode], Any]
    ) -> None:
        # Pending's fields set here: no super().__init__ call per request.
        self.done = False
        self.value = None
        self.listener = None
        self._future = None
        self.request = request
        self._respond = respond
        self._failed = failed

    def __call__(self, answer: Any) -> None:
        self.set(
            self._failed(ErrorCode.NOT_COORDINATOR)
            if isinstance(answer, StorageFailure)
            else self._respond(answer)
        )


def run_on_shard(
    runner: CoordinatorShardRunner,
    event: Callable[[Any, ShardCall, int], Result],
    call: ShardCall,
    read_at: float,
) -> Any:
    """Run `event` for `call` on `runner`'s shard: the response when the shard answered at
    once, else `call` (a Pending of it); `failed(...)` when the shard is not active.
    `read_at` (time.perf_counter): when the request was read, for the queue-time metric.
    Any family of shards: the group coordinator's, the transaction coordinator's."""
    try:
        runner.call(event, call, read_at)
    except NotActive as e:
        return call._failed(not_active_error(e))
    return call.value if call.done else call


def when_all(parts: list[Any], respond: Callable[[list[Any]], Any]) -> Any:
    """`respond(answers)` once every answer in `parts` is in (some are Pendings): the
    response at once when none is pending, else an awaitable of it."""
    if all(not isinstance(p, Pending) for p in parts):
        return respond(parts)

    async def wait() -> Any:
        return respond([await p if isinstance(p, Pending) else p for p in parts])

    return wait()


def run_by_shard(
    runner_for: Callable[[str], ShardRunner],
    group_ids: Iterable[str],
    event: ShardEvent,
    argument: Any,
    read_at: float,
    by_group: Callable[[Any], dict[str, Any]],
    respond: Callable[[dict[str, Any]], Any],
) -> Any:
    """One event per shard owning some of `group_ids` (each id once, in order): `event`
    runs with `call.request` = (that shard's ids, `argument`); its answer becomes
    {group id: answer} through `by_group`, or {group id: error} for every id of a shard
    that cannot answer. `respond(every group's answer)` once all shards answered
    (`when_all`)."""
    by_shard: dict[int, list[str]] = {}
    runners: dict[int, ShardRunner] = {}
    for group_id in dict.fromkeys(group_ids):
        runner = runner_for(group_id)
        runners[runner.shard_id] = runner
        by_shard.setdefault(runner.shard_id, []).append(group_id)
    parts = [
        run_on_shard(
            runners[shard_id],
            event,
            ShardCall((ids, argument), by_group, _ErrorForEach(ids)),
            read_at,
        )
        for shard_id, ids in by_shard.items()
    ]

    def merged(answers: list[dict[str, Any]]) -> Any:
        merged_answers: dict[str, Any] = {}
        for answer in answers:
            merged_answers.update(answer)
        return respond(merged_answers)

    return when_all(parts, merged)


class _ErrorForEach:
    """A shard's error as every one of its groups' answer."""

    __slots__ = ("ids",)

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    def __call__(self, error: ErrorCode) -> dict[str, ErrorCode]:
        return dict.fromkeys(self.ids, error)

"""The group coordinator's gateway (Kafka's GroupCoordinatorService): the only way the network
layer (coordinator/server/) reaches groups and offsets.

Theory of operation. One typed method per request kind. Arguments are group ids and the
shard's messages (the groups' dataclasses, re-exported by runtime/group_messages.py), the
request's read time (`read_at`, time.perf_counter of the read that brought it, for the
queue-time metric) and, inside the messages, the client's identity: never a connection.
Each method runs as one event on the shard that owns the group (ShardRunner.call), reads
included: DescribeGroups, ListGroups and ConsumerGroupDescribe read after the writes before
them, and are answered once those are durable (or fail with them).

The caller passes `respond` (the shard's answer -> the response) and `failed` (an error ->
the response) and gets the response. Kept from the network layer's zero-await convention
(shard_calls.py): the response itself when the shard answered synchronously, else a Pending
of it, set when the records it depends on are durable -- the gateway's "async" form. The
methods that ask several shards return the response or an awaitable of it. Errors every
method shares: COORDINATOR_LOAD_IN_PROGRESS while the group's shard loads, NOT_COORDINATOR
when it failed or closed, or when a write the answer waited for failed.

The two fast paths (server/fast_paths.py) are methods too: `commit_offsets` takes the
OffsetCommit read from the raw frame as the decoded one, and
`steady_consumer_group_heartbeat` checks that a heartbeat is steady and answers it in one
shard event, so nothing can run between the check and the answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from groupcoord.protocol.errors import ErrorCode

from ..group_admin import GroupConfigEntry, GroupConfigError
from ..groups.config import GROUP_CONFIGS, InvalidGroupConfig, effective_settings
from ..groups.result import Result
from ..groups.shard import GroupShard
from ..observability.logging import get_logger
from .group_config_store import GroupConfigStore
from .group_messages import (
    ClassicHeartbeatRequest,
    ClassicHeartbeatResponse,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    DeleteGroupsResponse,
    DescribedConsumerGroup,
    DescribedGroup,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
)
from .pending import Pending
from .runner import NotActive, ShardState, StorageFailure
from .service import CoordinatorService
from .shard_calls import ShardCall, not_active_error, run_by_shard, run_on_shard, when_all

log = get_logger("groupcoord.coordinator")

R = TypeVar("R")


class GroupCoordinatorGateway:
    """The typed door into the group coordinator; implements group_admin.GroupAdmin."""

    __slots__ = ("_service", "_runner_for", "_group_configs")

    def __init__(self, service: CoordinatorService, group_configs: GroupConfigStore) -> None:
        self._service = service
        self._runner_for = service.runner_for
        self._group_configs = group_configs

    # -- transactions ------------------------------------------------------------------------

    def complete_transaction(
        self,
        offsets_partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        resumed: bool = False,
        transaction_version: int = 0,
    ) -> Awaitable[ErrorCode]:
        """The transaction marker for `offsets_partition` (the shard index: Kafka's
        __consumer_offsets partition) from the transaction coordinator: commits (`commit`)
        or drops the pending transactional offsets of `producer_id` in every group of that
        shard, writing the marker to the shard's log (a control batch, as Kafka's); the
        awaitable is set once it is durable. Errors: NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS as every method (NOT_COORDINATOR also for a shard
        index this server does not have, or a write that failed); INVALID_PRODUCER_EPOCH
        for an epoch older than the producer's last one in that shard (nothing written).
        `resumed`: a job resumed after a crash, which skips a marker the shard holds.
        `transaction_version`: the marker's (2: KIP-890's stricter epoch check, as Kafka's
        log layer applies it to a version 2 marker)."""
        done = Pending()
        runners = self._service.runners
        if not 0 <= offsets_partition < len(runners):
            done.set(ErrorCode.NOT_COORDINATOR)
            return done
        try:
            runners[offsets_partition].complete_transaction(
                producer_id,
                producer_epoch,
                commit,
                _MarkerReply(done),
                resumed,
                transaction_version,
            )
        except NotActive as e:
            done.set(not_active_error(e))
        return done

    def transaction_ongoing(self, group_id: str, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer has a transaction open at `producer_epoch` in the group's
        shard (a transactional offset of it pending there, replayed: written or being
        written): Kafka's hasOngoingTransaction of the __consumer_offsets partition, which
        makes TxnOffsetCommit skip asking the transaction coordinator (KIP-890's sentinel
        verification guard). False while the shard is not active."""
        runner = self._runner_for(group_id)
        if runner.state is not ShardState.ACTIVE:
            return False
        return runner.shard.offsets.pending.ongoing(producer_id, producer_epoch)

    def txn_commit_offsets(
        self,
        request: TxnOffsetCommitRequest,
        read_at: float,
        respond: Callable[[OffsetCommitResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        """TxnOffsetCommit: the OffsetCommit records of the accepted partitions, written as
        the producer's transactional batch and pending until its marker; the shard's
        errors are txn_commit.py's."""
        call = ShardCall(request, respond, failed)
        try:
            self._runner_for(request.group_id).call_transactional(
                _txn_commit_offsets, call, read_at, request.producer_id, request.producer_epoch
            )
        except NotActive as e:
            return failed(not_active_error(e))
        return call.value if call.done else call

    # -- offsets -----------------------------------------------------------------------------

    def commit_offsets(
        self,
        request: OffsetCommitRequest,
        read_at: float,
        respond: Callable[[OffsetCommitResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        """OffsetCommit (decoded, or read from the raw frame): OffsetCommit records for the
        accepted partitions; the shard's errors are offsets.py's."""
        return run_on_shard(  # type: ignore[no-any-return]
            self._runner_for(request.group_id),
            _commit_offsets,
            ShardCall(request, respond, failed),
            read_at,
        )

    def fetch_offsets(
        self,
        request: OffsetFetchRequest,
        read_at: float,
        respond: Callable[[OffsetFetchResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        """OffsetFetch of one group; writes nothing."""
        return run_on_shard(  # type: ignore[no-any-return]
            self._runner_for(request.group_id),
            _fetch_offsets,
            ShardCall(request, respond, failed),
            read_at,
        )

    def delete_offsets(
        self,
        group_id: str | None,
        partitions: Mapping[str, list[int]],
        read_at: float,
        respond: Callable[[OffsetDeleteResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        """OffsetDelete of `partitions` (topic -> indexes): tombstones for their offsets.
        A null or empty group id: INVALID_GROUP_ID."""
        if not group_id:
            return failed(ErrorCode.INVALID_GROUP_ID)
        return run_on_shard(  # type: ignore[no-any-return]
            self._runner_for(group_id),
            _delete_offsets,
            ShardCall((group_id, partitions), respond, failed),
            read_at,
        )

    def delete_groups(
        self,
        group_ids: Iterable[str],
        read_at: float,
        respond: Callable[[dict[str, ErrorCode]], R],
    ) -> R | Awaitable[R]:
        """DeleteGroups: one event per shard owning some of the groups (each once); offset
        and group tombstones. `respond({group id: error})`, a shard's error standing for
        each of its groups."""
        return run_by_shard(  # type: ignore[no-any-return]
            self._runner_for, group_ids, _delete_groups, None, read_at, _deleted, respond
        )

    # -- classic groups ----------------------------------------------------------------------

    def join_group(
        self,
        request: JoinGroupRequest,
        read_at: float,
        respond: Callable[[JoinGroupResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        """JoinGroup: parked until the join phase completes, or answered at once
        (classic/manager.py). A null or empty group id: INVALID_GROUP_ID."""
        return self._classic(request.group_id, _join_group, request, read_at, respond, failed)

    def sync_group(
        self,
        request: SyncGroupRequest,
        read_at: float,
        respond: Callable[[SyncGroupResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        """SyncGroup: the leader's assignment persisted, every parked member answered."""
        return self._classic(request.group_id, _sync_group, request, read_at, respond, failed)

    def heartbeat(
        self,
        request: ClassicHeartbeatRequest,
        read_at: float,
        respond: Callable[[ClassicHeartbeatResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        """Heartbeat (classic protocol): refreshes the member's session; writes nothing."""
        return self._classic(request.group_id, _heartbeat, request, read_at, respond, failed)

    def leave_group(
        self,
        request: LeaveGroupRequest,
        read_at: float,
        respond: Callable[[LeaveGroupResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        """LeaveGroup: removes the members, then rebalances."""
        return self._classic(request.group_id, _leave_group, request, read_at, respond, failed)

    def _classic(
        self,
        group_id: str | None,
        event: Callable[[GroupShard, ShardCall, int], Result],
        request: Any,
        read_at: float,
        respond: Callable[[Any], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        if not group_id:
            return failed(ErrorCode.INVALID_GROUP_ID)
        return run_on_shard(  # type: ignore[no-any-return]
            self._runner_for(group_id), event, ShardCall(request, respond, failed), read_at
        )

    # -- consumer groups (KIP-848) -----------------------------------------------------------

    def consumer_group_heartbeat(
        self,
        request: ConsumerHeartbeatRequest,
        read_at: float,
        respond: Callable[[ConsumerHeartbeatResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending:
        """ConsumerGroupHeartbeat: the consumer-group records of the shard's pipeline
        (consumer/manager.py); a blank group id is answered by the request validation
        (INVALID_REQUEST, with Kafka's message)."""
        if not (request.group_id or "").strip():
            # Nothing to route by: the validation reads only the configuration, which every
            # shard shares, so the first shard's answer is any shard's.
            invalid = self._service.runners[0].shard.consumer_group_heartbeat_error(request)
            assert invalid is not None
            return respond(
                ConsumerHeartbeatResponse(error_code=invalid.error, error_message=invalid.message)
            )
        return run_on_shard(  # type: ignore[no-any-return]
            self._runner_for(request.group_id),
            _consumer_group_heartbeat,
            ShardCall(request, respond, failed),
            read_at,
        )

    def steady_consumer_group_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        read_at: float,
        respond: Callable[[ConsumerHeartbeatResponse], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Pending | None:
        """A ConsumerGroupHeartbeat that sets no optional field (the fast path's): checked
        and, when steady, answered in one event of the group's shard (the member's session
        re-armed, nothing written). None when it is not steady or the shard is not active:
        the caller then takes the full path (`consumer_group_heartbeat`), which answers
        whatever this declined."""
        call = _SteadyHeartbeat(
            group_id, member_id, member_epoch, instance_id, client_id, client_host, respond, failed
        )
        try:
            self._runner_for(group_id).call(_steady_heartbeat, call, read_at)
        except NotActive:
            return None
        if call.declined:
            return None
        return call.value if call.done else call

    def consumer_group_describe(
        self,
        group_ids: Iterable[str],
        read_at: float,
        respond: Callable[[dict[str, DescribedConsumerGroup | ErrorCode]], R],
    ) -> R | Awaitable[R]:
        """ConsumerGroupDescribe: one read event per shard owning some of the groups (each
        once). `respond({group id: described group, or the error of its shard})`."""
        return run_by_shard(  # type: ignore[no-any-return]
            self._runner_for,
            group_ids,
            _consumer_group_describe,
            None,
            read_at,
            _by_group_id,
            respond,
        )

    # -- reads of every group ----------------------------------------------------------------

    def describe_groups(
        self,
        group_ids: Iterable[str],
        api_version: int,
        read_at: float,
        respond: Callable[[dict[str, DescribedGroup | ErrorCode]], R],
    ) -> R | Awaitable[R]:
        """DescribeGroups (`api_version`: a missing group is GROUP_ID_NOT_FOUND from v6):
        one read event per shard owning some of the groups (each once), as
        ConsumerGroupDescribe. `respond({group id: described group, or the error of its
        shard})`; a consumer group is Dead here, as in Kafka."""
        return run_by_shard(  # type: ignore[no-any-return]
            self._runner_for,
            group_ids,
            _describe_groups,
            api_version,
            read_at,
            _by_group_id,
            respond,
        )

    def list_groups(
        self,
        states_filter: list[str],
        types_filter: list[str],
        read_at: float,
        respond: Callable[[list[ListedGroup]], R],
        failed: Callable[[ErrorCode], R],
    ) -> R | Awaitable[R]:
        """ListGroups: one read event per active shard, `respond(every group listed)`, in
        shard order. A shard that failed (or whose write before the read failed) is
        skipped: Kafka swallows NOT_COORDINATOR per partition. While any shard loads,
        `failed(COORDINATOR_LOAD_IN_PROGRESS)`: Kafka fails the whole listing with it, and
        clients retry."""
        runners = self._service.runners
        if any(runner.state is ShardState.LOADING for runner in runners):
            return failed(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        filters = (states_filter, types_filter)
        parts = [
            run_on_shard(runner, _list_groups, ShardCall(filters, _same, _none_listed), read_at)
            for runner in runners
            if runner.state is ShardState.ACTIVE
        ]
        return when_all(  # type: ignore[no-any-return]
            parts, lambda listed: respond([group for part in listed for group in part])
        )

    # -- what the data plane asks (group_admin.GroupAdmin) -----------------------------------

    def topics_deleted(self, topics: Mapping[str, uuid.UUID]) -> None:
        """Kafka's onPartitionsDeleted, after DeleteTopics: every active shard writes
        tombstones for the offsets of the deleted topics (OffsetManager.topics_deleted), so
        a topic re-created under the same name is not read from a stale committed offset.
        A shard that is not active (loading, failed) keeps them, as in Kafka; logged."""
        for runner in self._service.runners:
            if runner.state is not ShardState.ACTIVE:
                log.warning(
                    "offsets of deleted topics kept: shard not active",
                    shard=runner.shard_id,
                    state=runner.state.name,
                    topics=sorted(topics),
                )
                continue
            runner.call(_topics_deleted, topics)

    def group_configs(self, group_id: str) -> list[GroupConfigEntry]:
        """Every dynamic group config of `group_id`, by name: its override else the
        broker's value."""
        group_config = self._service.group_config
        overrides = self._group_configs.overrides(group_id)
        entries = []
        for name in sorted(GROUP_CONFIGS):
            spec = GROUP_CONFIGS[name]
            broker_value = spec.broker_value(group_config)
            value = overrides.get(name)
            entries.append(
                GroupConfigEntry(
                    name,
                    broker_value if value is None else value,
                    broker_value,
                    value is not None,
                    spec.kind,
                    spec.doc,
                )
            )
        return entries

    def group_config_overrides(self, group_id: str) -> Mapping[str, str]:
        return self._group_configs.overrides(group_id)

    def alter_group_configs(
        self, group_id: str, overrides: Mapping[str, str], validate_only: bool
    ) -> None:
        """Make `overrides` the group's after Kafka's checks (names, bounds from the
        broker's settings, heartbeat below session timeout), persisted before the return
        unless validate_only. Raises GroupConfigError with Kafka's message; ValueError when
        too many groups have configs; OSError when they cannot be saved."""
        try:
            effective_settings(self._service.group_config, overrides)
        except InvalidGroupConfig as e:
            raise GroupConfigError(str(e)) from None
        if not validate_only:
            self._group_configs.replace(group_id, overrides)


# -- the events: module functions, so that no closure is made per request ---------------------


def _commit_offsets(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.commit_offsets(call.request, call, now_ms)


def _txn_commit_offsets(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.txn_commit_offsets(call.request, call, now_ms)


class _MarkerReply:
    """A marker's answer: the shard's error code, or NOT_COORDINATOR when the write
    failed."""

    __slots__ = ("done",)

    def __init__(self, done: Pending) -> None:
        self.done = done

    def __call__(self, answer: ErrorCode | StorageFailure) -> None:
        self.done.set(ErrorCode.NOT_COORDINATOR if isinstance(answer, StorageFailure) else answer)


def _fetch_offsets(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.fetch_offsets(call.request, call, now_ms)


def _delete_offsets(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    group_id, partitions = call.request
    return shard.delete_offsets(group_id, partitions, call, now_ms)


def _delete_groups(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.delete_groups(call.request[0], call, now_ms)


def _join_group(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.join_group(call.request, call, now_ms)


def _sync_group(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.sync_group(call.request, call, now_ms)


def _heartbeat(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.heartbeat(call.request, call, now_ms)


def _leave_group(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.leave_group(call.request, call, now_ms)


def _consumer_group_heartbeat(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.consumer_group_heartbeat(call.request, call, now_ms)


def _consumer_group_describe(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    return shard.consumer_group_describe(call.request[0], call)


def _describe_groups(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    group_ids, api_version = call.request
    return shard.describe_groups(group_ids, api_version, call)


def _list_groups(shard: GroupShard, call: ShardCall, now_ms: int) -> Result:
    states_filter, types_filter = call.request
    return shard.list_groups(states_filter, types_filter, call)


def _topics_deleted(shard: GroupShard, topics: Mapping[str, uuid.UUID], now_ms: int) -> Result:
    return shard.topics_deleted(topics, now_ms)


class _SteadyHeartbeat(ShardCall):
    """A steady ConsumerGroupHeartbeat's ids, and its answer (`declined` when the shard does
    not take it as steady): one object per heartbeat."""

    __slots__ = (
        "group_id",
        "member_id",
        "member_epoch",
        "instance_id",
        "client_id",
        "client_host",
        "declined",
    )

    def __init__(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        respond: Callable[[Any], Any],
        failed: Callable[[ErrorCode], Any],
    ) -> None:
        self.done = False
        self.value = None
        self.listener = None
        self._future = None
        self.request = None
        self._respond = respond
        self._failed = failed
        self.group_id = group_id
        self.member_id = member_id
        self.member_epoch = member_epoch
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.declined = False


def _steady_heartbeat(shard: GroupShard, call: _SteadyHeartbeat, now_ms: int) -> Result:
    result = Result()
    answer = shard.steady_consumer_group_heartbeat(
        call.group_id,
        call.member_id,
        call.member_epoch,
        call.instance_id,
        call.client_id,
        call.client_host,
    )
    if answer is None:
        call.declined = True  # an empty Result: nothing written, nobody answered
    else:
        result.reply(call, answer)
    return result


def _deleted(answer: DeleteGroupsResponse) -> dict[str, ErrorCode]:
    return {x.group_id: x.error for x in answer.results}


def _by_group_id(described: list[Any]) -> dict[str, Any]:
    return {d.group_id: d for d in described}


def _same(listed: list[ListedGroup]) -> list[ListedGroup]:
    return listed


def _none_listed(error: ErrorCode) -> list[ListedGroup]:
    return []


__all__ = ["GroupCoordinatorGateway"]

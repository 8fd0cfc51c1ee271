"""The transaction coordinator over real logs (TxnCoordinatorService, its gateway) with the
marker router, whose two doors to the other sides (write_txn_marker, the group
coordinator's complete_transaction) are fakes here: a transaction completes once every
marker is written, retriable errors are retried, a deleted topic counts as done, a fenced
epoch stops the markers, and a coordinator started on the logs of one that died in
PrepareCommit (never closed) resumes the markers and completes."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from groupcoord.coordinator.runtime.txn_gateway import TxnCoordinatorGateway
from groupcoord.coordinator.runtime.txn_service import TxnCoordinatorService
from groupcoord.coordinator.server.txn_markers import TxnMarkerRouter
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import GroupCommitter, LogConfig

E = ErrorCode
OFFSETS = "__consumer_offsets"


class FakeSides:
    """write_txn_marker and complete_transaction: each call recorded; `answers` (per
    partition, a list of errors, the last one repeated) say what they answer; a partition
    in `blocked` never answers; one in `gates` answers once its event is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, int, bool]] = []
        self.answers: dict[tuple[str, int], list[ErrorCode]] = {}
        self.blocked: set[tuple[str, int]] = set()
        self.gates: dict[tuple[str, int], asyncio.Event] = {}

    async def _answer(self, topic: str, partition: int) -> ErrorCode:
        if (topic, partition) in self.blocked:
            await asyncio.Event().wait()
        if (gate := self.gates.get((topic, partition))) is not None:
            await gate.wait()
        answers = self.answers.get((topic, partition), [E.NONE])
        return answers.pop(0) if len(answers) > 1 else answers[0]

    async def write_marker(
        self,
        ctx: Any,
        topic: str,
        partition: int,
        pid: int,
        epoch: int,
        coord: int,
        commit: bool,
        transaction_version: int = 0,
    ) -> ErrorCode:
        self.calls.append((topic, partition, pid, epoch, commit))
        return await self._answer(topic, partition)

    async def complete_offsets(
        self,
        partition: int,
        pid: int,
        epoch: int,
        commit: bool,
        resumed: bool = False,
        transaction_version: int = 0,
    ) -> ErrorCode:
        self.calls.append((OFFSETS, partition, pid, epoch, commit))
        return await self._answer(OFFSETS, partition)


class Topics:
    def __init__(self, *names: str) -> None:
        self.names = set(names)

    def get(self, name: str) -> Any:
        return SimpleNamespace(partitions=[0, 1, 2]) if name in self.names else None


class Coordinator:
    def __init__(
        self,
        data: Path,
        committer: GroupCommitter,
        sides: FakeSides,
        topics: Topics,
        concurrent_wait_ms: int = 0,
    ):
        self.service = TxnCoordinatorService(
            data,
            2,
            LogConfig(segment_bytes_max=1 << 20),
            committer,
            itertools.count(1000).__next__,
            900_000,
        )
        self.gateway = TxnCoordinatorGateway(self.service, concurrent_wait_ms)
        ctx = SimpleNamespace(txns=self.gateway, topics=topics, groups=None)
        self.router = TxnMarkerRouter(ctx, sides.write_marker, sides.complete_offsets)  # type: ignore[arg-type]
        self.service.set_marker_sink(self.router.submit)

    async def state(self, txn: str = "tx") -> Any:
        return (await self.gateway.describe_transactions([txn], 0.0))[txn]

    async def wait_state(self, name: str, txn: str = "tx") -> Any:
        for _ in range(2000):
            described = await self.state(txn)
            if described.state == name:
                return described
            await asyncio.sleep(0.005)
        raise AssertionError(f"{txn} never reached {name}: {described}")

    async def open_transaction(self, *partitions: tuple[str, int]) -> tuple[int, int]:
        answer = await self.gateway.init_producer_id("tx", 60_000, -1, -1, 0.0)
        assert answer.error is E.NONE
        pid, epoch = answer.producer_id, answer.producer_epoch
        assert await self.gateway.add_partitions("tx", pid, epoch, partitions, 0.0) is E.NONE
        return pid, epoch


async def test_commit_writes_every_marker_then_completes(tmp_path: Path) -> None:
    committer = GroupCommitter()
    sides = FakeSides()
    sides.answers[("t", 1)] = [E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR, E.NONE]
    coordinator = Coordinator(tmp_path, committer, sides, Topics("t"))
    await coordinator.service.load()
    pid, epoch = await coordinator.open_transaction(("t", 0), ("t", 1), (OFFSETS, 7))
    assert await coordinator.gateway.end_transaction("tx", pid, epoch, True, 0.0) is E.NONE
    done = await coordinator.wait_state("CompleteCommit")
    assert done.partitions == ()
    await coordinator.router.wait_idle()
    assert sorted(set(sides.calls)) == [
        (OFFSETS, 7, pid, epoch, True),
        ("t", 0, pid, epoch, True),
        ("t", 1, pid, epoch, True),
    ]
    assert sides.calls.count(("t", 1, pid, epoch, True)) == 3  # retried until written
    assert sides.calls.count(("t", 0, pid, epoch, True)) == 1
    assert coordinator.router.completed == 1
    # The next transaction may begin: EndTxn retried answers NONE, InitProducerId bumps.
    assert await coordinator.gateway.end_transaction("tx", pid, epoch, True, 0.0) is E.NONE
    answer = await coordinator.gateway.init_producer_id("tx", 60_000, -1, -1, 0.0)
    assert (answer.producer_id, answer.producer_epoch) == (pid, epoch + 1)
    await coordinator.service.close()
    await committer.close()


async def test_deleted_topic_counts_as_written_and_fenced_epoch_stops(tmp_path: Path) -> None:
    committer = GroupCommitter()
    sides = FakeSides()
    topics = Topics("t", "gone")
    coordinator = Coordinator(tmp_path, committer, sides, topics)
    await coordinator.service.load()
    pid, epoch = await coordinator.open_transaction(("gone", 0), ("t", 0))
    sides.answers[("gone", 0)] = [E.UNKNOWN_TOPIC_OR_PARTITION]
    sides.answers[("t", 0)] = [E.NOT_LEADER_OR_FOLLOWER]
    assert await coordinator.gateway.end_transaction("tx", pid, epoch, False, 0.0) is E.NONE
    await asyncio.sleep(0.05)
    assert (await coordinator.state()).state == "PrepareAbort"  # retrying both
    topics.names.discard("gone")  # deleted: its marker is no longer needed
    sides.answers[("t", 0)] = [E.NONE]
    await coordinator.wait_state("CompleteAbort")
    # A partition that fences the producer epoch stops the markers: Prepare stays.
    pid, epoch = await coordinator.open_transaction(("t", 2))
    sides.answers[("t", 2)] = [E.INVALID_PRODUCER_EPOCH]
    assert await coordinator.gateway.end_transaction("tx", pid, epoch, True, 0.0) is E.NONE
    await coordinator.router.wait_idle()
    assert (await coordinator.state()).state == "PrepareCommit"
    await coordinator.service.close()
    await committer.close()


async def test_restart_in_prepare_commit_resumes_the_markers(tmp_path: Path) -> None:
    """The first coordinator dies with PrepareCommit durable and one marker of two written
    (it is never closed: its files stay as they were). The second loads its logs, hands the
    transaction to its router, which writes every marker and CompleteCommit."""
    committer = GroupCommitter()
    sides = FakeSides()
    sides.blocked.add(("t", 1))
    first = Coordinator(tmp_path, committer, sides, Topics("t"))
    await first.service.load()
    pid, epoch = await first.open_transaction(("t", 0), ("t", 1))
    assert await first.gateway.end_transaction("tx", pid, epoch, True, 0.0) is E.NONE
    await asyncio.sleep(0.05)
    assert (await first.state()).state == "PrepareCommit"
    assert ("t", 0, pid, epoch, True) in sides.calls

    resumed = FakeSides()
    second = Coordinator(tmp_path, GroupCommitter(), resumed, Topics("t"))
    await second.service.load()
    done = await second.wait_state("CompleteCommit")
    assert (done.producer_id, done.producer_epoch) == (pid, epoch)
    assert sorted(resumed.calls) == [("t", 0, pid, epoch, True), ("t", 1, pid, epoch, True)]
    await second.service.close()
    await first.router.close()


async def test_timed_out_transaction_is_aborted_with_the_epoch_bumped(tmp_path: Path) -> None:
    committer = GroupCommitter()
    sides = FakeSides()
    coordinator = Coordinator(tmp_path, committer, sides, Topics("t"))
    await coordinator.service.load()
    now = [1_000_000]
    for runner in coordinator.service.runners:
        runner.clock_ms = lambda: now[0]
    answer = await coordinator.gateway.init_producer_id("tx", 1_000, -1, -1, 0.0)
    pid = answer.producer_id
    assert await coordinator.gateway.add_partitions("tx", pid, 0, [("t", 0)], 0.0) is E.NONE
    now[0] += 1_001
    coordinator.service.abort_timed_out()
    done = await coordinator.wait_state("CompleteAbort")
    assert (done.producer_id, done.producer_epoch) == (pid, 1)
    await coordinator.router.wait_idle()
    assert sides.calls == [("t", 0, pid, 1, False)]
    assert await coordinator.gateway.end_transaction("tx", pid, 0, True, 0.0) is E.PRODUCER_FENCED
    await coordinator.service.close()
    await committer.close()


async def test_complete_record_rides_on_the_next_round(tmp_path: Path) -> None:
    """Issue 18 item 1: CompleteCommit asks for no fsync round of its own (nothing waits
    on it; a crash before it is durable leaves PrepareCommit, which the load completes):
    the marker router is answered once it is written, no round runs for it, and the next
    round (here the one a read starts: reads wait for pending writes) makes it durable. A
    close with it still pending flushes it (no hang), and a restart reads it back."""
    committer = GroupCommitter()
    sides = FakeSides()
    coordinator = Coordinator(tmp_path, committer, sides, Topics("t"))
    await coordinator.service.load()
    pid, epoch = await coordinator.open_transaction(("t", 0), (OFFSETS, 1))
    assert await coordinator.gateway.end_transaction("tx", pid, epoch, True, 0.0) is E.NONE
    rounds = committer.rounds
    await coordinator.router.wait_idle()
    assert coordinator.router.completed == 1
    for _ in range(20):  # loop turns in which a round for it would have run
        await asyncio.sleep(0.005)
    assert committer.rounds == rounds
    assert (await coordinator.state()).state == "CompleteCommit"
    assert committer.rounds == rounds + 1
    # The next transaction, completed and closed at once: close flushes it.
    assert await coordinator.gateway.add_partitions("tx", pid, epoch, [("t", 0)], 0.0) is E.NONE
    assert await coordinator.gateway.end_transaction("tx", pid, epoch, False, 0.0) is E.NONE
    await coordinator.router.wait_idle()
    assert coordinator.router.completed == 2
    async with asyncio.timeout(30):
        await coordinator.service.close()
    await committer.close()
    committer = GroupCommitter()
    restarted = Coordinator(tmp_path, committer, FakeSides(), Topics("t"))
    await restarted.service.load()
    assert (await restarted.state()).state == "CompleteAbort"
    await restarted.service.close()
    await committer.close()


async def test_add_during_markers_waits_for_the_completion(tmp_path: Path) -> None:
    """The next transaction's AddPartitionsToTxn while the previous one's markers are being
    written: with concurrent_wait_ms it is answered NONE once the transaction completes
    (not CONCURRENT_TRANSACTIONS, which the client would retry only 20 ms later); past the
    wait, or with 0 (Kafka's), CONCURRENT_TRANSACTIONS."""
    committer = GroupCommitter()
    sides = FakeSides()
    gate = sides.gates[("t", 1)] = asyncio.Event()
    coordinator = Coordinator(tmp_path, committer, sides, Topics("t"), concurrent_wait_ms=60_000)
    await coordinator.service.load()
    gateway = coordinator.gateway
    pid, epoch = await coordinator.open_transaction(("t", 0), ("t", 1))
    assert await gateway.end_transaction("tx", pid, epoch, True, 0.0) is E.NONE
    adding = asyncio.ensure_future(gateway.add_partitions("tx", pid, epoch, [("t", 2)], 0.0))
    await asyncio.sleep(0.05)
    assert not adding.done()  # parked while ("t", 1)'s marker is not written
    assert (await coordinator.state()).state == "PrepareCommit"
    gate.set()
    assert await asyncio.wait_for(adding, 30) is E.NONE
    described = await coordinator.state()
    assert (described.state, described.partitions) == ("Ongoing", (("t", 2),))
    assert coordinator.router.completed == 1
    assert coordinator.service._completion_waiters == {}
    # Past the wait: answered as it stands. Kafka's behaviour (0): at once.
    gate.clear()
    assert await gateway.end_transaction("tx", pid, epoch, True, 0.0) is E.NONE
    # ("t", 2) has no gate: that one completes; ("t", 0) is held for the rest.
    await coordinator.wait_state("CompleteCommit")
    sides.gates[("t", 0)] = gate
    assert await gateway.add_partitions("tx", pid, epoch, [("t", 0)], 0.0) is E.NONE
    assert await gateway.end_transaction("tx", pid, epoch, False, 0.0) is E.NONE
    impatient = TxnCoordinatorGateway(coordinator.service, 50)
    assert await impatient.add_partitions("tx", pid, epoch, [("t", 1)], 0.0) is (
        E.CONCURRENT_TRANSACTIONS
    )
    kafkas = TxnCoordinatorGateway(coordinator.service)
    assert await kafkas.add_partitions("tx", pid, epoch, [("t", 1)], 0.0) is (
        E.CONCURRENT_TRANSACTIONS
    )
    assert coordinator.service._completion_waiters == {}
    gate.set()
    await coordinator.wait_state("CompleteAbort")
    await coordinator.router.wait_idle()
    await coordinator.service.close()
    await committer.close()

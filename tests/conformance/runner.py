"""Play one request sequence against Apache Kafka and against groupcoord, compare the answers.

A sequence is a function of a `Session`. It sends requests on named connections (each its own
socket, so a parked JoinGroup does not hold up the others) and may use what came back (member
ids, generations) in later requests. The same function runs against both servers at once, in
two threads; each request becomes a numbered step, and step n of Kafka's transcript is compared
field by field with step n of ours after `normalise.py`'s rules. Steps are numbered when sent,
so two servers answering concurrent requests in a different order still compare step to step.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tests.conformance.normalise import IdNumbering, normalise_response
from tests.conformance.wire import decode_response, make, plain
from tests.rawclient import RawClient, request_class

Sequence = Callable[["Session"], None]
SEQUENCES: dict[str, Sequence] = {}
REQUEST_TIMEOUT_S = 40.0


def sequence(name: str) -> Callable[[Sequence], Sequence]:
    """Register a sequence under a unique name ("area/what it plays")."""

    def register(fn: Sequence) -> Sequence:
        assert name not in SEQUENCES, f"duplicate sequence {name}"
        SEQUENCES[name] = fn
        return fn

    return register


@dataclass
class Step:
    index: int
    conn: str
    api_key: int
    version: int
    label: str
    request: Any
    response: Any = None  # plain dict, or {"<exception>": "..."} when the request failed


class Session:
    """One server's side of a sequence run. Group names are the same on both servers."""

    def __init__(self, peer: str, bootstrap: str, slug: str) -> None:
        self.peer = peer
        self.bootstrap = bootstrap
        self.slug = slug
        self.steps: list[Step] = []
        self.groups: set[str] = set()
        self._conns: dict[str, tuple[RawClient | None, ThreadPoolExecutor]] = {}
        self._lock = threading.Lock()

    def group(self, name: str = "g") -> str:
        """A group id private to this sequence (and this test run)."""
        group_id = f"{self.slug}-{name}"
        self.groups.add(group_id)
        return group_id

    def transactional_id(self, name: str = "txn") -> str:
        """A transactional id private to this sequence (listed as the sequence's own, as its
        groups are, when ListTransactions is normalised)."""
        return self.group(name)

    def name(self, name: str) -> str:
        """A topic (or other) name private to this sequence, the same on both servers."""
        return f"{self.slug}-{name}"

    def send(
        self, conn: str, api_key: int, version: int, label: str = "", **fields: Any
    ) -> Future[Any]:
        """Send a request on connection `conn` (opened on first use); the future holds the
        decoded response entity, or raises what the request raised."""
        body = make(request_class(api_key, version), **fields)
        with self._lock:
            step = Step(len(self.steps), conn, api_key, version, label, plain(body))
            self.steps.append(step)
            if conn not in self._conns:
                self._conns[conn] = (None, ThreadPoolExecutor(1, thread_name_prefix=conn))
            executor = self._conns[conn][1]
        return executor.submit(self._request, step, body)

    def call(self, conn: str, api_key: int, version: int, label: str = "", **fields: Any) -> Any:
        return self.send(conn, api_key, version, label, **fields).result(REQUEST_TIMEOUT_S + 5)

    def _request(self, step: Step, body: Any) -> Any:
        client = self._conns[step.conn][0]
        try:
            if client is None:
                client = RawClient(self.bootstrap, timeout_s=REQUEST_TIMEOUT_S)
                self._conns[step.conn] = (client, self._conns[step.conn][1])
            frame, pos = client.request_frame(step.api_key, step.version, body)
            response = decode_response(step.api_key, step.version, frame, pos)
        except Exception as exc:
            step.response = {"<exception>": type(exc).__name__}
            if client is not None:
                client.close()
            self._conns[step.conn] = (None, self._conns[step.conn][1])
            raise
        step.response = plain(response)
        return response

    def disconnect(self, conn: str) -> None:
        """Close one connection (its next request opens a new one)."""
        client, executor = self._conns[conn]
        executor.submit(lambda: None).result(REQUEST_TIMEOUT_S)  # after its queued requests
        if client is not None:
            client.close()
        self._conns[conn] = (None, executor)

    def wait_topic(self, topic: str, partitions: int, timeout_s: float = 15.0) -> None:
        """Wait (unrecorded) until every partition of a new topic answers ListOffsets without
        error: Kafka creates a topic's logs a moment after CreateTopics answers, as a client
        finds out by retrying."""
        body = make(
            request_class(2, 1),
            replica_id=-1,
            topics=[
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "timestamp": -1} for p in range(partitions)
                    ],
                }
            ],
        )
        deadline = time.monotonic() + timeout_s
        with RawClient(self.bootstrap, timeout_s=REQUEST_TIMEOUT_S) as client:
            while True:
                resp = client.request(2, 1, body)
                if all(p.error_code == 0 for t in resp.topics for p in t.partitions):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic} not ready on {self.peer}: {resp}")
                time.sleep(0.05)

    def wait_producer_ids(self, timeout_s: float = 30.0) -> None:
        """Wait (unrecorded) until InitProducerId answers without a retriable error: Kafka
        creates and loads __transaction_state on the first one (COORDINATOR_LOAD_IN_PROGRESS
        or COORDINATOR_NOT_AVAILABLE meanwhile), as a client finds out by retrying."""
        body = make(
            request_class(22, 0),
            transactional_id=None,
            transaction_timeout=60_000,
            producer_id=-1,
            producer_epoch=-1,
        )
        retriable = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
        deadline = time.monotonic() + timeout_s
        with RawClient(self.bootstrap, timeout_s=REQUEST_TIMEOUT_S) as client:
            while True:
                resp = client.request(22, 0, body)
                if resp.error_code not in retriable:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no producer ids from {self.peer}: {resp}")
                time.sleep(0.1)

    def poll(
        self,
        api_key: int,
        version: int,
        done: Callable[[Any], bool],
        timeout_s: float = 30.0,
        **fields: Any,
    ) -> Any:
        """Send a request (unrecorded, on its own connection) until `done(response)`: waits
        for what a client would find out by retrying (a transaction's markers written, a
        coordinator loaded); returns the last response."""
        body = make(request_class(api_key, version), **fields)
        deadline = time.monotonic() + timeout_s
        with RawClient(self.bootstrap, timeout_s=REQUEST_TIMEOUT_S) as client:
            while True:
                resp = decode_response(
                    api_key, version, *client.request_frame(api_key, version, body)
                )
                if done(resp):
                    return resp
                if time.monotonic() > deadline:
                    raise TimeoutError(f"api {api_key} not done on {self.peer}: {resp}")
                time.sleep(0.05)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        for client, executor in self._conns.values():
            executor.shutdown(wait=False, cancel_futures=True)
            if client is not None:
                client.close()


@dataclass
class Divergence:
    step: int
    where: str
    kafka: Any
    ours: Any


@dataclass
class Outcome:
    name: str
    kafka: list[dict[str, Any]] = field(default_factory=list)
    ours: list[dict[str, Any]] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)

    def report(self) -> str:
        lines = [f"{self.name}: {len(self.divergences)} divergence(s)"]
        for d in self.divergences:
            lines.append(
                f"  step {d.step} {d.where}:\n    kafka: {d.kafka!r}\n    ours:  {d.ours!r}"
            )
        return "\n".join(lines)


def slug(name: str, nonce: str) -> str:
    return f"cf-{re.sub(r'[^a-zA-Z0-9]+', '-', name).strip('-')}-{nonce}"


def _play(fn: Sequence, session: Session) -> BaseException | None:
    try:
        fn(session)
        return None
    except BaseException as exc:  # reported beside the transcript, not raised in the thread
        return exc
    finally:
        session.close()


def topic_names(bootstrap: str) -> dict[str, str]:
    """Topic id -> name on one server (Metadata v12 for every topic), for normalising ids."""
    with RawClient(bootstrap, timeout_s=REQUEST_TIMEOUT_S) as client:
        body = make(request_class(3, 12), topics=None, allow_auto_topic_creation=False)
        meta = client.request(3, 12, body)
    return {str(t.topic_id): t.name for t in meta.topics}


def transcript(session: Session) -> list[dict[str, Any]]:
    ids = IdNumbering()
    own = frozenset(session.groups)
    names = topic_names(session.bootstrap)
    out = []
    for step in session.steps:
        ids.saw_request(step.request)
        response = normalise_response(step.api_key, step.request, step.response, ids, own, names)
        out.append(
            {
                "step": f"{step.index} {step.conn} api {step.api_key} v{step.version} {step.label}",
                "response": response,
            }
        )
    return out


def run_both(name: str, kafka_bootstrap: str, ours_bootstrap: str, nonce: str) -> Outcome:
    """Run the sequence against both servers at once and compare the transcripts."""
    fn = SEQUENCES[name]
    sessions = {
        peer: Session(peer, bootstrap, slug(name, nonce))
        for peer, bootstrap in (("kafka", kafka_bootstrap), ("ours", ours_bootstrap))
    }
    errors: dict[str, BaseException | None] = {}
    threads = [
        threading.Thread(target=lambda p=p: errors.__setitem__(p, _play(fn, sessions[p])))
        for p in sessions
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcome = Outcome(name, transcript(sessions["kafka"]), transcript(sessions["ours"]))
    if errors.get("kafka") is not None:
        # The sequence itself must run against the reference: a failure here is a bug in the
        # sequence (or the reference broker), not a divergence.
        raise RuntimeError(f"{name} failed against Kafka: {errors['kafka']!r}") from errors["kafka"]
    if errors.get("ours") is not None:
        outcome.divergences.append(
            Divergence(len(outcome.ours), "sequence", "completed", repr(errors["ours"]))
        )
    for i, (k, o) in enumerate(zip(outcome.kafka, outcome.ours, strict=False)):
        outcome.divergences.extend(_diff(i, k["step"], k["response"], o["response"]))
    if len(outcome.kafka) != len(outcome.ours):
        outcome.divergences.append(
            Divergence(
                min(len(outcome.kafka), len(outcome.ours)),
                "step count",
                len(outcome.kafka),
                len(outcome.ours),
            )
        )
    return outcome


def _diff(step: int, label: str, kafka: Any, ours: Any, path: str = "") -> list[Divergence]:
    if isinstance(kafka, dict) and isinstance(ours, dict) and kafka.keys() == ours.keys():
        return [d for k in kafka for d in _diff(step, label, kafka[k], ours[k], f"{path}.{k}")]
    if isinstance(kafka, list) and isinstance(ours, list) and len(kafka) == len(ours):
        return [
            d
            for i, (a, b) in enumerate(zip(kafka, ours, strict=True))
            for d in _diff(step, label, a, b, f"{path}[{i}]")
        ]
    if kafka == ours:
        return []
    return [Divergence(step, f"({label}) {path or '.'}", kafka, ours)]

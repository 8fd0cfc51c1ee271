"""A PySpark StreamingQueryListener that commits each micro-batch's end offsets to a consumer
group, so a Spark Structured Streaming job reading Kafka shows up where Kafka users look for
lag: ListGroups, DescribeGroups, OffsetFetch, the server's lag metrics, Burrow, kafka-lag-
exporter, `kafka-consumer-groups --describe`.

    from groupcoord.pipeline.offset_committer import KafkaOffsetCommitter
    spark.streams.addListener(KafkaOffsetCommitter("broker:9092"))

Theory of operation. Spark keeps its Kafka offsets in the query's checkpoint and never
commits them (SPARK-27549 was closed unmerged); the checkpoint stays the source of truth
here too: the listener only reports, it never changes what Spark reads. After every
micro-batch Spark posts a QueryProgressEvent whose sources[].endOffset is the batch's end
offset per topic partition, as JSON ({"topic": {"0": 42, ...}}): the next offset to read,
which is exactly what a consumer commits. The listener turns the Kafka sources' end offsets
into one OffsetCommit for the query's group ("spark-<query name, else query id>" unless
`group_id` says otherwise), with {"query_id", "run_id", "batch_id"} as each partition's
commit metadata.

Commits go through confluent-kafka's Consumer.commit with a group.id and no subscription:
an OffsetCommit with generation -1 and no member id, which every Kafka broker accepts for a
group without active members (a "simple" consumer group), and which carries per-partition
metadata (AdminClient.alter_consumer_group_offsets would do the same OffsetCommit, but
librdkafka's admin API drops the metadata on some versions and needs one admin request
per group anyway).

Cost and failures. The listener thread (Spark's listener bus, through py4j) fetches only the
progress' JSON (two py4j calls, where PySpark's own wrapper makes about a hundred to build
its event objects: `KafkaOffsetCommitter._jlistener`), parses it and hands the offsets to
one worker thread, through a dict holding the latest pending
commit per group (bounded by the number of queries: a newer batch replaces an older one not
yet committed, as it supersedes it). The worker commits; a failure (server down, group
busy) is logged and the offsets stay pending, retried after `retry_backoff_s` or when the
next batch replaces them. Nothing the listener does raises into Spark.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

log = logging.getLogger("groupcoord.pipeline.offset_committer")

DEFAULT_GROUP = "spark-{name}"
# librdkafka's own timeouts bound a commit; this bounds the wait for its answer.
COMMIT_TIMEOUT_S = 10.0
RETRY_BACKOFF_S = 2.0

Offsets = dict[tuple[str, int], int]


def kafka_end_offsets(sources: Any) -> Offsets:
    """The end offsets of the Kafka sources among a progress event's `sources` (each with
    `description` and `endOffset`, a JSON string): {(topic, partition): offset}. Other
    sources, and a Kafka source without end offsets yet, give nothing."""
    offsets: Offsets = {}
    for source in sources or ():
        if "kafka" not in str(getattr(source, "description", "")).lower():
            continue
        raw = getattr(source, "endOffset", None)
        if not raw:
            continue
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        if not isinstance(parsed, Mapping):
            continue
        for topic, partitions in parsed.items():
            if not isinstance(partitions, Mapping):
                continue
            for partition, offset in partitions.items():
                if isinstance(offset, int) and offset >= 0:
                    offsets[(str(topic), int(partition))] = offset
    return offsets


def commit_metadata(query_id: str, run_id: str, batch_id: int) -> str:
    """What each committed partition carries: the query, its run and the batch."""
    return json.dumps(
        {"query_id": query_id, "run_id": run_id, "batch_id": batch_id}, separators=(",", ":")
    )


def group_name(template: str | Callable[[str | None, str], str], name: str | None, id_: str) -> str:
    """The group of a query: `template` formatted with {name} (the query's name, else its id)
    and {id}, or `template(name, id)`."""
    if callable(template):
        return template(name, id_)
    return template.format(name=name or id_, id=id_)


@dataclass(frozen=True)
class PendingCommit:
    group: str
    offsets: Offsets
    metadata: str
    batch_id: int


class _CommitWorker:
    """One thread committing the latest pending commit of each group (module docstring)."""

    def __init__(
        self,
        client_config: dict[str, Any],
        retry_backoff_s: float,
        on_commit: Callable[[PendingCommit], None] | None,
    ) -> None:
        self._client_config = client_config
        self._retry_backoff_s = retry_backoff_s
        self._on_commit = on_commit
        self._pending: dict[str, PendingCommit] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._consumers: dict[str, Any] = {}
        self._thread = threading.Thread(
            target=self._run, name="groupcoord-offset-committer", daemon=True
        )
        self._thread.start()

    def submit(self, commit: PendingCommit) -> None:
        with self._lock:
            self._pending[commit.group] = commit
        self._wake.set()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def stop(self, timeout_s: float) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        retry_at = 0.0
        while not self._stopped:
            timeout = max(0.0, retry_at - time.monotonic()) if retry_at else None
            self._wake.wait(timeout)
            self._wake.clear()
            failed = False
            while not self._stopped:
                with self._lock:
                    if not self._pending:
                        break
                    group = next(iter(self._pending))
                    commit = self._pending.pop(group)
                if not self._commit(commit):
                    with self._lock:  # kept unless a newer batch replaced it meanwhile
                        self._pending.setdefault(group, commit)
                    failed = True
                    break
            retry_at = time.monotonic() + self._retry_backoff_s if failed else 0.0
        for consumer in self._consumers.values():
            try:
                consumer.close()
            except Exception:  # closing after the broker is gone: nothing to do
                pass

    def _commit(self, commit: PendingCommit) -> bool:
        from confluent_kafka import TopicPartition

        try:
            consumer = self._consumer(commit.group)
            result = consumer.commit(
                offsets=[
                    TopicPartition(topic, partition, offset, metadata=commit.metadata)
                    for (topic, partition), offset in sorted(commit.offsets.items())
                ],
                asynchronous=False,
            )
            errors = [tp for tp in result or () if tp.error is not None]
            if errors:
                raise RuntimeError(
                    f"partitions refused: {[(t.topic, t.partition, t.error) for t in errors]}"
                )
        except Exception as exc:  # logged, retried; never raised into Spark
            log.warning(
                "offset commit failed for group %s (batch %d): %s; retrying",
                commit.group,
                commit.batch_id,
                exc,
            )
            return False
        if self._on_commit is not None:
            try:
                self._on_commit(commit)
            except Exception:
                log.exception("on_commit callback failed")
        return True

    def _consumer(self, group: str) -> Any:
        consumer = self._consumers.get(group)
        if consumer is None:
            from confluent_kafka import Consumer

            config = {
                "enable.auto.commit": False,
                # Never subscribes: the group is committed to as a simple consumer.
                "enable.auto.offset.store": False,
                **self._client_config,
                "group.id": group,
            }
            consumer = self._consumers[group] = Consumer(config)
        return consumer


class KafkaOffsetCommitter(StreamingQueryListener):
    """Commits every micro-batch's Kafka end offsets to the query's consumer group.

    `bootstrap_servers`: the Kafka cluster (any broker works; groupcoord's listener
    address). `group_id`: a template with {name} (the query name, else its id) and {id}, or
    a callable (name, id) -> group; default "spark-{name}". `client_config`: more
    confluent-kafka settings (security, timeouts). `on_commit(PendingCommit)`: called on
    the worker thread after each successful commit (tests, metrics)."""

    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str | Callable[[str | None, str], str] = DEFAULT_GROUP,
        client_config: Mapping[str, Any] | None = None,
        retry_backoff_s: float = RETRY_BACKOFF_S,
        on_commit: Callable[[PendingCommit], None] | None = None,
    ) -> None:
        super().__init__()
        self.group_id = group_id
        config = {"bootstrap.servers": bootstrap_servers, **(client_config or {})}
        self._worker = _CommitWorker(config, retry_backoff_s, on_commit)
        # Time spent in onQueryProgress (the listener thread's share), for benchmarks.
        self.progress_seconds: list[float] = []

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        """PySpark's event (QueryProgressEvent): what Spark Connect and any other caller
        hand over; classic PySpark calls `on_progress_json` instead (`_jlistener`)."""
        progress = event.progress
        self._on_progress(
            lambda: (progress.id, progress.runId, progress.name, progress.batchId, progress.sources)
        )

    def on_progress_json(self, progress_json: str) -> None:
        """A progress event as Spark's StreamingQueryProgress.json()."""

        def fields() -> tuple[Any, Any, Any, Any, Any]:
            progress = json.loads(progress_json)
            return (
                progress["id"],
                progress["runId"],
                progress.get("name"),
                progress["batchId"],
                [SimpleNamespace(**source) for source in progress.get("sources") or ()],
            )

        self._on_progress(fields)

    def _on_progress(self, fields: Callable[[], tuple[Any, Any, Any, Any, Any]]) -> None:
        started = time.perf_counter()
        try:
            id_, run_id, name, batch_id, sources = fields()
            offsets = kafka_end_offsets(sources)
            if offsets:
                query_id = str(id_)
                self._worker.submit(
                    PendingCommit(
                        group_name(self.group_id, name, query_id),
                        offsets,
                        commit_metadata(query_id, str(run_id), int(batch_id)),
                        int(batch_id),
                    )
                )
        except Exception:  # a listener that raises would be logged by Spark, every batch
            log.exception("offset committer: progress event not understood")
        if len(self.progress_seconds) < 100_000:
            self.progress_seconds.append(time.perf_counter() - started)

    @property
    def _jlistener(self) -> Any:
        """What classic PySpark's addListener registers with the JVM (StreamingQueryListener
        builds a wrapper that turns every event into Python objects first, a py4j round
        trip per field: about a hundred per progress event, on Spark's listener thread);
        this one fetches only the progress' JSON, in two calls, and ignores the other
        events, which the committer does not use."""
        if getattr(self, "_jlistenerobj", None) is None:
            from pyspark import SparkContext

            jvm = SparkContext._jvm
            assert jvm is not None, "no SparkContext"
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_JsonProgress(self))
        return self._jlistenerobj

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def pending(self) -> int:
        """Groups whose latest offsets are not committed yet."""
        return self._worker.pending()

    def close(self, timeout_s: float = COMMIT_TIMEOUT_S) -> None:
        """Stop the worker (what is pending then is not committed); remove the listener
        from Spark first (spark.streams.removeListener)."""
        self._worker.stop(timeout_s)


class _JsonProgress:
    """The JVM-facing side of KafkaOffsetCommitter._jlistener (py4j calls it)."""

    def __init__(self, committer: KafkaOffsetCommitter) -> None:
        self.committer = committer

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        try:
            progress_json = jevent.progress().json()
        except Exception:  # the JVM gone at shutdown, say: never raised into Spark
            log.exception("offset committer: progress event not readable")
            return
        self.committer.on_progress_json(progress_json)

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]

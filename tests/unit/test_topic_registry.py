"""TopicRegistry changes are atomic (a topic or its new partitions become visible only once
their logs are open and topics.json lists them; a failure leaves memory, topics.json and the
data directory as they were), they take turns and run in steps that let the event loop
serve others, and topic configs are bounded by their Kafka types."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import groupcoord.coordinator.topics.registry as registry_module
from groupcoord.coordinator.config import Config, load_config
from groupcoord.coordinator.topics.configs import (
    TOPIC_CONFIGS,
    InvalidConfig,
    validate_topic_configs,
)
from groupcoord.coordinator.topics.registry import TopicError, TopicRegistry
from groupcoord.protocol.errors import ErrorCode
from groupcoord.storage import PartitionLog

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return load_config(overrides={"data_dir": str(tmp_path), "metrics_listen": ""}, environ={})


@pytest.fixture
def registry(config: Config) -> Any:
    reg = TopicRegistry(config)
    reg.load()
    yield reg
    reg.close()


def partition_dirs(config: Config, name: str) -> list[str]:
    return sorted(
        p.name for p in (config.data_path / "topics").iterdir() if p.name.rsplit("-", 1)[0] == name
    )


def reopened(config: Config) -> dict[str, int]:
    """Topic -> partition count as a restarted registry sees it (then closed again)."""
    reg = TopicRegistry(config)
    reg.load()
    try:
        return {t.name: len(t.partitions) for t in reg.topics()}
    finally:
        reg.close()


def fail_topics_json(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Make every topics.json write fail as a full disk would; returns the paths tried."""
    tried: list[Path] = []

    def failing(path: Path, data: bytes) -> None:
        tried.append(path)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(registry_module, "atomic_write", failing)
    return tried


# topic configs ------------------------------------------------------------------------------


_LEVELS = {"compression.gzip.level", "compression.lz4.level", "compression.zstd.level"}


@pytest.mark.parametrize("name", sorted(n for n, s in TOPIC_CONFIGS.items() if s.kind == "INT"))
def test_int_topic_configs_are_java_ints(name: str) -> None:
    if name in _LEVELS:  # Kafka bounds the compression levels below the int's top
        with pytest.raises(InvalidConfig, match="no more than|between"):
            validate_topic_configs({name: str(INT_MAX)})
    else:
        assert validate_topic_configs({name: str(INT_MAX)}) == {name: str(INT_MAX)}
    for value in (str(INT_MAX + 1), "3000000000"):
        with pytest.raises(InvalidConfig) as raised:
            validate_topic_configs({name: value})
        message = str(raised.value)
        assert name in message and value in message and "INT" in message
        assert str(INT_MAX) in message


@pytest.mark.parametrize("name", sorted(n for n, s in TOPIC_CONFIGS.items() if s.kind == "LONG"))
def test_long_topic_configs_are_java_longs(name: str) -> None:
    assert validate_topic_configs({name: str(LONG_MAX)}) == {name: str(LONG_MAX)}
    with pytest.raises(InvalidConfig, match="LONG"):
        validate_topic_configs({name: str(LONG_MAX + 1)})


def test_number_configs_parse_as_java_does() -> None:
    # Kafka trims the value and parses it with Integer/Long.parseInt: a sign is fine, Python
    # literal spellings (digit separators) are not.
    assert validate_topic_configs({"segment.bytes": " +1024 "}) == {"segment.bytes": "1024"}
    for value in ("1_024", "1e3", "", "0x10"):
        with pytest.raises(InvalidConfig, match="Not a number of type INT"):
            validate_topic_configs({"segment.bytes": value})
    # Kafka's lower bounds stay.
    with pytest.raises(InvalidConfig, match="at least 14"):
        validate_topic_configs({"segment.bytes": "13"})


def test_every_number_config_has_a_checked_kind() -> None:
    # A new INT or LONG config must get its type's bounds: its checker rejects 2**63.
    for name, spec in TOPIC_CONFIGS.items():
        if spec.kind in ("INT", "LONG"):
            with pytest.raises(InvalidConfig):
                validate_topic_configs({name: str(2**63)})


def test_create_refuses_segment_bytes_above_int32(registry: Any, config: Config) -> None:
    for validate_only in (True, False):
        with pytest.raises(TopicError) as raised:
            asyncio.run(
                registry.create_in_steps("huge", 1, {"segment.bytes": "3000000000"}, validate_only)
            )
        assert raised.value.code == ErrorCode.INVALID_CONFIG
    assert registry.get("huge") is None
    assert partition_dirs(config, "huge") == []


# atomic create / add_partitions -------------------------------------------------------------


def test_create_rolls_back_when_topics_json_write_fails(
    registry: Any, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.create("old", 2, {})
    before = config.data_path.joinpath("topics.json").read_bytes()
    version = registry.version
    tried = fail_topics_json(monkeypatch)
    with pytest.raises(OSError):
        registry.create("lost", 3, {})
    assert set(tried) == {config.data_path / "topics.json"}
    assert registry.get("lost") is None
    assert [t.name for t in registry.topics()] == ["old"]
    assert registry.version == version
    assert registry.partition_count() == 2
    assert partition_dirs(config, "lost") == []
    assert config.data_path.joinpath("topics.json").read_bytes() == before
    monkeypatch.undo()
    # The name is free again, and a later save does not resurrect the failed topic.
    registry.create("next", 1, {})
    registry.close()
    assert reopened(config) == {"old": 2, "next": 1}
    assert partition_dirs(config, "lost") == []


def test_create_rolls_back_when_a_partition_fails_to_open(
    registry: Any, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[PartitionLog] = []
    real_open = PartitionLog.open

    def open_third_fails(directory: Path, *args: Any, **kwargs: Any) -> PartitionLog:
        if len(opened) == 2:
            directory.mkdir(parents=True, exist_ok=True)
            raise OSError(5, "Input/output error")
        log = real_open(directory, *args, **kwargs)
        opened.append(log)
        return log

    monkeypatch.setattr(registry_module.PartitionLog, "open", open_third_fails)
    with pytest.raises(OSError):
        registry.create("broken", 4, {})
    assert len(opened) == 2 and all(log.closed for log in opened)
    assert registry.get("broken") is None
    assert partition_dirs(config, "broken") == []
    assert not config.data_path.joinpath("topics.json").exists()
    monkeypatch.undo()
    registry.close()
    assert reopened(config) == {}


def test_add_partitions_rolls_back_when_topics_json_write_fails(
    registry: Any, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = registry.create("grow", 2, {})
    first = topic.partitions[:]
    version = registry.version
    fail_topics_json(monkeypatch)
    with pytest.raises(OSError):
        asyncio.run(registry.add_partitions_in_steps(topic, 5))
    assert topic.partitions == first
    assert registry.num_partitions(topic.topic_id) == 2
    assert registry.partition("grow", 2) is None
    assert registry.version == version
    assert partition_dirs(config, "grow") == ["grow-0", "grow-1"]
    assert not any(p.log.closed for p in topic.partitions)
    monkeypatch.undo()
    registry.close()
    assert reopened(config) == {"grow": 2}


def test_create_and_add_partitions_succeed(registry: Any, config: Config) -> None:
    version = registry.version
    topic = registry.create("t", 2, {"retention.ms": "5"})
    assert registry.version > version
    asyncio.run(registry.add_partitions_in_steps(topic, 3))
    assert registry.version > version + 1
    assert [p.index for p in topic.partitions] == [0, 1, 2]
    registry.close()
    assert reopened(config) == {"t": 3}


def test_create_restores_topics_json_when_the_write_fails_after_its_rename(
    registry: Any, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The new file is in place but its directory fsync fails: the topic is not created, so
    # topics.json must not keep listing it (a restart would bring back an empty topic).
    registry.create("old", 1, {})
    before = config.data_path.joinpath("topics.json").read_bytes()
    real = registry_module.atomic_write
    calls: list[int] = []

    def fsync_fails_once(path: Path, data: bytes) -> None:
        real(path, data)
        calls.append(1)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(registry_module, "atomic_write", fsync_fails_once)
    with pytest.raises(OSError):
        registry.create("ghost", 2, {})
    assert registry.get("ghost") is None
    assert config.data_path.joinpath("topics.json").read_bytes() == before
    monkeypatch.undo()
    registry.close()
    assert reopened(config) == {"old": 1}
    assert partition_dirs(config, "ghost") == []


def test_delete_keeps_the_topic_when_topics_json_write_fails(
    registry: Any, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete whose save fails leaves the topic registered and served (it was removed
    from memory first: gone until a restart brought it back from topics.json)."""
    topic = registry.create("kept", 2, {})
    version = registry.version
    fail_topics_json(monkeypatch)
    with pytest.raises(OSError):
        asyncio.run(registry.delete_in_steps(topic))
    assert registry.get("kept") is topic and registry.version == version
    assert not topic.partitions[0].log.closed
    assert len(partition_dirs(config, "kept")) == 2
    monkeypatch.undo()
    asyncio.run(registry.delete_in_steps(topic))
    assert registry.get("kept") is None and partition_dirs(config, "kept") == []
    registry.close()
    assert reopened(config) == {}


# topic name collisions ('.' against '_') ----------------------------------------------------


def test_create_refuses_a_name_colliding_with_an_existing_topic(
    registry: Any, config: Config
) -> None:
    registry.create("ok.name", 1, {})
    for validate_only in (True, False):
        with pytest.raises(TopicError) as raised:
            asyncio.run(registry.create_in_steps("ok_name", 1, {}, validate_only))
        assert raised.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert raised.value.message == "Topic 'ok_name' collides with existing topics: ok.name"
    with pytest.raises(TopicError) as raised:
        registry.create("ok.name", 1, {})
    assert raised.value.code == ErrorCode.TOPIC_ALREADY_EXISTS  # the same name is not a collision
    # The coordinator's internal topic takes part, as Kafka's __consumer_offsets does.
    with pytest.raises(TopicError) as raised:
        registry.create("__consumer.offsets", 1, {})
    assert raised.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert registry.get("ok_name") is None and partition_dirs(config, "ok_name") == []
    # Names without '.' or '_' never collide; a deleted topic's name is free to collide with.
    registry.create("ok-name", 1, {})
    asyncio.run(registry.delete_in_steps(registry.get("ok.name")))
    registry.create("ok_name", 1, {})
    registry.close()
    assert reopened(config) == {"ok-name": 1, "ok_name": 1}


def test_colliding_topics_saved_before_the_check_still_load(config: Config) -> None:
    """topics.json written before collisions were refused may list colliding names: all are
    served, and a further colliding name is refused naming each of them."""
    first = TopicRegistry(config)
    first.load()
    first.create("a.b.c", 1, {})
    first.create("x", 1, {})
    first.close()
    path = config.data_path / "topics.json"
    path.write_text(path.read_text().replace('"x"', '"a_b.c"'))
    (config.data_path / "topics" / "x-0").rename(config.data_path / "topics" / "a_b.c-0")
    reg = TopicRegistry(config)
    reg.load()
    try:
        assert sorted(t.name for t in reg.topics()) == ["a.b.c", "a_b.c"]
        with pytest.raises(TopicError) as raised:
            reg.create("a.b_c", 1, {})
        assert raised.value.message == ("Topic 'a.b_c' collides with existing topics: a.b.c, a_b.c")
        asyncio.run(reg.delete_in_steps(reg.get("a.b.c")))
        assert reg.colliding_topics("a.b_c") == ["a_b.c"]
    finally:
        reg.close()


# altering topic configs ---------------------------------------------------------------------


def test_alter_configs_saves_then_reconfigures_the_live_logs(registry: Any, config: Config) -> None:
    topic = registry.create("t", 2, {"retention.ms": "5000"})
    index_interval = topic.partitions[0].log.config.index_interval_bytes
    registry.alter_configs(topic, {"segment.bytes": "1048576", "retention.bytes": "4096"})
    assert topic.configs == {"segment.bytes": "1048576", "retention.bytes": "4096"}
    for partition in topic.partitions:
        log_config = partition.log.config
        assert log_config.segment_bytes_max == 1048576
        assert log_config.retention_bytes == 4096
        assert log_config.retention_ms == config.log_retention_ms  # the override went away
        assert log_config.index_interval_bytes == index_interval
    # validate_only, and a bad value, change nothing.
    registry.alter_configs(topic, {"retention.ms": "1"}, validate_only=True)
    with pytest.raises(TopicError) as raised:
        registry.alter_configs(topic, {"segment.bytes": "3000000000"})
    assert raised.value.code == ErrorCode.INVALID_CONFIG
    assert topic.configs == {"segment.bytes": "1048576", "retention.bytes": "4096"}
    registry.close()
    reg = TopicRegistry(config)
    reg.load()
    try:
        reloaded = reg.get("t")
        assert reloaded.configs == {"segment.bytes": "1048576", "retention.bytes": "4096"}
        assert reloaded.partitions[1].log.config.segment_bytes_max == 1048576
    finally:
        reg.close()


def test_alter_configs_keeps_the_old_configs_when_topics_json_write_fails(
    registry: Any, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = registry.create("t", 1, {"retention.ms": "5000"})
    before = config.data_path.joinpath("topics.json").read_bytes()
    fail_topics_json(monkeypatch)
    with pytest.raises(OSError):
        registry.alter_configs(topic, {"retention.ms": "60000"})
    assert topic.configs == {"retention.ms": "5000"}
    assert topic.partitions[0].log.config.retention_ms == 5000
    assert config.data_path.joinpath("topics.json").read_bytes() == before
    monkeypatch.undo()
    registry.close()
    reg = TopicRegistry(config)
    reg.load()
    try:
        assert reg.get("t").configs == {"retention.ms": "5000"}
    finally:
        reg.close()


def test_timestamp_configs_are_checked_as_kafka_4_checks_them() -> None:
    # message.timestamp.type: Kafka's ValidString, case-sensitive.
    for value in ("CreateTime", "LogAppendTime"):
        assert validate_topic_configs({"message.timestamp.type": value}) == {
            "message.timestamp.type": value
        }
    with pytest.raises(InvalidConfig, match="CreateTime, LogAppendTime"):
        validate_topic_configs({"message.timestamp.type": "logappendtime"})
    # KIP-937's bounds: LONG, at least 0.
    for name in ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms"):
        assert validate_topic_configs({name: "0"}) == {name: "0"}
        assert validate_topic_configs({name: str(LONG_MAX)}) == {name: str(LONG_MAX)}
        with pytest.raises(InvalidConfig, match="at least 0"):
            validate_topic_configs({name: "-1"})
    # The deprecated symmetric bound was removed in Kafka 4.0: an unknown name.
    with pytest.raises(InvalidConfig, match="Unknown topic config name"):
        validate_topic_configs({"message.timestamp.difference.max.ms": "1000"})


def test_timestamp_configs_default_to_kafka_4s(config: Config) -> None:
    defaults = {name: spec.default(config) for name, spec in TOPIC_CONFIGS.items()}
    assert defaults["message.timestamp.type"] == "CreateTime"
    assert defaults["message.timestamp.before.max.ms"] == str(LONG_MAX)
    assert defaults["message.timestamp.after.max.ms"] == "3600000"


# changes in steps ----------------------------------------------------------------------------


async def ticking(registry: Any, name: str, seen: list[tuple[bool, bool]]) -> None:
    """Runs between the steps of a change: records whether `name` is shown and changing."""
    while True:
        seen.append((registry.get(name) is not None, registry.changing(name)))
        await asyncio.sleep(0)


async def run_beside_ticker(registry: Any, name: str, change: Any) -> list[tuple[bool, bool]]:
    seen: list[tuple[bool, bool]] = []
    ticker = asyncio.create_task(ticking(registry, name, seen))
    await asyncio.sleep(0)
    try:
        await change
    finally:
        ticker.cancel()
    return seen


def test_a_big_topic_is_created_and_deleted_in_steps_the_loop_runs_between(
    registry: Any, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "CHANGE_STEP_S", 0.0)  # a step per partition

    async def main() -> None:
        seen = await run_beside_ticker(registry, "big", registry.create_in_steps("big", 40, {}))
        # The loop ran between the steps, the topic marked changing and not shown meanwhile.
        assert seen.count((False, True)) >= 30
        assert (True, True) not in seen
        assert len(registry.get("big").partitions) == 40
        assert not registry.changing("big")
        topic = registry.get("big")
        seen = await run_beside_ticker(registry, "big", registry.delete_in_steps(topic))
        assert seen.count((False, True)) >= 30  # gone from view first, then removed
        assert partition_dirs(config, "big") == []
        assert all(p.log.closed for p in topic.partitions)

    asyncio.run(main())
    assert reopened(config) == {}


def test_auto_create_answers_leader_not_available_while_the_name_changes(
    registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "CHANGE_STEP_S", 0.0)

    async def main() -> None:
        creating = asyncio.create_task(registry.create_in_steps("t", 20, {}))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert registry.changing("t")
        with pytest.raises(TopicError) as refused:
            registry.create("t", 1, {})
        assert refused.value.code == ErrorCode.LEADER_NOT_AVAILABLE
        await creating
        assert len(registry.get("t").partitions) == 20

    asyncio.run(main())


def test_changes_take_turns_and_are_checked_again_on_their_turn(
    registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "CHANGE_STEP_S", 0.0)

    async def main() -> None:
        first, second = await asyncio.gather(
            registry.create_in_steps("same", 10, {}),
            registry.create_in_steps("same", 3, {}),
            return_exceptions=True,
        )
        assert not isinstance(first, BaseException)
        assert isinstance(second, TopicError)
        assert second.code == ErrorCode.TOPIC_ALREADY_EXISTS
        topic = registry.get("same")
        assert len(topic.partitions) == 10
        grown = await asyncio.gather(
            registry.add_partitions_in_steps(topic, 12),
            registry.add_partitions_in_steps(topic, 12),
            return_exceptions=True,
        )
        assert grown[0] is None
        assert isinstance(grown[1], TopicError) and grown[1].code == ErrorCode.INVALID_PARTITIONS
        assert len(topic.partitions) == 12
        deleted = await asyncio.gather(
            registry.delete_in_steps(topic),
            registry.add_partitions_in_steps(topic, 13),
            registry.delete_in_steps(topic),
            return_exceptions=True,
        )
        assert deleted[0] is None
        for late in deleted[1:]:
            assert isinstance(late, TopicError)
            assert late.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert registry.get("same") is None

    asyncio.run(main())


def test_a_cancelled_creation_leaves_nothing_and_a_cancelled_deletion_finishes(
    registry: Any, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry_module, "CHANGE_STEP_S", 0.0)

    async def cancelled_after_steps(change: Any, steps: int) -> None:
        task = asyncio.create_task(change)
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def main() -> None:
        await cancelled_after_steps(registry.create_in_steps("half", 30, {}), 10)
        assert registry.get("half") is None and not registry.changing("half")
        assert partition_dirs(config, "half") == []
        topic = await registry.create_in_steps("half", 30, {})  # the name is free again
        await cancelled_after_steps(registry.delete_in_steps(topic), 10)
        # The client went away, but no partition directory is left for a new topic to open.
        assert registry.get("half") is None and not registry.changing("half")
        assert partition_dirs(config, "half") == []
        assert all(p.log.closed for p in topic.partitions)

    asyncio.run(main())
    assert reopened(config) == {}

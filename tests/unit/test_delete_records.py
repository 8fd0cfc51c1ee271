"""DeleteRecords' handler called directly (no server): the answers real clients cannot
provoke, a failed log (KAFKA_STORAGE_ERROR, the log start unchanged), and those of an
empty partition (-1 is its high watermark, 0; anything above is out of range)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from groupcoord.coordinator.topics.delete_records import handle_delete_records
from groupcoord.protocol.api import ApiKey
from groupcoord.protocol.errors import ErrorCode
from tests.unit.test_admin_handlers import call, context, create, schema


@pytest.fixture
def handlers(tmp_path: Any) -> Any:
    handlers_ctx = context(tmp_path)
    yield handlers_ctx
    handlers_ctx.topics.close()


def delete_records(ctx: Any, topic: str, offsets: dict[int, int], version: int = 2) -> Any:
    """{partition: (low watermark, error)} of one topic's DeleteRecords."""
    m = schema(ApiKey.DELETE_RECORDS, version)
    body = m.DeleteRecordsRequest(
        topics=(
            m.DeleteRecordsTopic(
                name=topic,
                partitions=tuple(
                    m.DeleteRecordsPartition(partition_index=p, offset=o)
                    for p, o in offsets.items()
                ),
            ),
        ),
        timeout=datetime.timedelta(seconds=30),
    )
    answer = call(ctx, handle_delete_records, ApiKey.DELETE_RECORDS, version, body)
    (answered,) = answer.topics
    assert answered.name == topic
    return {p.partition_index: (p.low_watermark, p.error_code) for p in answered.partitions}


def test_an_empty_partition(handlers: Any) -> None:
    ctx = handlers
    assert create(ctx, "empty").error_code == ErrorCode.NONE
    for version in (0, 1, 2):
        assert delete_records(ctx, "empty", {0: -1}, version) == {0: (0, ErrorCode.NONE)}
        assert delete_records(ctx, "empty", {0: 1}, version) == {
            0: (-1, ErrorCode.OFFSET_OUT_OF_RANGE)
        }


def test_a_failed_log_answers_kafka_storage_error(handlers: Any) -> None:
    ctx = handlers
    assert create(ctx, "failing", partitions=2).error_code == ErrorCode.NONE
    failed = ctx.topics.partition("failing", 0).log
    failed.mark_failed(OSError("the disk went away"))
    assert delete_records(ctx, "failing", {0: 0, 1: 0}) == {
        0: (-1, ErrorCode.KAFKA_STORAGE_ERROR),
        1: (0, ErrorCode.NONE),
    }
    assert failed.log_start_offset == 0

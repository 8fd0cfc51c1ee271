"""Group -> shard mapping matches Kafka's Utils.abs(groupId.hashCode()) % partitions."""

from __future__ import annotations

from groupcoord.coordinator.runtime.partitioning import java_string_hashcode, shard_for


def test_java_string_hashcode_known_values() -> None:
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("foo") == 101574
    assert java_string_hashcode("hello") == 99162322
    # Negative and wrapping values, and a character outside the BMP (two UTF-16 units).
    assert java_string_hashcode("Aa") == java_string_hashcode("BB") == 2112
    # Values printed by Java 17's String.hashCode, including a negative one, a character
    # outside the BMP (two UTF-16 code units) and non-ASCII text.
    assert java_string_hashcode("spark-kafka-source-0") == -1638101323
    assert java_string_hashcode("console-consumer-12345") == 158455506
    assert java_string_hashcode("\U0001f600x") == 54959989
    assert java_string_hashcode("grüße") == 98768023


def test_shard_for_handles_int_min() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE; Kafka's Utils.abs maps it to 0.
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert shard_for("polygenelubricants", 50) == 0
    assert shard_for("foo", 50) == 101574 % 50
    assert all(0 <= shard_for(f"group-{i}", 50) < 50 for i in range(1000))

"""Kafka's default partitioner of ours: the partition aiokafka's (and the Java client's) picks."""

from __future__ import annotations

from collections import Counter

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from embedstream.kafka.client.partitioning import murmur2, partition_for
from hypothesis import given
from hypothesis import strategies as st


@given(st.binary(max_size=200))
def test_murmur2_is_kafkas(data: bytes) -> None:
    assert murmur2(data) == aiokafka_murmur2(data)


@pytest.mark.parametrize(
    ("key", "expected"),
    [  # org.apache.kafka.common.utils.Utils.murmur2, as the Java client's tests give it
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_of_the_java_clients_examples(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected & 0xFFFFFFFF


@given(key=st.binary(max_size=64), count=st.integers(min_value=1, max_value=64))
def test_a_keyed_record_goes_where_aiokafka_sends_it(key: bytes, count: int) -> None:
    partitions = list(range(count))
    assert partition_for(key, partitions) == DefaultPartitioner()(key, partitions, partitions)


def test_a_record_without_a_key_goes_to_any_partition() -> None:
    seen = Counter(partition_for(None, [0, 1, 2]) for _ in range(300))
    assert set(seen) == {0, 1, 2}

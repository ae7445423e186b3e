"""The rows of the Kafka flood, floor and timeline scenarios (pure), the options that choose
them, and the timeline's noting wrappers on fake clients."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from embedstream.engine.backend import BatchCall
from embedstream.testing import RecordingBackend
from embedstream.tools.bench.kafka_figures import (
    STAGES,
    Drain,
    cpu_us_per_item,
    flood_rows,
    floor_rows,
    latency_row,
    mixed_rows,
    spans,
    stage_durations,
    stage_rows,
    stages_until,
)
from embedstream.tools.bench.options import (
    HTTP_PATHS,
    SCENARIOS,
    add_cli_arguments,
    sizes_from_args,
)
from embedstream.tools.bench.timeline import (
    Timeline,
    TimelineBackend,
    TimelineConsumer,
    TimelineProducer,
)


def drain(items: int, seconds: float, cpu_s: float = 1.0, expected: int | None = None) -> Drain:
    return Drain(items, seconds, 10, items, cpu_s, 0.5, expected or items)


def parse(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="embedstream bench", exit_on_error=False)
    add_cli_arguments(parser)
    return parser.parse_args(list(args))


# --------------------------------------------------------------------------- flood


def test_flood_rows_give_the_drain_share_and_the_high_latency() -> None:
    alone, flooded = drain(20_000, 2.0), drain(20_000, 2.5)
    rows = flood_rows(alone, flooded, [0.05, 0.06, 0.10, 0.30], 5, 50.0, "Kafka at x")
    assert [r.kind for r in rows] == ["kafka-flood-low", "kafka-flood-low", "kafka-flood-high"]
    assert rows[0].items_per_s == 10_000 and rows[1].items_per_s == 8_000
    assert "(80% of alone)" in rows[1].scenario
    high = rows[2]
    assert high.latency is not None and high.latency.p50_ms == pytest.approx(80.0)
    assert high.failed == 1  # five published, four answered


def test_a_drain_that_did_not_finish_counts_its_missing_items_as_failed() -> None:
    rows = flood_rows(drain(100, 1.0), drain(60, 1.0, expected=100), [], 0, 50.0, "b")
    assert rows[1].failed == 40 and "(60% of alone)" in rows[1].scenario
    assert rows[2].latency is None and rows[2].items == 0


# --------------------------------------------------------------------------- floor


def test_floor_rows_give_cpu_per_item_and_the_ratio_to_the_floor() -> None:
    floor, ours = drain(20_000, 4.0, cpu_s=2.84), drain(20_000, 5.0, cpu_s=4.86)
    rows = floor_rows(floor, ours, "Kafka at x")
    assert "142 µs CPU/item" in rows[0].scenario
    assert "243 µs CPU/item (1.71x floor)" in rows[1].scenario
    assert rows[1].client_cpu_s == 4.86 and rows[0].items_per_s == 5_000


def test_cpu_per_item_of_nothing_is_zero_not_a_division_error() -> None:
    assert cpu_us_per_item(1.0, 0) == 0.0
    assert "0.00x floor" in floor_rows(drain(0, 1.0), drain(10, 1.0), "b")[1].scenario


# --------------------------------------------------------------------------- timeline


def test_stage_durations_span_consecutive_moments_and_skip_missing_ends() -> None:
    moments = {
        "a": {"scheduled": 0.0, "published": 0.01, "fetched": 0.05, "call_start": 0.06,
              "call_done": 0.11, "written": 0.12, "acked": 0.13, "read": 0.2},
        "b": {"scheduled": 1.0, "published": 1.002, "fetched": 0.999},  # noted out of order
    }  # fmt: skip
    spans = stage_durations(moments)
    assert set(spans) == set(STAGES)
    assert spans[("published", "fetched")] == pytest.approx([0.04, 0.0])
    assert spans[("call_start", "call_done")] == pytest.approx([0.05])
    assert spans[("acked", "read")] == pytest.approx([0.07])


def test_stage_rows_until_acked_end_there_for_requests_never_read() -> None:
    """The flood's high requests end at the broker's acknowledgement (no reader)."""
    moments = {str(i): {"scheduled": 0.0, "published": 0.01, "acked": 0.2 * (i + 1)}
               for i in range(5)}  # fmt: skip
    rows = stage_rows(moments, "h", 1.0, last="acked")
    assert stages_until("acked")[-1] == ("written", "acked")
    assert len(rows) == len(STAGES)  # every stage but acked -> read, and the whole way
    assert rows[-1].scenario == "h: scheduled -> acked" and rows[-1].items == 5
    assert rows[-1].latency is not None and rows[-1].latency.p50_ms == pytest.approx(600.0)
    processor = spans(moments, "published", "acked")
    assert processor == pytest.approx([0.19, 0.39, 0.59, 0.79, 0.99])
    lag = latency_row("lag", [0.001] * 99 + [0.5], 1.0, "n")
    assert lag.latency is not None and lag.latency.p50_ms == pytest.approx(1.0)


def test_stage_rows_end_with_the_whole_way() -> None:
    moments = {str(i): {"scheduled": 0.0, "read": 0.1 * (i + 1)} for i in range(10)}
    rows = stage_rows(moments, "p", 1.0)
    assert len(rows) == len(STAGES) + 1
    assert rows[-1].scenario == "p: scheduled -> read" and rows[-1].items == 10
    assert rows[-1].latency is not None and rows[-1].latency.p50_ms == pytest.approx(550.0)
    assert all(r.latency is None for r in rows[:-1])  # no request has the inner moments


class _Record:
    def __init__(self, key: bytes | None) -> None:
        self.key = key


class _Consumer:
    async def getmany(self, *partitions: Any, **options: Any) -> dict[str, list[_Record]]:
        return {"tp": [_Record(b"r1"), _Record(None), _Record(b"r2")]}

    def assignment(self) -> set[str]:
        return {"tp"}


async def test_the_consumer_notes_fetched_once_per_key_and_passes_the_rest_through() -> None:
    timeline = Timeline()
    consumer = TimelineConsumer(_Consumer(), timeline)
    await consumer.getmany(timeout_ms=5)
    first = timeline.moments["r1"]["fetched"]
    await consumer.getmany(timeout_ms=5)  # a redelivery does not move the moment
    assert timeline.moments["r1"]["fetched"] == first and "r2" in timeline.moments
    assert consumer.assignment() == {"tp"}


class _Batch:
    def __init__(self) -> None:
        self.keys: list[bytes | None] = []

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: Any) -> object | None:  # fmt: skip
        if len(self.keys) == 1:
            return None  # full
        self.keys.append(key)
        return object()

    def record_count(self) -> int:
        return len(self.keys)


class _Producer:
    def __init__(self) -> None:
        self.sent: list[_Batch] = []

    def create_batch(self) -> _Batch:
        return _Batch()

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> Any:
        import asyncio

        self.sent.append(batch)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


async def test_the_producer_notes_written_then_acked_for_what_the_batch_took() -> None:
    timeline = Timeline()
    inner = _Producer()
    producer = TimelineProducer(inner, timeline)
    batch = producer.create_batch()
    assert batch.append(timestamp=None, key=b"k1", value=b"v", headers=[]) is not None
    assert batch.append(timestamp=None, key=b"k2", value=b"v", headers=[]) is None
    delivered = await producer.send_batch(batch, "t", partition=0)
    await delivered
    import asyncio

    await asyncio.sleep(0)  # done callbacks run on the next turn of the loop
    assert isinstance(inner.sent[0], _Batch)  # the real batch went to the real producer
    assert set(timeline.moments) == {"k1"}
    assert timeline.moments["k1"]["written"] <= timeline.moments["k1"]["acked"]


async def test_the_backend_notes_each_known_texts_call() -> None:
    timeline = Timeline()
    timeline.ids_by_text.update({"hello": "id-1"})
    backend = TimelineBackend(RecordingBackend(), timeline)
    await backend.embed(BatchCall("m", ["hello", "unknown"], "float", None))
    times = timeline.moments["id-1"]
    assert set(timeline.moments) == {"id-1"} and times["call_start"] <= times["call_done"]


# --------------------------------------------------------------------------- mixed


def test_mixed_rows_give_the_high_p99_as_a_multiple_of_the_high_drain_alone() -> None:
    alone = [0.1 * k for k in range(1, 11)]  # the tenth high result acked 1.0 s in
    mixed = [0.2 * k for k in range(1, 11)]  # P99 about 1.98 s
    whole = drain(100, 4.0)
    rows = mixed_rows(alone, mixed, 10, whole, (1.5, 2.5), "Kafka at x")
    assert [r.kind for r in rows] == ["kafka-mixed-high", "kafka-mixed-high", "kafka-mixed-drain"]
    assert "drained in 1.00 s" in rows[0].scenario and rows[0].seconds == pytest.approx(1.0)
    assert "+ 90 low: high P99 1.98x alone" in rows[1].scenario
    assert "join 1.5 s" in rows[0].note and "join 2.5 s" in rows[1].note
    assert rows[1].latency is not None and rows[1].latency.p99_ms == pytest.approx(1982.0)
    assert rows[2].items_per_s == 25.0


def test_mixed_rows_count_high_items_never_acked_and_divide_by_no_zero() -> None:
    rows = mixed_rows([], [0.5], 3, drain(1, 1.0, expected=30), (0.0, 0.0), "b")
    assert rows[0].failed == 3 and rows[0].latency is None
    assert rows[1].failed == 2 and "high P99 0.00x alone" in rows[1].scenario


# --------------------------------------------------------------------------- options


def test_the_new_scenarios_and_their_sizes_are_options() -> None:
    ns = parse("--scenarios", "kafka-flood,kafka-floor", "--flood-items", "7", "--timeline")
    assert ns.scenarios == ("kafka-flood", "kafka-floor") and ns.flood_items == 7
    assert ns.timeline and "kafka-floor" in SCENARIOS
    assert parse("--http-path", "both").http_path == "both" and HTTP_PATHS["both"] == (True, False)


def test_kafka_mixed_is_a_scenario_with_a_size_of_its_own() -> None:
    ns = parse("--scenarios", "kafka-mixed", "--mixed-items", "300")
    assert ns.scenarios == ("kafka-mixed",) and sizes_from_args(ns).mixed_items == 300
    assert sizes_from_args(parse()).mixed_items == 100_000
    assert sizes_from_args(parse("--quick")).mixed_items == 5_000


def test_a_poisson_variant_names_its_settings() -> None:
    arms = parse("--poisson-ab", "linger_ms=0,fetch_max_wait_ms=5", "--poisson-ab", "max_wait_ms=5")
    assert arms.poisson_ab[0].result_linger_ms == 0
    assert arms.poisson_ab[0].settings == (("fetch_max_wait_ms", 5),)
    assert arms.poisson_ab[1].settings == (("max_wait_ms", 5),)


@pytest.mark.parametrize("text", ["linger_ms", "linger_ms=x", "colour=3", ""])
def test_a_bad_poisson_variant_is_refused_by_the_parser(text: str) -> None:
    with pytest.raises(argparse.ArgumentError):
        parse("--poisson-ab", text)

from __future__ import annotations

from embedstream.kafka.outputs.result_writer import Output
from embedstream.kafka.outputs.transactions import Outbox, transactional_id
from embedstream.kafka.outputs.work import Origin


def out(offset: int, topic: str = "results") -> Output:
    return Output(Origin("in", 0, offset), topic, b"k", b"v%d" % offset, [])


def test_below_takes_only_finished_offsets_in_order() -> None:
    box = Outbox()
    for offset in (5, 2, 9, 3):
        box.stage(out(offset))
    box.stage(out(3, "dlq"))
    assert [(o.origin.offset, o.topic) for o in box.below(6)] == [
        (2, "results"), (3, "results"), (3, "dlq"), (5, "results"),
    ]  # fmt: skip
    box.drop_below(6)
    assert [o.origin.offset for o in box.below(100)] == [9]
    assert len(box) == 1


def test_transactional_id_is_stable_per_partition() -> None:
    assert transactional_id("g", "embed.requests.low", 3) == "embedstream-g-embed.requests.low-3"
    assert transactional_id("g", "t", 1) != transactional_id("g", "t", 2)

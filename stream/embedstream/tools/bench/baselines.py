"""The benchmarks' before arms, built from outside the engine: the engine has no switch for
them (a switch nobody sets in production is a setting that carries no choice).

- :func:`calls_fifo`: a batcher whose items arrive without their source, so every bucket is
  one FIFO (kafka-fairness's baseline beside the calls shared by weight);
- :func:`without_fill_rule`: while it is entered, a call takes whatever is buffered when a
  slot frees (`core/policy.fill_target` answers "no target"), the rule's before arm.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from embedstream.core.lanes import BucketKey, Source
from embedstream.engine import batcher as batcher_module
from embedstream.engine.batcher import Batcher


def calls_fifo(batcher: Batcher[Any]) -> None:
    """From now on, ``batcher`` buffers every item as if it had no source."""
    add, add_all = batcher.add, batcher.add_all

    def add_without_source(
        key: BucketKey, tokens: int, payload: Any, source: Source = None
    ) -> None:
        add(key, tokens, payload, None)

    def add_all_without_source(
        key: BucketKey, source: Source, entries: Sequence[tuple[int, Any]]
    ) -> None:
        add_all(key, None, entries)

    batcher.add = add_without_source  # type: ignore[method-assign]
    batcher.add_all = add_all_without_source  # type: ignore[method-assign]


@contextlib.contextmanager
def without_fill_rule() -> Iterator[None]:
    """Every batcher of this process without the fill rule until the block ends."""
    rule = vars(batcher_module)["fill_target"]  # the name the batcher calls
    setattr(batcher_module, "fill_target", lambda *args, **kwargs: None)  # noqa: B010
    try:
        yield
    finally:
        setattr(batcher_module, "fill_target", rule)  # noqa: B010

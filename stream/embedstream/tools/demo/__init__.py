"""``embedstream demo``: the whole pipeline on one machine with nothing installed but the wheel.

A sparse phase (requests one by one: calls of about one input) and then a burst (all at once:
a backlog, and batches that grow with it), each summarised in a table, then every request's
outcome read back from the topics. :mod:`~embedstream.tools.demo.summary` is the pure model of
the summary, :mod:`~embedstream.tools.demo.app` runs the broker, provider and processor
(imported only when the demo runs: it brings the whole service with it).
"""

from embedstream.tools.demo.summary import (
    CacheFigures,
    LaneFigures,
    Outcomes,
    Phase,
    PhaseFigures,
    latencies_by_phase,
    measure,
    percentile,
    plan,
    render,
)
from embedstream.tools.demo.texts import sample_texts

__all__ = [
    "CacheFigures",
    "LaneFigures",
    "Outcomes",
    "Phase",
    "PhaseFigures",
    "latencies_by_phase",
    "measure",
    "percentile",
    "plan",
    "render",
    "sample_texts",
]

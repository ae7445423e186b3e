"""``embedstream demo``: the whole pipeline on one machine with nothing installed but the wheel.

A sparse phase (requests one by one: calls of about one input), then the lanes phase (a
backlog of low requests at once, batches that grow with it, and high requests arriving
meanwhile, served first), each summarised in a table, then every request's outcome read back
from the topics. :mod:`~embedstream.tools.demo.phases` plans the request phases,
:mod:`~embedstream.tools.demo.summary` is the pure model of the summary,
:mod:`~embedstream.tools.demo.app` runs the broker, provider and processor (imported only
when the demo runs: it brings the whole service with it).
"""

from embedstream.tools.demo.phases import LanesPhase, Phase, backlog_drained, plan
from embedstream.tools.demo.summary import (
    CacheFigures,
    LaneFigures,
    Outcomes,
    PhaseFigures,
    lanes_lines,
    latencies_by_phase,
    measure,
    percentile,
    render,
)
from embedstream.tools.demo.texts import sample_texts, text_stream

__all__ = [
    "CacheFigures",
    "LaneFigures",
    "LanesPhase",
    "Outcomes",
    "Phase",
    "PhaseFigures",
    "backlog_drained",
    "lanes_lines",
    "latencies_by_phase",
    "measure",
    "percentile",
    "plan",
    "render",
    "sample_texts",
    "text_stream",
]

"""`embedstream bench`: the engine and the Kafka path measured against the provider's bound.

``model`` (pure figures: bounds, percentiles, rows, recommendations), ``workload`` (texts and
arrivals), ``processes`` (the simulator and processors as child processes, their CPU),
``recorder`` (every provider call as the client saw it), ``scenarios`` (in process),
``kafka_scenarios`` (through a broker), ``scaleout`` (1..N processors in one group),
``report`` and ``plots`` (the table, JSON and PNGs), ``options`` and ``app`` (the command).
"""

from embedstream.errors import EmbedStreamError


class BenchError(EmbedStreamError):
    """A benchmark cannot run as asked (a missing extra, a child that would not start): one
    line for the user, not a traceback."""

    reason = "bench"

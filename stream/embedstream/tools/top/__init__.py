"""``embedstream top``: a live terminal view of one or more processors' /metrics.

:mod:`~embedstream.tools.top.readings` parses and derives rates, :mod:`~embedstream.tools.top.rows`
turns them into rows, :mod:`~embedstream.tools.top.layout` lays rows out as rich renderables
(all pure); :mod:`~embedstream.tools.top.app` polls and draws.
"""

from embedstream.tools.top.app import (
    DEFAULT_TARGET,
    Poller,
    add_cli_arguments,
    normalise_target,
    run_top,
    run_top_from_args,
)
from embedstream.tools.top.histogram import Histogram
from embedstream.tools.top.layout import Fitted, Screen, fit_columns, render
from embedstream.tools.top.rates import Rates, TargetView, compute_rates
from embedstream.tools.top.readings import PartitionLag, Snapshot, parse_exposition
from embedstream.tools.top.rows import Row, State, partition_rows, target_row, total_row

__all__ = [
    "DEFAULT_TARGET",
    "Fitted",
    "Histogram",
    "PartitionLag",
    "Poller",
    "Rates",
    "Row",
    "Screen",
    "Snapshot",
    "State",
    "TargetView",
    "add_cli_arguments",
    "compute_rates",
    "fit_columns",
    "normalise_target",
    "parse_exposition",
    "partition_rows",
    "render",
    "run_top",
    "run_top_from_args",
    "target_row",
    "total_row",
]

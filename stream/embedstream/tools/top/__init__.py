"""``embedstream top``: a live terminal view of one or more processors' /metrics.

:mod:`embedstream.tools.top.model` is pure (parse, rates, layout);
:mod:`embedstream.tools.top.app` polls and draws.
"""

from embedstream.tools.top.app import (
    DEFAULT_TARGET,
    add_cli_arguments,
    normalise_target,
    run_top,
    run_top_from_args,
)
from embedstream.tools.top.model import (
    Histogram,
    Rates,
    Row,
    Snapshot,
    TargetView,
    compute_rates,
    parse_exposition,
    render_frame,
    target_row,
    total_row,
)

__all__ = [
    "DEFAULT_TARGET",
    "Histogram",
    "Rates",
    "Row",
    "Snapshot",
    "TargetView",
    "add_cli_arguments",
    "compute_rates",
    "normalise_target",
    "parse_exposition",
    "render_frame",
    "run_top",
    "run_top_from_args",
    "target_row",
    "total_row",
]

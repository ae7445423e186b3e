"""What a bench run ends with: the scenarios' results kept as they come, then the
recommendations, the JSON and plots asked for, and the printed report.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
from rich.console import Console

from embedstream.settings import Settings
from embedstream.tools.bench.context import ScenarioResult
from embedstream.tools.bench.figures import (
    LatencyModel,
    LineFit,
    Recommendation,
    ScaleOutRow,
    call_overhead_ms,
    fit_call_latency,
    recommend,
)
from embedstream.tools.bench.options import (
    BENCH_SETTINGS,
    Sizes,
)
from embedstream.tools.bench.plots import write_plots
from embedstream.tools.bench.report import (
    bounds_lines,
    fit_line,
    print_report,
    recommendation_lines,
    report_document,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
REPORT_WIDTH = 160  # when stdout is no terminal: wide enough for the table's ten columns


class Runner:
    """Runs scenarios one by one, keeping what each gave and why any failed."""

    def __init__(self) -> None:
        self.results: list[ScenarioResult] = []
        self.scale_rows: list[ScaleOutRow] = []
        self.failures: list[str] = []

    async def attempt(self, label: str, step: Callable[[], Awaitable[T]]) -> T | None:
        try:
            return await step()
        except Exception as exc:  # one scenario's failure must not lose the others' figures
            log.debug("scenario %s failed", label, exc_info=True)
            self.failures.append(f"{label} FAILED: {type(exc).__name__}: {exc}")
            return None


def finish_run(
    ns: argparse.Namespace,
    model: LatencyModel,
    settings: Settings,
    sizes: Sizes,
    runner: Runner,
    log_dir: Path,
    wall_s: float,
) -> int:
    rows = [r.row for r in runner.results]
    simulated_rows = [r for r in runner.results if not r.row.kind.startswith("endpoint")]
    recommendations: dict[str, Recommendation] = {}
    notes = bounds_lines(model, ns.tokens, sizes.callers) if simulated_rows else []
    simulated_calls = [c for r in simulated_rows for c in r.calls]
    overhead = call_overhead_ms(simulated_calls, model, ns.tokens)
    if simulated_rows or runner.scale_rows or not rows:
        recommendations["simulated"] = recommend(model, ns.target_p99_ms, ns.tokens, overhead)
        notes += recommendation_lines(
            "recommended on this latency model", recommendations["simulated"]
        )
    fit: LineFit | None = None
    endpoint_calls = [
        c for r in runner.results if r.row.kind.startswith("endpoint") for c in r.calls
    ]
    if endpoint_calls:
        fit = fit_call_latency(endpoint_calls)
    if fit is not None:
        fitted = LatencyModel(fit.base_ms, 0.0, fit.per_item_ms, ns.capacity)
        recommendations["endpoint"] = recommend(fitted, ns.target_p99_ms, ns.tokens)
        notes.append(fit_line(fit))
        notes += recommendation_lines(
            f"recommended for the endpoint (its capacity taken as --capacity {ns.capacity})",
            recommendations["endpoint"],
        )
    notes += runner.failures
    if ns.json is not None:
        document = report_document(
            args=_args_json(ns), settings={n: getattr(settings, n) for n in BENCH_SETTINGS},
            model=model, tokens=ns.tokens, callers=sizes.callers, results=runner.results,
            scale_rows=runner.scale_rows, recommendations=recommendations,
            endpoint_fit=fit, wall_s=wall_s,
        )  # fmt: skip
        ns.json.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        notes.append(f"figures written to {ns.json}")
    if ns.plots is not None:
        written = write_plots(ns.plots, runner.results)
        notes.append(f"plots written: {', '.join(str(p) for p in written) or 'none (no data)'}")
    if runner.failures:
        notes.append(f"logs of the child processes kept in {log_dir}")
    else:
        shutil.rmtree(log_dir, ignore_errors=True)
    notes.append(f"wall time {wall_s:.0f} s on {os.cpu_count()} CPUs")
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else REPORT_WIDTH)
    print_report(console, rows, runner.scale_rows, notes)
    return 1 if runner.failures else 0


def _args_json(ns: argparse.Namespace) -> dict[str, Any]:
    """The command's options as given, the API key masked."""
    doc: dict[str, Any] = {}
    for key, value in vars(ns).items():
        if key == "api_key":
            value = "***" if value else None
        doc[key] = str(value) if isinstance(value, Path) else value
    return doc

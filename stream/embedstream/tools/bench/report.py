"""What `embedstream bench` prints and writes: the tables, the recommendation and the JSON."""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from embedstream.tools.bench.context import ScenarioResult
from embedstream.tools.bench.figures import LatencyModel, LineFit, Recommendation, Row, ScaleOutRow

DASH = "-"


def _num(value: float | None, spec: str = ",.0f") -> str:
    return DASH if value is None else format(value, spec)


def results_table(rows: Sequence[Row]) -> Table:
    table = Table(title="embedstream bench", title_justify="left")
    for name in ("scenario", "items/s", "% of bound", "P50 ms", "P95 ms", "P99 ms", "calls",
                 "mean batch", "CPU s", "CPU µs/item", "provider CPU s"):  # fmt: skip
        table.add_column(name, justify="left" if name == "scenario" else "right")
    for row in rows:
        latency = row.latency
        scenario = row.scenario + (f" ({row.failed:,} failed)" if row.failed else "")
        table.add_row(
            scenario,
            _num(row.items_per_s),
            _num(row.pct_of_bound, ".0f"),
            _num(latency.p50_ms if latency else None, ",.1f"),
            _num(latency.p95_ms if latency else None, ",.1f"),
            _num(latency.p99_ms if latency else None, ",.1f"),
            f"{row.calls:,}",
            _num(row.mean_batch, ",.1f"),
            f"{row.client_cpu_s:.1f}",
            _num(row.cpu_us_per_item, ",.0f"),
            _num(row.provider_cpu_s, ".1f"),
        )
    return table


def scale_out_table(rows: Sequence[ScaleOutRow]) -> Table:
    table = Table(title="scale-out: one group draining a backlog", title_justify="left")
    for name in ("processors", "items/s", "% of bound", "CPU s / 1,000 items",
                 "provider CPU s / 1,000", "calls", "mean batch", "published in s",
                 "settled after s"):  # fmt: skip
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(
            str(row.processors),
            _num(row.items_per_s),
            _num(row.pct_of_bound, ".0f"),
            _num(row.cpu_s_per_1000, ".2f"),
            _num(row.provider_cpu_s_per_1000, ".2f"),
            f"{row.calls:,}",
            _num(row.mean_batch, ",.1f"),
            f"{row.publish_s:.1f}",
            f"{row.settle_s:.1f}",
        )
    return table


def bounds_lines(model: LatencyModel | None, tokens: float, callers: int) -> list[str]:
    if model is None:
        return []
    batch = model.largest_batch(tokens)
    budget = ""
    if model.rpm or model.tpm:
        budget = f", budgets {model.rpm:g} requests/min and {model.tpm:g} tokens/min (0: none)"
    return [
        f"provider: L(b) = {model.base_ms:g} ms + {model.per_token_ms:g} ms/token + "
        f"{model.per_input_ms:g} ms/input, {model.capacity} calls at once, "
        f"texts of {tokens:g} tokens{budget}",
        f"bounds: X_phys = K*B/L(B) = {model.physical_bound(tokens):,.0f} items/s "
        f"(B = {batch:,}, L(B) = {model.latency_ms(batch, tokens):,.0f} ms); "
        f"closed loop C/L(1) = {model.closed_loop_bound(callers, tokens):,.0f} items/s "
        f"for {callers} callers; open loop: the offered rate",
    ]


def recommendation_lines(title: str, rec: Recommendation) -> list[str]:
    lines = [f"{title} (target P99 {rec.target_p99_ms:g} ms):"]
    lines += [f"  {reason}" for reason in rec.reasons]
    lines.append(
        f"  => --max-concurrency {rec.max_concurrency} --max-wait-ms {rec.max_wait_ms:g} "
        f"--scale-factor {rec.scale_factor:g}"
    )
    return lines


def fit_line(fit: LineFit) -> str:
    return (
        f"endpoint: L(b) fitted to {fit.calls} calls = {fit.base_ms:.1f} ms + "
        f"{fit.per_item_ms:.3f} ms/input"
    )


def print_report(
    console: Console,
    rows: Sequence[Row],
    scale_rows: Sequence[ScaleOutRow],
    notes: Sequence[str],
) -> None:
    if rows:
        console.print(results_table(rows))
        console.print(
            "items/s over the measured window; % of bound against each scenario's bound; "
            "latency from the scheduled arrival (open loop, Kafka Poisson), the call (closed "
            "loop) or the submission (backlog); CPU s of this process (engine, load, Kafka "
            "clients) and of the simulator's",
            highlight=False,
        )
    if scale_rows:
        console.print(scale_out_table(scale_rows))
    for line in notes:
        console.print(line, highlight=False, soft_wrap=True)


def report_document(
    *,
    args: dict[str, Any],
    settings: dict[str, Any],
    model: LatencyModel | None,
    tokens: float,
    callers: int,
    results: Sequence[ScenarioResult],
    scale_rows: Sequence[ScaleOutRow],
    recommendations: dict[str, Recommendation],
    endpoint_fit: LineFit | None,
    wall_s: float,
) -> dict[str, Any]:
    """Every figure of the run, for --json."""
    bounds = None
    if model is not None:
        bounds = {
            "tokens_per_text": tokens,
            "largest_batch": model.largest_batch(tokens),
            "x_phys_per_s": model.physical_bound(tokens),
            "closed_loop_per_s": model.closed_loop_bound(callers, tokens),
            "callers": callers,
        }
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "wall_s": wall_s,
        "args": args,
        "engine_settings": settings,
        "latency_model": None if model is None else asdict(model),
        "bounds": bounds,
        "rows": [r.row.to_json() for r in results],
        "batch_timelines": {r.row.scenario: r.timeline for r in results},
        "scale_out": [row.to_json() for row in scale_rows],
        "recommendations": {k: v.to_json() for k, v in recommendations.items()},
        "endpoint_fit": None if endpoint_fit is None else asdict(endpoint_fit),
    }

"""PNG plots of a bench run, with matplotlib from the optional `bench` extra.

- ``latency_vs_load.png``: P50/P95/P99 against the offered rate (open loop, Kafka Poisson);
- ``throughput_vs_bound.png``: each scenario's items/s as a share of its bound;
- ``batch_size_over_time.png``: the inputs of every call against its start, per scenario.

Figures are drawn on matplotlib's Agg canvas through ``Figure`` (no pyplot, no display).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from embedstream.tools.bench import BenchError
from embedstream.tools.bench.context import ScenarioResult
from embedstream.tools.bench.figures import Row

if TYPE_CHECKING:
    from matplotlib.figure import Figure

INSTALL_HINT = "--plots needs matplotlib: pip install 'embedstream[bench]'"
MAX_TIMELINES = 9


def require_matplotlib() -> None:
    """Fail in one line before anything runs when the extra is missing."""
    try:
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise BenchError(INSTALL_HINT) from None


def write_plots(directory: Path, results: Sequence[ScenarioResult]) -> list[Path]:
    """Every plot the run has data for, in ``directory`` (created if need be)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"cannot create --plots directory {directory}: {exc.strerror}") from exc
    rows = [r.row for r in results]
    written = []
    for name, figure in (
        ("latency_vs_load.png", latency_vs_load(rows)),
        ("throughput_vs_bound.png", throughput_vs_bound(rows)),
        ("batch_size_over_time.png", batch_size_over_time(results)),
    ):
        if figure is not None:
            path = directory / name
            figure.savefig(path, dpi=110)
            written.append(path)
    return written


def _figure(width: float = 7.0, height: float = 4.2) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def latency_vs_load(rows: Sequence[Row]) -> Figure | None:
    series = {
        kind: sorted((r for r in rows if r.kind == kind and r.latency and r.offered_per_s),
                     key=lambda r: r.offered_per_s or 0.0)
        for kind in ("open", "kafka-poisson")
    }  # fmt: skip
    if not any(series.values()):
        return None
    figure = _figure()
    axes = figure.add_subplot()
    styles = {"open": "-o", "kafka-poisson": "--s"}
    for kind, points in series.items():
        if not points:
            continue
        rates = [r.offered_per_s or 0.0 for r in points]
        for label, values in (
            ("P50", [r.latency.p50_ms for r in points if r.latency]),
            ("P95", [r.latency.p95_ms for r in points if r.latency]),
            ("P99", [r.latency.p99_ms for r in points if r.latency]),
        ):
            where = "in process" if kind == "open" else "Kafka"
            axes.plot(rates, values, styles[kind], label=f"{label} {where}")
    values = [v for points in series.values() for r in points if r.latency
              for v in (r.latency.p50_ms, r.latency.p99_ms)]  # fmt: skip
    if min(values) > 0 and max(values) / min(values) > 20:
        axes.set_yscale("log")  # a queue that runs away would flatten everything else
    axes.set_xlabel("offered load (items/s)")
    axes.set_ylabel("latency (ms)")
    axes.set_title("Latency percentiles against offered load")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def throughput_vs_bound(rows: Sequence[Row]) -> Figure | None:
    measured = [r for r in rows if r.pct_of_bound is not None]
    if not measured:
        return None
    figure = _figure(7.0, 0.8 + 0.45 * len(measured))
    axes = figure.add_subplot()
    labels = [r.scenario for r in measured]
    shares = [r.pct_of_bound or 0.0 for r in measured]
    bars = axes.barh(labels, shares, color="tab:blue")
    axes.bar_label(bars, labels=[f"{s:.0f}%" for s in shares], padding=3, fontsize="small")
    axes.axvline(100, color="black", linewidth=1)
    axes.axvline(90, color="grey", linestyle=":", linewidth=1)
    axes.invert_yaxis()  # in the order they ran, top to bottom
    axes.set_xlim(0, max(110.0, max(shares) * 1.15))
    axes.set_xlabel("throughput, % of the scenario's bound")
    axes.set_title("Throughput as a share of the bound")
    return figure


def batch_size_over_time(results: Sequence[ScenarioResult]) -> Figure | None:
    with_calls = [r for r in results if r.timeline][:MAX_TIMELINES]
    if not with_calls:
        return None
    columns = min(3, len(with_calls))
    lines = -(-len(with_calls) // columns)
    figure = _figure(4.0 * columns, 3.0 * lines)
    for index, result in enumerate(with_calls, start=1):
        axes = figure.add_subplot(lines, columns, index)
        times = [t for t, _ in result.timeline]
        sizes = [size for _, size in result.timeline]
        axes.scatter(times, sizes, s=4, alpha=0.6)
        axes.set_title(result.row.scenario, fontsize="small")
        axes.set_xlabel("s", fontsize="small")
        axes.set_ylabel("inputs per call", fontsize="small")
        axes.set_ylim(bottom=0)
        axes.grid(True, alpha=0.3)
    figure.suptitle("Batch size over time")
    return figure

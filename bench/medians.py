"""Medians over interleaved rounds of `embedstream bench --json`: one line per row name.

    embedstream bench ... --json r1-online.json   (and r2-, r3-: rounds run interleaved)
    python bench/medians.py r*-online.json

Rows are matched by their scenario name up to its first "(" (names carry a measured share,
e.g. "(88% of alone)", that differs between rounds). For each: the median items/s, P50 and
P99 ms over the rounds, and the range, so a change within the noise shows as one.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _name(row: dict[str, Any]) -> str:
    """The row's name without its measured figures ("(88% of alone)", "93 µs CPU/item")."""
    name = str(row["scenario"]).split(" (")[0]
    return re.sub(r", [0-9.,]+ µs CPU/[a-z]+.*$", "", name)


def _rate(row: dict[str, Any]) -> float:
    seconds = float(row.get("seconds") or 0.0)
    return float(row["items"]) / seconds if seconds > 0 else 0.0


def _figure(values: list[float]) -> str:
    if not values:
        return "-"
    middle = statistics.median(values)
    return f"{middle:,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def main(paths: list[str]) -> None:
    rates: dict[str, list[float]] = defaultdict(list)
    p50: dict[str, list[float]] = defaultdict(list)
    p99: dict[str, list[float]] = defaultdict(list)
    order: list[str] = []
    for path in paths:
        for row in json.loads(Path(path).read_text())["rows"]:
            name = _name(row)
            if name not in order:
                order.append(name)
            rates[name].append(_rate(row))
            latency = row.get("latency")
            if latency:
                p50[name].append(float(latency["p50_ms"]))
                p99[name].append(float(latency["p99_ms"]))
    print(f"medians of {len(paths)} runs [min-max]\n")
    print("| row | items/s | P50 ms | P99 ms |")
    print("|---|---:|---:|---:|")
    for name in order:
        print(f"| {name} | {_figure(rates[name])} | {_figure(p50[name])} | {_figure(p99[name])} |")


if __name__ == "__main__":
    main(sys.argv[1:])

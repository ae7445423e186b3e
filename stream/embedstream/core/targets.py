"""An upper lane held to a latency target: how big the lower lanes' calls may be while it is
active, steered by how long its own items take. Pure: time and latencies come in.

Each call of the upper lane reports how long its oldest item took, from arrival in the batcher
to the call's answer (the lane's own tail inside the process). Above the target, the lower
lanes' calls are cut to half their size (at most once per ``cooldown_s``, so a burst of slow
answers to calls sent before the last cut does not halve it again), never under
``floor_items``; at or below ``relax`` of the target they grow back by a sixteenth of the
full size per answer, up to the batch limit. The cap starts at ``start_items``.

This steers the *size* of lower calls only. The adaptive concurrency limit
(``target_latency_ms`` above 0, ``core/concurrency.py``) decides how *many* calls are out in all,
from the provider's overload signals (429, 503, calls slower than ``target_latency_ms``);
the two act on different knobs, so they never undo each other: a lane target cuts big lower
calls that a small upper call waits behind, the limit backs off when the provider as a whole is
overloaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class LaneTarget:
    target_s: float
    max_items: int  # the batch limit: the cap never grows past it
    start_items: int
    floor_items: int = 32
    relax: float = 0.5  # grow back only while well under the target
    cooldown_s: float = 0.25
    _cap: int = field(init=False)
    _last_cut: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if not self.target_s > 0:
            raise ValueError(f"target_s must be > 0, got {self.target_s}")
        if not 1 <= self.floor_items <= self.max_items:
            raise ValueError("need 1 <= floor_items <= max_items")
        if not 0 < self.relax < 1:
            raise ValueError(f"relax must be in (0, 1), got {self.relax}")
        self._cap = max(self.floor_items, min(self.start_items, self.max_items))

    @property
    def lower_call_items(self) -> int:
        """Most inputs in a lower lane's call while the upper lane is active."""
        return self._cap

    def observe(self, latency_s: float, now: float) -> None:
        """An upper-lane call answered; its oldest item took ``latency_s``."""
        if latency_s > self.target_s:
            if self._last_cut is None or now - self._last_cut >= self.cooldown_s:
                self._cap = max(self.floor_items, self._cap // 2)
                self._last_cut = now
        elif latency_s <= self.relax * self.target_s:
            self._cap = min(self.max_items, self._cap + max(1, self.max_items // 16))

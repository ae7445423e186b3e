"""Models whose Kafka work waits because the provider answered that it does not serve them
(a 404 naming the model). Pure: the clock reading is passed in.

An unknown model pauses that model's work only, never every model's: its items are neither
dead-lettered (the model may be deployed in a minute; a typo in a producer is fixed by a
producer) nor sent again call after call. One held batch of the model asks the provider
again on its backoff (`engine/calls.py`); while it does, the model's other buffered items
stay in the batcher, and every other model's calls go on. The provider stays usable:
readiness and the other lanes are not affected.

A pause lasts as long as the held batch's wait plus PAUSE_SLACK_S, renewed at each refusal,
so a pause whose batch went away (a bounded shutdown abandons it) ends by itself; the first
success of the model ends it at once.
"""

from __future__ import annotations

PAUSE_SLACK_S = 1.0


class ModelPauses:
    def __init__(self) -> None:
        self._until: dict[str, float] = {}  # model -> when its pause ends

    def pause(self, model: str, now: float, wait_s: float) -> None:
        """The provider refused ``model``; its held batch asks again in ``wait_s``."""
        self._until[model] = max(self._until.get(model, now), now + wait_s + PAUSE_SLACK_S)

    def resume(self, model: str) -> None:
        """A call of ``model`` succeeded."""
        self._until.pop(model, None)

    def paused(self, model: str, now: float) -> bool:
        until = self._until.get(model)
        if until is None:
            return False
        if now >= until:
            del self._until[model]
            return False
        return True

    def __bool__(self) -> bool:
        return bool(self._until)

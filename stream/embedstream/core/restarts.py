"""When a supervised lane process that ended is started again, or not. Pure: the clock
reading and the exit come in.

- A process ending while nobody asked it to stop crashed: it is started again after a backoff
  that doubles from ``first_s`` up to ``cap_s``, and starts from ``first_s`` again once a run
  lasted ``healthy_after_s`` (one crash an hour is not a crash loop).
- A process that ends with the exit status of a mistake (2: a setting at fault, a port taken,
  one line on stderr) within ``start_window_s`` of its start, twice in a row, will end so
  again: the supervisor gives up and ends with that status, rather than restarting it for
  ever. Once is not enough: the port the supervisor chose for its metrics may have been taken
  meanwhile by another process, and its next start gets another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MISTAKE_STATUS = 2  # `embedstream` exits 2 on a user's mistake (cli/commands.py)


@dataclass(frozen=True, slots=True)
class Restart:
    in_s: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    status: int
    reason: str


@dataclass(slots=True)
class RestartPolicy:
    first_s: float = 1.0
    cap_s: float = 30.0
    healthy_after_s: float = 60.0
    start_window_s: float = 10.0
    mistakes_to_give_up: int = 2
    _backoff_s: float = field(default=0.0, init=False)
    _mistakes: int = field(default=0, init=False)  # early mistake exits in a row

    def after_exit(self, status: int, started_at: float, now: float) -> Restart | GiveUp:
        """What to do about a process that started at ``started_at`` and ended with
        ``status`` at ``now``, while nobody asked it to stop."""
        ran_s = now - started_at
        if status == MISTAKE_STATUS and ran_s < self.start_window_s:
            self._mistakes += 1
            if self._mistakes >= self.mistakes_to_give_up:
                return GiveUp(
                    status,
                    f"it exited with status {status} {ran_s:.1f}s after start, "
                    f"{self._mistakes} times in a row",
                )
        else:
            self._mistakes = 0
        if ran_s >= self.healthy_after_s or self._backoff_s == 0.0:
            self._backoff_s = self.first_s
        else:
            self._backoff_s = min(self.cap_s, self._backoff_s * 2)
        return Restart(self._backoff_s)

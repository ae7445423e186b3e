"""A tmux pane for tests of what a person sees in a terminal: ``capture-pane`` is the screen."""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

STREAM = Path(__file__).resolve().parents[1] / "stream"


class Pane:
    """A detached tmux session on a server of its own (never the user's tmux)."""

    def __init__(self, width: int, height: int, command: list[str]) -> None:
        self.socket = f"embedstream-test-{uuid.uuid4().hex[:8]}"
        # pytest exports COLUMNS=80 and LINES=24, which rich would obey: the pane's own size
        # must decide.
        env = f"env -u COLUMNS -u LINES PYTHONPATH={shlex.quote(str(STREAM))}"
        shell = f"{env} {shlex.join(command)}; echo EXITED $?; sleep 30"
        self._tmux("new-session", "-d", "-x", str(width), "-y", str(height), shell)
        self._socket_path = Path(self._tmux("display-message", "-p", "#{socket_path}").strip())

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return done.stdout

    def capture(self, *, colours: bool = False) -> str:
        # -J joins lines the terminal wrapped, so a line too wide shows as one long line.
        return self._tmux("capture-pane", "-p", "-J", *(["-e"] if colours else []))

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", *keys)

    async def wait_for(self, check: Callable[[str], bool], timeout_s: float = 30) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            # The fake processor answers on this loop: capture off it.
            text = await asyncio.to_thread(self.capture)
            if check(text):
                return text
            assert loop.time() < deadline, text
            await asyncio.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)
        self._socket_path.unlink(missing_ok=True)  # tmux leaves the socket file behind

"""This machine's own processes and ports: a child that dies with its parent, a free loopback
port. For the supervisor of one host's lane processes, the demo and the bench."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import sys

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """In a child's process before it runs (Linux): the kernel sends it SIGTERM when its
    parent dies, so a parent killed without a goodbye leaves no child running (a lane process
    drains and exits; a demo's broker stops)."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    """A loopback port free now (another process may take it before it is bound)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port

"""The test kit: fakes of every I/O boundary, a fake clock and throwaway servers.

Real, typed code that the tests and benchmarks share; the runtime never imports it (an
import-linter contract says so). ``backends`` (an in-memory embedding provider), ``clock``,
``kafka`` (an in-memory cluster behind the Kafka shell's Protocols), ``redis`` (a throwaway
``redis-server``) and ``waiting`` (``eventually``, ``settled``).
"""

from __future__ import annotations

from embedstream.testing.backends import RecordingBackend, reject_texts_containing, vector_for
from embedstream.testing.clock import FakeClock
from embedstream.testing.waiting import eventually, settled

__all__ = [
    "FakeClock",
    "RecordingBackend",
    "eventually",
    "reject_texts_containing",
    "settled",
    "vector_for",
]

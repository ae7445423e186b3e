"""`embedstream verify`: read every request and outcome topic once and check delivery.

Every request id must end with a result or a dead letter (never both), results must carry the
vector of their own id's text (when checked against the simulator), and duplicates must stay
within what the caller tolerates. :mod:`embedstream.tools.verify.report` is the pure core;
:mod:`embedstream.tools.verify.app` reads Kafka through :mod:`embedstream.kafka.client.reader`.
"""

from __future__ import annotations

from embedstream.tools.verify.report import (
    DeadLetter,
    ExpectedVector,
    Location,
    RequestInfo,
    ResultRecord,
    VerificationReport,
    build_report,
)

__all__ = [
    "DeadLetter",
    "ExpectedVector",
    "Location",
    "RequestInfo",
    "ResultRecord",
    "VerificationReport",
    "build_report",
]

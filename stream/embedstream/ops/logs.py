"""Log setup: plain or JSON lines, with other libraries' repetitive lines summarised.

Messages carry request ids at most, never texts or keys, and every line passes a
:class:`~embedstream.ops.redact.Redactor` that masks secrets.

Two libraries would otherwise drown our own lines: the HTTP client under openai logs one INFO
line per call (``HTTP Request: POST ...``), and aiokafka logs an ERROR per reconnect attempt
while a broker is down (hundreds in a ten-second outage). :class:`SummarisingHandler` sits in
front of the real handler and, per :class:`Rule`, lets the first line of a run of similar lines
through (or, for a broker storm, holds it back), counts the rest, and writes one summary per
interval while the run lasts and one when it ends. At DEBUG nothing is summarised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import orjson

from embedstream.ops.redact import Redactor

Clock = Callable[[], float]

# How long similar lines are counted before one summary line says how many there were.
SUMMARY_INTERVAL_S = 10.0
# The summary of a run that went quiet (lines stopped: reconnected, or the client closed).
ENDED = "{count} similar lines suppressed in {interval:.1f} s; latest: {latest}"


@dataclass(frozen=True, slots=True)
class Rule:
    """Which records count as similar, and how their summary reads.

    A record matches when its logger is one of ``loggers`` (or a child), its level is at least
    ``level`` and its message template (``record.msg``, before arguments) starts with one of
    ``templates`` (any template when empty). ``per_template`` keeps a separate count for each
    template; otherwise all matching records are one run. ``hold_first`` holds even the first
    line back: a broker that is down for a moment, or a command that fails with a clear message
    of its own, then prints nothing of aiokafka's. ``ongoing`` is the summary while the run
    lasts, formatted with ``duration`` (seconds since the run began), ``interval`` (seconds
    since the last summary), ``count`` (lines suppressed since the last summary) and ``latest``
    (the last line's message).
    """

    loggers: tuple[str, ...]
    level: int
    templates: tuple[str, ...] = ()
    per_template: bool = False
    hold_first: bool = False
    ongoing: str = "{latest} ({count} similar lines suppressed in the last {interval:.0f} s)"

    def matches(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return False
        if not any(record.name == n or record.name.startswith(n + ".") for n in self.loggers):
            return False
        template = str(record.msg)
        return not self.templates or template.startswith(self.templates)

    def key(self, record: logging.LogRecord) -> tuple[int, str]:
        return id(self), str(record.msg) if self.per_template else ""


# openai's HTTP client: httpx, or httpx2 with openai 3.
HTTP_REQUESTS = Rule(loggers=("httpx", "httpx2"), level=logging.INFO, templates=("HTTP Request:",))
# aiokafka's reconnect and metadata-refresh failures, all one storm while a broker is away.
BROKER_UNREACHABLE = Rule(
    loggers=("aiokafka",),
    level=logging.WARNING,
    templates=(
        "Unable connect to",
        "Unable to update metadata",
        "Unable to request metadata",
        "Failed fetch messages from",
        "Failed fetch offsets from",
        "Heartbeat send request failed",
        "Group Coordinator Request failed",
        "FindCoordinator Request failed",
        "Cannot send",
        "Could not send",
    ),
    hold_first=True,
    ongoing="Kafka broker unreachable for {duration:.0f} s, retrying "
    "({count} similar lines suppressed; latest: {latest})",
)
# Any other aiokafka warning repeated, such as a missing topic at every metadata refresh.
AIOKAFKA_REPEATS = Rule(loggers=("aiokafka",), level=logging.WARNING, per_template=True)
DEFAULT_RULES = (HTTP_REQUESTS, BROKER_UNREACHABLE, AIOKAFKA_REPEATS)


@dataclass(slots=True)
class _Run:
    """Similar lines seen so far: when the run began, the current interval, what was hidden."""

    rule: Rule
    began: float
    interval_began: float
    last_seen: float
    latest: logging.LogRecord
    suppressed: int  # lines hidden since the last summary (a held first line included)
    summaries: int = 0


class SummarisingHandler(logging.Handler):
    """Passes records to ``target``, summarising runs of similar records (see :class:`Rule`).

    Time comes from ``clock`` (seconds, monotonic). Summaries are written when a record arrives
    (any record: a quiet run is closed before the next line), on :meth:`flush` and on
    :meth:`close`; a summary carries the level and logger of the latest hidden line.
    """

    def __init__(
        self,
        target: logging.Handler,
        rules: Sequence[Rule] = DEFAULT_RULES,
        *,
        interval_s: float = SUMMARY_INTERVAL_S,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__()
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.target = target
        self._rules = tuple(rules)
        self._interval_s = interval_s
        self._clock = clock
        self._runs: dict[tuple[int, str], _Run] = {}

    def emit(self, record: logging.LogRecord) -> None:
        record = _without_traceback(record)
        now = self._clock()
        self._close_quiet_runs(now, everything=False)
        rule = next((r for r in self._rules if r.matches(record)), None)
        if rule is None:
            self.target.handle(record)
            return
        key = rule.key(record)
        run = self._runs.get(key)
        if run is None:
            held = 1 if rule.hold_first else 0
            self._runs[key] = _Run(rule, now, now, now, record, suppressed=held)
            if not held:
                self.target.handle(record)
            return
        run.last_seen, run.latest = now, record
        if now - run.interval_began < self._interval_s:
            run.suppressed += 1
            return
        # The run outlasted an interval: this line becomes its summary.
        self.target.handle(_summary(rule.ongoing, run, now, run.suppressed + 1))
        run.interval_began, run.suppressed = now, 0
        run.summaries += 1

    def flush(self) -> None:
        self.acquire()
        try:
            self._close_quiet_runs(self._clock(), everything=False)
        finally:
            self.release()
        self.target.flush()

    def close(self) -> None:
        self.acquire()
        try:
            self._close_quiet_runs(self._clock(), everything=True)
        finally:
            self.release()
        self.target.flush()
        super().close()

    def discard(self) -> None:
        """Forget every run without a summary: the caller reported the failure itself."""
        self.acquire()
        try:
            self._runs.clear()
        finally:
            self.release()

    def _close_quiet_runs(self, now: float, *, everything: bool) -> None:
        for key, run in list(self._runs.items()):
            if not everything and now - run.last_seen < self._interval_s:
                continue
            del self._runs[key]
            if run.suppressed == 1 and run.rule.hold_first and not run.summaries:
                self.target.handle(run.latest)  # a lone held line is shown as it was
            elif run.suppressed:
                self.target.handle(_summary(ENDED, run, run.last_seen, run.suppressed))


def _without_traceback(record: logging.LogRecord) -> logging.LogRecord:
    """aiokafka logs a traceback for errors it also raises to us ("Unexpected error in sender
    routine" after a broker restart), which we handle (the transaction is given up): one line
    with the exception chain instead, unless at DEBUG (this handler is not used then)."""
    if not (record.exc_info and record.name.startswith("aiokafka")):
        return record
    chain: list[str] = []
    exc: BaseException | None = record.exc_info[1]
    while exc is not None and len(chain) < 3:
        chain.append(repr(exc))
        exc = exc.__cause__ or exc.__context__
    one_line = logging.makeLogRecord(record.__dict__)
    one_line.msg, one_line.args = f"{record.getMessage()} ({' <- '.join(chain)})", None
    one_line.exc_info, one_line.exc_text = None, None
    return one_line


def _summary(template: str, run: _Run, now: float, count: int) -> logging.LogRecord:
    """A copy of the run's latest record whose message is the summary, stamped with the time
    it is written (a run's end is noticed late; log lines stay in time order)."""
    message = template.format(
        duration=now - run.began,
        interval=now - run.interval_began,
        count=count,
        latest=run.latest.getMessage(),
    )
    record = logging.makeLogRecord(run.latest.__dict__)
    record.msg, record.args, record.exc_info, record.exc_text = message, None, None, None
    record.created = max(record.created, time.time())
    record.msecs = (record.created - int(record.created)) * 1000
    record.suppressed = count
    return record


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        suppressed = getattr(record, "suppressed", None)
        if suppressed is not None:
            doc["suppressed"] = suppressed
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exception"] = record.exc_text
        return orjson.dumps(doc).decode()


def setup_logging(
    level: str, fmt: str, secrets: Iterable[str] = (), *, clock: Clock = time.monotonic
) -> None:
    """One handler on the root logger, on stderr; summarising unless ``level`` is DEBUG, and
    masking ``secrets`` (and URL passwords) in every line."""
    stream = logging.StreamHandler()
    if fmt == "json":
        stream.setFormatter(JsonFormatter())
    else:
        stream.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(level.upper())
    handler: logging.Handler = stream
    if root.level > logging.DEBUG:
        handler = SummarisingHandler(stream, clock=clock)
    handler.addFilter(Redactor(secrets))  # on the outer handler: summaries quote masked lines
    root.handlers[:] = [handler]
    logging.getLogger("aiokafka").setLevel(max(root.level, logging.WARNING))


def discard_summaries() -> None:
    """Drop lines held for summaries: a command that failed said why in its own words."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, SummarisingHandler):
            handler.discard()

"""Registering the results topic's schemas at start, waiting out a registry outage.

With a registry `output_format`, the processor registers the schema of each record shape of the
results topic (result, chunk, document end; TopicRecordNameStrategy, `output_schemas.py`) before
it consumes anything: no record may go out without its schema id. A registry that cannot
answer then (it starts after the processor, as a compose file or a Kubernetes rollout may have
it, or it is briefly down) is an outage like any later one, not a bad setting: the start
waits, asking again after holds that double from 0.5 s to 10 s (`core/holdback.py`, the input side's
holds), and `/readyz` says why meanwhile. A registry that answers and refuses the schema
(e.g. incompatible with the subject's versions) still stops the start, naming the setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from embedstream.core.holdback import HoldBacks
from embedstream.engine.registry import RegistryClient, RegistryRejected
from embedstream.engine.schema_decoders import changelog_encoder, result_encoder
from embedstream.errors import ConfigError, RegistryUnavailable
from embedstream.settings import Settings
from embedstream.wire.formats.changelog_schemas import ChangelogEncoder
from embedstream.wire.formats.results import ResultEncoder

log = logging.getLogger(__name__)

_KEY = "result schema"


class ResultSchemaRegistration:
    """Registers the results topic's schemas under ``<topic>-<record name>``; `outage` is the
    registry's last failure to answer while the start waits, None once registered (or never
    asked)."""

    def __init__(
        self,
        settings: Settings,
        client: RegistryClient,
        results_topic: str,
        clock: Callable[[], float] = time.monotonic,
        holds: HoldBacks[str] | None = None,
        changelog_topic: str | None = None,
    ) -> None:
        self._settings = settings
        self._client = client
        self._results_topic = results_topic
        self._changelog_topic = changelog_topic
        # With a chunk changelog: its values' encoder, once its schema is registered too.
        self.changelog_values: ChangelogEncoder | None = None
        self._clock = clock
        self._holds: HoldBacks[str] = holds or HoldBacks()
        self.outage: RegistryUnavailable | None = None

    async def encoder(self, stopping: asyncio.Event) -> ResultEncoder | None:
        """The results' encoder (None for JSON results); None too if `stopping` is set while
        the start waits for the registry."""
        if self._settings.output_format == "json":
            return None
        while not stopping.is_set():
            try:
                output_format = self._settings.output_format
                encoder = await result_encoder(self._client, output_format, self._results_topic)
                if self._changelog_topic is not None:
                    self.changelog_values = await changelog_encoder(
                        self._client, output_format, self._changelog_topic
                    )
            except RegistryRejected as exc:  # e.g. 409: incompatible with the subject's versions
                raise ConfigError(
                    "output_format", f"the registry refused the result schema: {exc}"
                ) from None
            except RegistryUnavailable as exc:
                self.outage = exc
                wait = self._holds.hold(_KEY, self._clock(), exc.retry_after)
                log.warning(
                    "schema registry unavailable at start (%s); registering the result schema "
                    "again in %.1fs, nothing is consumed meanwhile",
                    exc,
                    wait,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), wait)
                continue
            self.outage = None
            return encoder
        return None

"""The batch lane's rules as the settings configure them, checked at start: asking for batch
jobs of a provider preset that takes none fails in one line naming the setting that asked."""

from __future__ import annotations

from embedstream.core.backoff import Backoff
from embedstream.core.batch_jobs import JobLimits
from embedstream.core.batch_routing import BatchRouting
from embedstream.core.batch_terms import Prices, parse_prices, takes_batch_jobs

__all__ = [
    "Prices",
    "batch_routing",
    "job_limits",
    "prices",
    "refusal_backoff",
    "require_batch_jobs",
]
from embedstream.errors import ConfigError
from embedstream.settings import Settings, topic_list

# After the provider refuses a job for its enqueued tokens, the wait doubles up to this.
REFUSAL_BACKOFF_CAP_S = 3_600.0


def asking_setting(settings: Settings) -> str | None:
    """The setting that asks for batch jobs, if any does."""
    if settings.batch_topics:
        return "batch_topics"
    if settings.batch_after_s > 0:
        return "batch_after_s"
    if settings.migrate_via == "batch":
        return "migrate_via"
    return None


def require_batch_jobs(settings: Settings, asked_by: str) -> None:
    """ConfigError naming ``asked_by`` unless the provider preset takes batch jobs."""
    profile = settings.provider_profile
    if takes_batch_jobs(profile, settings.generic_batch_api):
        return
    if profile == "generic":
        said = "set generic_batch_api = true if your server serves /v1/files and /v1/batches"
    else:
        said = "only openai and azure do (and generic with generic_batch_api = true)"
    raise ConfigError(asked_by, f"asks for batch jobs, but provider_profile {profile} takes "
                      f"none: {said}")  # fmt: skip


def batch_routing(settings: Settings) -> BatchRouting:
    """What goes to batch jobs; ConfigError if the provider takes none and some is asked."""
    asked_by = asking_setting(settings)
    if asked_by is not None:
        require_batch_jobs(settings, asked_by)
    return BatchRouting(
        topics=frozenset(topic_list(settings.batch_topics)),
        after_s=settings.batch_after_s or None,
        migrations=settings.migrate_via == "batch",
    )


def job_limits(settings: Settings) -> JobLimits:
    return JobLimits(
        max_inputs=settings.batch_max_inputs,
        max_tokens=settings.batch_enqueued_tokens or None,
        form_s=settings.batch_form_s,
    )


def refusal_backoff(settings: Settings) -> Backoff:
    return Backoff(base_s=settings.batch_retry_s, cap_s=REFUSAL_BACKOFF_CAP_S)


def prices(settings: Settings) -> Prices:
    try:
        table = parse_prices(settings.token_prices)
    except ValueError as exc:
        raise ConfigError("token_prices", str(exc)) from None
    return Prices(table, settings.provider_profile)

"""The engine's rules as the settings configure them, built in one place for every caller.

The Kafka processor and the in-process client take their limits, governor and backoff from
here, so a default changed in `Settings` changes both. Pure: the clock is passed in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from embedstream.core.backoff import Backoff
from embedstream.core.cachekeys import provider_identity
from embedstream.core.governor import Governor, default_lanes
from embedstream.core.lanes import Priority
from embedstream.core.limits import ProviderLimits, effective_limits, profile
from embedstream.core.policy import BatchLimits
from embedstream.core.reservations import LaneTerms
from embedstream.core.targets import LaneTarget
from embedstream.settings import Settings


def provider_limits(settings: Settings) -> ProviderLimits:
    """The provider profile narrowed by the user's batch and input limits (and, for Azure,
    by what its api-version takes)."""
    azure = settings.provider_profile == "azure"
    return effective_limits(
        profile(settings.provider_profile),
        max_batch_size=settings.max_batch_size,
        max_batch_tokens=settings.max_batch_tokens,
        max_input_tokens=settings.max_input_tokens,
        azure_api_version=settings.azure_api_version if azure else None,
    )


def profile_label(settings: Settings) -> str:
    """The provider profile as messages name it (with the Azure api-version, which decides
    what Azure takes)."""
    if settings.provider_profile == "azure":
        return f"azure (api-version {settings.azure_api_version})"
    return settings.provider_profile


def provider_endpoint(settings: Settings) -> str | None:
    """The URL calls go to, up to the model: base_url, or for Azure the resource's deployment
    path (with no deployment set, the model, which is in every bucket key, names it)."""
    if settings.provider_profile != "azure" or not settings.azure_endpoint:
        return settings.base_url
    root = f"{settings.azure_endpoint.rstrip('/')}/openai"
    return f"{root}/deployments/{settings.azure_deployment}" if settings.azure_deployment else root


def batch_limits(settings: Settings) -> BatchLimits:
    provider = provider_limits(settings)
    return BatchLimits(
        max_items=provider.max_inputs,
        max_tokens=provider.max_tokens_per_request,
        max_wait_s=settings.max_wait_ms / 1000.0,
        scale_factor=settings.scale_factor,
    )


# While online callers are active (a request within the last second, or one waiting): a call
# slot kept free of the Kafka lanes' calls, and those calls hold at most 1,024 inputs (or what
# online_target_ms steers them to), so a query's call never queues behind the provider's work
# on a call of thousands. With the lanes as processes, calls of 1,024 drained a backlog beside
# online callers 1.19x as fast as calls of 256, and one kept slot 1.19x as fast as two, each
# for the same online P99 (docs/benchmarks/processes.md).
ONLINE_LOWER_CALL_ITEMS = 1024
ONLINE_LANE = LaneTerms(reserved_slots=1, lower_call_items=ONLINE_LOWER_CALL_ITEMS)


def lane_targets(settings: Settings) -> dict[Priority, LaneTarget]:
    """The lanes held to a latency target: online, when served and online_target_ms is not 0."""
    max_items = batch_limits(settings).max_items
    targets: dict[Priority, LaneTarget] = {}
    if settings.http_port and settings.online_target_ms > 0:
        targets[Priority.ONLINE] = LaneTarget(
            settings.online_target_ms / 1000.0, max_items, start_items=ONLINE_LOWER_CALL_ITEMS
        )
    return targets


def governor(settings: Settings, clock: Callable[[], float]) -> Governor:
    """The budget's rule for this process. With a shared budget (``budget_url``) the RPM/TPM
    buckets are the fleet's, kept in its store, so this process's plan has none of its own.
    Every member keeps slots for the online lane: a replica of `serve` may join the fleet."""
    shared = bool(settings.budget_url)
    lanes = default_lanes(
        settings.min_low_share,
        online=ONLINE_LANE if settings.http_port or shared else None,
    )
    return Governor(
        max_concurrency=settings.max_concurrency,
        clock=clock,
        adaptive=settings.target_latency_ms > 0,
        target_latency_s=settings.target_latency_ms / 1000.0 or None,
        rpm=None if shared else settings.rate_limit_rpm,
        tpm=None if shared else settings.rate_limit_tpm,
        lanes=lanes,
        targets=lane_targets(settings),
    )


def backoff(settings: Settings) -> Backoff:
    return Backoff(
        base_s=settings.retry_backoff_base_ms / 1000.0,
        cap_s=settings.retry_backoff_cap_ms / 1000.0,
    )


def budget_namespace(settings: Settings) -> str:
    """Which fleet budget a process draws on: one per provider endpoint and API key, so every
    process calling the same provider with the same key (whose limits are the org's) shares
    one, and other deployments on the same Redis never mix with it."""
    endpoint = provider_identity(
        provider_endpoint(settings), settings.provider_profile, settings.extra_body_map
    )
    digest = hashlib.sha256(f"{endpoint}\n{settings.api_key or ''}".encode()).hexdigest()
    return digest[:16]

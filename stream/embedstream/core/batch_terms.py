"""The provider's terms for batch jobs: which presets take them, and what tokens cost at each
price tier. Pure.

OpenAI's Batch API embeds at half the price of a sync call, in a rate-limit pool of its own;
Azure OpenAI's global batch deployments take the same files at the same discount. A ``generic``
server takes them only when the user says it serves ``/v1/files`` and ``/v1/batches``; the
other presets (vLLM, TEI, Ollama, DashScope's compatible mode) have no such API.

Prices are per million tokens, per model (``token_prices``): ``model=sync`` or
``model=sync/batch``; without a batch price, the preset's discount applies to the sync one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Tier(StrEnum):
    """What a token is billed at: a sync call's price or a batch job's."""

    SYNC = "sync"
    BATCH = "batch"


# The batch price as a share of the sync one, for the presets that take batch jobs.
BATCH_PRICE_SHARE: Mapping[str, float] = {"openai": 0.5, "azure": 0.5, "generic": 0.5}
OPT_IN = frozenset({"generic"})  # takes batch jobs only when the user says it does

# OpenAI's list prices of its embedding models (USD per million tokens, sync/batch), the
# default of `token_prices`; a price changed since is the setting's to say.
DEFAULT_PRICES = (
    "text-embedding-3-small=0.02/0.01,text-embedding-3-large=0.13/0.065,"
    "text-embedding-ada-002=0.10/0.05"
)


def takes_batch_jobs(profile: str, generic_batch_api: bool) -> bool:
    """The provider preset serves the Batch API (``generic`` when the user says so)."""
    if profile in OPT_IN:
        return generic_batch_api
    return profile in BATCH_PRICE_SHARE


@dataclass(frozen=True, slots=True)
class ModelPrice:
    sync: float  # per million tokens
    batch: float | None = None  # None: the preset's share of the sync price


class Prices:
    """Per-model prices, and the cost of tokens at each tier."""

    def __init__(self, prices: Mapping[str, ModelPrice], profile: str) -> None:
        self._prices = dict(prices)
        self._share = BATCH_PRICE_SHARE.get(profile)

    def per_million(self, model: str, tier: Tier) -> float | None:
        """A model's price at a tier; None when unknown (no price set for it, or no batch
        jobs at this provider)."""
        price = self._prices.get(model)
        if price is None:
            return None
        if tier is Tier.SYNC:
            return price.sync
        if price.batch is not None:
            return price.batch
        return None if self._share is None else price.sync * self._share

    def cost(self, model: str, tier: Tier, tokens: int) -> float | None:
        price = self.per_million(model, tier)
        return None if price is None else tokens * price / 1_000_000


def parse_prices(text: str) -> dict[str, ModelPrice]:
    """``model=sync[/batch],...`` as a table; ValueError naming the bad pair."""
    found: dict[str, ModelPrice] = {}
    for pair in (p.strip() for p in text.split(",")):
        if not pair:
            continue
        model, sep, value = pair.partition("=")
        sync_text, _, batch_text = value.partition("/")
        try:
            if not sep or not model.strip():
                raise ValueError(pair)
            sync = float(sync_text)
            batch = float(batch_text) if batch_text else None
        except ValueError:
            raise ValueError(f"{pair!r} is not model=price or model=sync/batch") from None
        if not (sync >= 0 and (batch is None or batch >= 0)):
            raise ValueError(f"{pair!r}: prices must be >= 0")
        found[model.strip()] = ModelPrice(sync, batch)
    return found

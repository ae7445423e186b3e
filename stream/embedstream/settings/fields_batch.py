"""Settings of batch jobs: work that can wait goes through the provider's Batch API, at its
batch price (half of a sync call's at OpenAI), within a completion window of up to a day."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.settings.types import Group, MigrateVia, setting

_BJ = Group.BATCH_JOBS
_DAY_S = 86_400.0
# OpenAI's list prices of its embedding models (USD per million tokens, sync/batch); the same
# text as core/batch_terms.DEFAULT_PRICES (a test keeps them equal: settings import no core).
DEFAULT_TOKEN_PRICES = (
    "text-embedding-3-small=0.02/0.01,text-embedding-3-large=0.13/0.065,"
    "text-embedding-ada-002=0.10/0.05"
)


@dataclass(frozen=True)
class BatchFields:
    batch_topics: str | None = setting(
        None,
        "Low-lane request topics whose work can wait, comma separated: every request read "
        "from them goes through batch jobs (half price; answered within the provider's "
        "completion window, up to 24 h). Unset: none.",
        _BJ,
    )
    batch_after_s: float = setting(
        0.0,
        "The adaptive rule: a low-lane request fetched while the sync path already has more "
        "waiting than it sends in this many seconds at its current pace goes to a batch job "
        "instead. 0: off.",
        _BJ,
        ge=0,
        le=_DAY_S,
    )
    migrate_via: MigrateVia = setting(
        "sync",
        "How a migration's backfill embeds when `migrate start` does not say (--via): sync "
        "calls, or batch jobs (half price, up to a day).",
        _BJ,
    )
    generic_batch_api: bool = setting(
        False,
        "provider_profile=generic: the server also serves OpenAI's /v1/files and /v1/batches "
        "(openai and azure always do; the other presets never).",
        _BJ,
    )
    batch_form_s: float = setting(
        60.0,
        "How long a batch job gathers work before it is submitted (sooner when full).",
        _BJ,
        ge=0,
        le=_DAY_S,
    )
    batch_max_inputs: int = setting(
        50_000, "Most inputs in one batch job (OpenAI's limit: 50,000).", _BJ, gt=0, le=50_000
    )
    batch_poll_s: float = setting(
        30.0, "How often a submitted job's status is asked.", _BJ, gt=0, le=_DAY_S
    )
    batch_enqueued_tokens: int = setting(
        0,
        "The provider's limit of tokens a model may have in batch jobs at once, when known: "
        "jobs are cut under it and wait to be submitted within it. 0: learnt from the "
        "provider's refusals only.",
        _BJ,
        ge=0,
    )
    batch_retry_s: float = setting(
        300.0,
        "First wait after the provider refuses a job for the model's enqueued tokens (the "
        "work waits in Kafka); doubles each time, up to an hour.",
        _BJ,
        gt=0,
        le=_DAY_S,
    )
    token_prices: str = setting(
        DEFAULT_TOKEN_PRICES,
        "Prices per million tokens: model=sync or model=sync/batch, comma separated (a batch "
        "price unset is the preset's discount of the sync one). For the cost metrics, "
        "`embedstream top` and `migrate plan`.",
        _BJ,
    )

"""`embedstream migrate`: a store's index generations from the command line (plan, start,
status, cutover, rollback, drop, cancel), each run once against the store of the settings and
told in a few lines.

The generation a migration goes to is the one the settings describe: ``--model`` and
``--dimensions`` (by default the active generation's, when the model stays) and the chunk
settings as capped by the provider preset, as a processor with those settings would make it.
"""

from __future__ import annotations

from collections.abc import Sequence

from embedstream.core import batch_configured, configured
from embedstream.core.backfill_source import Unsourced, unsourced
from embedstream.core.batch_terms import Prices, Tier
from embedstream.core.generations import IndexGeneration
from embedstream.core.intake import chunking_rules
from embedstream.core.reembed import BASIS_SAID, CallLimits, ReembedPlan
from embedstream.errors import EmbedStreamError
from embedstream.kafka.backfill.documents_on_topic import documents_on_topic
from embedstream.settings import Settings
from embedstream.stores.configured import store_config
from embedstream.stores.generations import StoredGeneration
from embedstream.stores.pgmigrate import GenerationStatus, Migrations
from embedstream.stores.pgvector import PgVectorStore

ACTIONS = ("plan", "start", "status", "cutover", "rollback", "drop", "cancel")


def call_limits(settings: Settings) -> CallLimits:
    limits = configured.provider_limits(settings)
    return CallLimits(
        inputs_per_call=limits.max_inputs,
        tokens_per_call=limits.max_tokens_per_request,
        rpm=settings.rate_limit_rpm,
        tpm=settings.rate_limit_tpm,
    )


def target_generation(
    settings: Settings,
    active: StoredGeneration | None,
    model: str | None,
    dimensions: int | None,
) -> IndexGeneration:
    """The generation the settings describe; the model and dimensions default to the active
    generation's (the dimensions only while the model stays)."""
    chunking = chunking_rules(settings, configured.provider_limits(settings))
    if active is not None and model in (None, active.model):
        model = active.model
        if dimensions is None:
            dimensions = active.generation.dimensions
    if model is None:
        model = settings.store_model or settings.model
    return IndexGeneration(model, dimensions, chunking)


async def run_migration(
    settings: Settings,
    action: str,
    *,
    model: str | None = None,
    dimensions: int | None = None,
    allow_missing: bool = False,
    via: str | None = None,
) -> list[str]:
    """Run one command; the lines it says. A command that does not apply raises
    :class:`embedstream.stores.pgmigrate.MigrationRefused` (one line); ``via`` batch (or
    ``migrate_via``) of a provider that takes no batch jobs, a ConfigError naming it."""
    via = via or settings.migrate_via
    if action == "start" and via == "batch":
        batch_configured.require_batch_jobs(settings, "migrate_via")
    prices = batch_configured.prices(settings)  # a bad token_prices fails before the store
    async with PgVectorStore(store_config(settings), create=False) as store:
        migrations = Migrations(store, settings.store_index)
        table = f"{settings.store_schema}.{settings.store_table}"
        if action in ("plan", "start"):
            target = target_generation(settings, store.active, model, dimensions)
            limits = call_limits(settings)
            if action == "plan":
                active, plan = await migrations.plan(target, limits)
                return [
                    f"plan: {active.id} -> {target.id} ({target.describe()}), nothing spent",
                    *plan_lines(plan, settings),
                    *price_lines(plan, target.model, settings, prices),
                    "`embedstream migrate start` with the same options starts it "
                    "(--via batch: through batch jobs)",
                ]
            started, plan = await migrations.start(target, limits, via)
            how = "through batch jobs (answered within a day)" if via == "batch" else "sync"
            return [
                f"started generation {started.id} ({target.describe()}) in {table}; "
                "its results are written beside the active generation's from now on; "
                f"its backfill embeds {how}",
                *plan_lines(plan, settings),
                *price_lines(plan, target.model, settings, prices),
            ]
        if action == "status":
            found = await migrations.status()
            return status_lines(found, await source_lines(settings, migrations, found))
        if action == "cutover":
            new, missing = await migrations.cutover(allow_missing=allow_missing)
            lines = [
                f"cut over: {table} reads generation {new.id} ({new.said}); "
                "the one before is kept: `embedstream migrate rollback` goes back to it, "
                "`embedstream migrate drop` removes it"
            ]
            if missing:
                lines.append(f"cut over with documents it lacks: {missing.said()}")
            return lines
        if action == "rollback":
            back = await migrations.rollback()
            return [
                f"rolled back: {table} reads generation {back.id} ({back.said})"
                " again; the other one is the new generation again (cut over or cancel it)"
            ]
        gone = await (migrations.drop() if action == "drop" else migrations.cancel())
        return [f"dropped generation {gone.id} ({gone.said}) and its tables"]


def plan_lines(plan: ReembedPlan, settings: Settings) -> list[str]:
    limits = call_limits(settings)
    if plan.minutes is None:
        time = "no rate limit set (rate_limit_rpm, rate_limit_tpm): as fast as the provider answers"
    else:
        time = f"{plan.minutes:,.1f} min or more at the rate limits"
    return [
        f"  documents  {plan.documents:,}",
        f"  chunks     {plan.chunks:,}  (from {BASIS_SAID[plan.basis]})",
        f"  tokens     {plan.tokens:,}  (estimated as the processor counts; providers "
        "usually report fewer)",
        f"  calls      {plan.calls:,} or more  ({limits.inputs_per_call:,} inputs, "
        f"{limits.tokens_per_call:,} tokens a call at most)",
        f"  time       {time}",
        f"  plain results {plan.requests:,}: not re-embedded (the store keeps no text of theirs)",
    ]


def price_lines(plan: ReembedPlan, model: str, settings: Settings, prices: Prices) -> list[str]:
    """What the plan's tokens cost at each price tier (token_prices), or why it is not said."""
    sync = prices.cost(model, Tier.SYNC, plan.tokens)
    if sync is None:
        return [f"  cost       no price for {model!r} in token_prices"]
    batch = prices.cost(model, Tier.BATCH, plan.tokens)
    if batch is None:
        said = f"no batch jobs at provider_profile {settings.provider_profile}"
    else:
        said = f"${batch:,.4f} through batch jobs (--via batch, within a day)"
    return [f"  cost       ${sync:,.4f} in sync calls, {said}; at token_prices"]


def status_lines(found: Sequence[GenerationStatus], source: Sequence[str] = ()) -> list[str]:
    """Each generation's lines; ``source`` (what the backfill's source lacks) goes under the
    new generation's."""
    lines = []
    for s in found:
        g = s.generation
        via = " (backfill through batch jobs)" if (g.plan or {}).get("via") == "batch" else ""
        lines.append(f"{g.id}  {g.state:<6}  {g.said}{via}")
        if g.size is None:
            lines.append("          no vectors yet (its tables come with its first vector)")
            continue
        versus = ""
        if s.lacking is not None:
            versus = f", lacking {s.lacking:,}, extra {s.extra:,}"
        planned = ""
        if g.plan and "tokens" in g.plan:  # estimated: set against the chunks' estimate
            planned = f"; estimated tokens {s.estimated:,} of {int(g.plan['tokens']):,} planned"
        lines.append(
            f"          documents {s.documents:,} ({s.complete:,} complete){versus}; "
            f"chunks {s.chunks:,}; plain results {s.requests:,}; tokens {s.tokens:,}{planned}; "
            f"vector index {s.index}"
        )
        if g.state == "new":
            lines.extend(source)
    return lines


async def source_lines(
    settings: Settings, migrations: Migrations, found: Sequence[GenerationStatus]
) -> list[str]:
    """What the backfill's source lacks of the new generation's lacking documents (nothing
    to say without a new generation lacking any): the documents topic read to its end now."""
    new = next((s for s in found if s.generation.state == "new" and s.lacking), None)
    if new is None or not new.lacking:
        return []
    topic = settings.topic_documents
    if topic is None:
        return source_said(new.lacking, None, None)
    try:
        on_topic = await documents_on_topic(settings, topic)
    except EmbedStreamError as exc:
        return source_said(new.lacking, topic, str(exc))
    return source_said(
        new.lacking, topic, unsourced(await migrations.lacking_documents(), on_topic)
    )


def source_said(lacking: int, topic: str | None, found: Unsourced | str | None) -> list[str]:
    """The lines on the backfill's source: none (``topic`` unset), not read (``found`` the
    reason), or the lacking documents it does not hold."""
    pad = "          "
    if topic is None:
        return [
            f"{pad}backfill source: none (topic_documents is not set): its {lacking:,} lacking "
            "documents come only from the live stream (a new version, or a delete)"
        ]
    if isinstance(found, str) or found is None:
        return [f"{pad}backfill source: could not read the documents topic {topic}: {found}"]
    if not found.count:
        return [f"{pad}backfill source: the documents topic {topic} holds every lacking document"]
    more = ", ..." if found.count > len(found.first) else ""
    return [
        f"{pad}backfill source: the documents topic {topic} lacks {found.count:,} of the "
        f"{found.lacking:,} lacking ({', '.join(found.first)}{more}): never backfilled; publish "
        "them with `embedstream produce --documents`, or cut over with --allow-missing"
    ]

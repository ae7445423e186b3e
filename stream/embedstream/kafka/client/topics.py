"""The topics of a deployment: their declarations in topics.toml and the names settings give.

topics/topics.toml is the canonical declaration; stream/embedstream/kafka/client/topics.toml is an
identical copy shipped in the wheel, used when no path is given. A topic's name is its
``topic_*`` setting, else ``<topic_prefix><name in topics.toml>``; the request lanes may list
several topics each. Pure (files only, no broker): :mod:`embedstream.kafka.client.admin` applies
these declarations to a cluster.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedstream.core.lanes import InputLane
from embedstream.errors import ConfigError
from embedstream.settings import CHANGELOG_STATE_SUFFIX, Settings, topic_name_problem

DEFAULT_PREFIX = "embed."
PACKAGED_TOPICS_FILE = Path(__file__).with_name("topics.toml")
# The table keys code uses to refer to topics; topics.toml must declare exactly these.
TOPIC_KEYS = ("requests_high", "requests_low", "retry", "results", "dead_letters")
# The chunk changelog's topics, declared in topics.toml too (partitions and configs, no name):
# made only when `topic_changelog` names the changelog; its state topic is that + ".state".
CHANGELOG_KEYS = ("changelog", "changelog_state")
# The documents topic, declared there too: made only when `topic_documents` names it.
DOCUMENTS_KEY = "documents"
# The batch jobs topic (kafka/batchjobs), declared there with a name of its own; a file of
# declarations without it has none (older files): the batch lane then cannot run.
BATCH_JOBS_KEY = "batch_jobs"
REQUEST_KEYS = ("requests_high", "requests_low")
# The setting that names each topic (unset: <topic_prefix><name in topics.toml>).
SETTING_OF_KEY = {
    "requests_high": "topic_requests_high",
    "requests_low": "topic_requests_low",
    "retry": "topic_retry",
    "results": "topic_results",
    "dead_letters": "topic_dlq",
    "documents": "topic_documents",
    "changelog": "topic_changelog",
    "changelog_state": "topic_changelog",
    "batch_jobs": "topic_batch_jobs",
}

_TOPIC_FIELDS = frozenset({"name", "partitions", "replication_factor", "configs"})


class TopicConfigError(ValueError):
    """topics.toml is malformed; the message names the file, topic and key at fault."""


@dataclass(frozen=True)
class TopicSpec:
    key: str  # the role, one of TOPIC_KEYS
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]
    # Named by a topic_requests_* setting: a topic another pipeline may own, so
    # `topics create` makes it only on a cluster where no request topic exists yet.
    borrowed: bool = False


@dataclass(frozen=True)
class TopicNames:
    """The topics of one deployment, by role. Each request lane may read several topics."""

    high: tuple[str, ...]
    low: tuple[str, ...]
    retry: str
    results: str
    dead_letters: str
    documents: str | None = None  # the documents topic, when `topic_documents` is set
    changelog: str | None = None  # the chunk changelog, when `topic_changelog` is set
    changelog_state: str | None = None  # the changelog's state topic, with it
    batch_jobs: str | None = None  # the batch jobs topic (declared in topics.toml)

    @property
    def requests_high(self) -> str:
        """The high lane's first topic: where `embedstream produce --priority high` writes."""
        return self.high[0]

    @property
    def requests_low(self) -> str:
        """The low lane's first topic: where `embedstream produce` writes."""
        return self.low[0]

    @property
    def requests(self) -> tuple[str, ...]:
        return (*self.high, *self.low)

    @property
    def inputs(self) -> list[str]:
        """Every topic a processor subscribes to (the documents topic feeds the low lane)."""
        documents = [] if self.documents is None else [self.documents]
        return [*self.requests, *documents, self.retry]

    def lane_of(self, topic: str) -> InputLane:
        """The input a subscribed topic feeds (anything else counts as low, the documents
        topic too)."""
        if topic in self.high:
            return InputLane.HIGH
        return InputLane.RETRY if topic == self.retry else InputLane.LOW


def load_topic_specs(prefix: str, path: Path | None = None) -> list[TopicSpec]:
    """Reads topics.toml (the packaged copy unless path is given) in TOPIC_KEYS order."""
    source = path or PACKAGED_TOPICS_FILE
    return parse_topic_specs(_read(source), prefix, source=str(source))


def load_changelog_specs(changelog: str, path: Path | None = None) -> list[TopicSpec]:
    """The chunk changelog named ``changelog`` and its state topic, as topics.toml declares
    them (partitions, configs)."""
    names = {"changelog": changelog, "changelog_state": changelog + CHANGELOG_STATE_SUFFIX}
    return _named_specs(names, path)


def load_documents_spec(documents: str, path: Path | None = None) -> TopicSpec:
    """The documents topic named ``documents``, as topics.toml declares it."""
    return _named_specs({DOCUMENTS_KEY: documents}, path)[0]


def load_batch_jobs_spec(
    prefix: str, name: str | None, path: Path | None = None
) -> TopicSpec | None:
    """The batch jobs topic as topics.toml declares it, named ``name`` (``topic_batch_jobs``)
    or ``<prefix><its name there>``; None if the file declares none."""
    source = path or PACKAGED_TOPICS_FILE
    document = _read(source)
    topics = _table(document.get("topics"), f"{source}: [topics]")
    if BATCH_JOBS_KEY not in topics:
        return None
    where = f"{source}: topic '{BATCH_JOBS_KEY}'"
    default = _parse_topic(BATCH_JOBS_KEY, topics[BATCH_JOBS_KEY], prefix,
                           _default_replication(document, str(source)), where)  # fmt: skip
    return dataclasses.replace(default, name=name or default.name)


def _named_specs(names: Mapping[str, str], path: Path | None) -> list[TopicSpec]:
    """topics.toml's declarations of ``names``' keys (which have no name there), so named."""
    source = path or PACKAGED_TOPICS_FILE
    document = _read(source)
    topics = _table(document.get("topics"), f"{source}: [topics]")
    default_replication = _default_replication(document, str(source))
    specs = []
    for key, name in names.items():
        where = f"{source}: topic '{key}'"
        if key not in topics:
            raise TopicConfigError(f"{source}: [topics] lacks {key}")
        table = {**_table(topics[key], where), "name": name}
        specs.append(_parse_topic(key, table, "", default_replication, where))
    return specs


def _read(source: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(source.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise TopicConfigError(f"{source}: invalid TOML: {error}") from error


def topic_names(prefix: str, path: Path | None = None) -> TopicNames:
    """The default names: ``<prefix><name>`` for each topic of topics.toml."""
    specs = load_topic_specs(prefix, path)
    batch_jobs = load_batch_jobs_spec(prefix, None, path)
    return _names(specs if batch_jobs is None else [*specs, batch_jobs])


def configured_topics(settings: Settings, path: Path | None = None) -> TopicNames:
    """The topics `settings` name: each ``topic_*`` setting, else its default. Raises
    ConfigError, naming the setting, if a topic would have two roles."""
    return _names(configured_specs(settings, path))


def topic_settings(
    settings: Settings,
    keys: Sequence[str] = (*TOPIC_KEYS, DOCUMENTS_KEY, *CHANGELOG_KEYS),
    path: Path | None = None,
) -> dict[str, str]:
    """The topics of the roles ``keys``, each with the setting that names it: its ``topic_*``
    setting when set, else ``topic_prefix`` (the default name was used). For messages about a
    missing topic, which say what to check."""
    named: dict[str, str] = {}
    for spec in configured_specs(settings, path):
        if spec.key in keys:
            setting = SETTING_OF_KEY[spec.key]
            named[spec.name] = setting if settings.topics(setting) else "topic_prefix"
    return named


def configured_specs(settings: Settings, path: Path | None = None) -> list[TopicSpec]:
    """topics.toml's declarations under the names `settings` give: one spec per topic, a lane
    listing several topics repeating its declaration for each."""
    specs: list[TopicSpec] = []
    role_of: dict[str, str] = {}
    for default in load_topic_specs(settings.topic_prefix, path):
        setting = SETTING_OF_KEY[default.key]
        named = settings.topics(setting)
        for name in named or (default.name,):
            if name in role_of:
                raise ConfigError(
                    setting if named else SETTING_OF_KEY[role_of[name]],
                    f"{name} is also the {role_of[name].replace('_', ' ')} topic; "
                    "a topic has one role",
                )
            role_of[name] = default.key
            borrowed = bool(named) and default.key in REQUEST_KEYS
            specs.append(dataclasses.replace(default, name=name, borrowed=borrowed))
    extra: list[tuple[str, TopicSpec]] = []
    batch_jobs = load_batch_jobs_spec(settings.topic_prefix, settings.topic_batch_jobs, path)
    if batch_jobs is not None:
        extra.append(("topic_batch_jobs", batch_jobs))
    if settings.topic_documents:
        extra.append(("topic_documents", load_documents_spec(settings.topic_documents, path)))
    if settings.topic_changelog:
        changelog = load_changelog_specs(settings.topic_changelog, path)
        extra += [("topic_changelog", spec) for spec in changelog]
    for setting, spec in extra:
        if spec.name in role_of:
            raise ConfigError(
                setting,
                f"{spec.name} is also the {role_of[spec.name].replace('_', ' ')} topic; "
                "a topic has one role",
            )
        role_of[spec.name] = spec.key
        specs.append(spec)
    return specs


def _names(specs: Sequence[TopicSpec]) -> TopicNames:
    by_key: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        by_key[spec.key] = (*by_key.get(spec.key, ()), spec.name)
    return TopicNames(
        high=by_key["requests_high"],
        low=by_key["requests_low"],
        retry=by_key["retry"][0],
        results=by_key["results"][0],
        dead_letters=by_key["dead_letters"][0],
        documents=by_key.get(DOCUMENTS_KEY, (None,))[0],
        changelog=by_key.get("changelog", (None,))[0],
        changelog_state=by_key.get("changelog_state", (None,))[0],
        batch_jobs=by_key.get(BATCH_JOBS_KEY, (None,))[0],
    )


def parse_topic_specs(
    document: Mapping[str, Any], prefix: str, source: str = "topics.toml"
) -> list[TopicSpec]:
    _check_keys(document, allowed={"defaults", "topics"}, where=source)
    default_replication = _default_replication(document, source)
    topics = _table(document.get("topics"), f"{source}: [topics]")
    _check_keys(
        topics,
        allowed={*TOPIC_KEYS, DOCUMENTS_KEY, *CHANGELOG_KEYS, BATCH_JOBS_KEY},
        where=f"{source}: [topics]",
    )
    missing = [key for key in TOPIC_KEYS if key not in topics]
    if missing:
        raise TopicConfigError(f"{source}: [topics] lacks {', '.join(missing)}")
    specs = [
        _parse_topic(key, topics[key], prefix, default_replication, f"{source}: topic '{key}'")
        for key in TOPIC_KEYS
    ]
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise TopicConfigError(f"{source}: several topics are named {', '.join(duplicates)}")
    return specs


def _default_replication(document: Mapping[str, Any], source: str) -> int:
    defaults = _table(document.get("defaults", {}), f"{source}: [defaults]")
    return _positive_int(
        defaults.get("replication_factor", 1), f"{source}: [defaults] key 'replication_factor'"
    )


def _parse_topic(
    key: str, raw: Any, prefix: str, default_replication: int, where: str
) -> TopicSpec:
    table = _table(raw, where)
    _check_keys(table, allowed=_TOPIC_FIELDS, where=where)
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise TopicConfigError(f"{where}, key 'name': must be a non-empty string, got {name!r}")
    full_name = prefix + name
    problem = topic_name_problem(full_name)
    if problem:
        raise TopicConfigError(f"{where}, key 'name': {problem}")
    configs = _table(table.get("configs", {}), f"{where}, key 'configs'")
    return TopicSpec(
        key=key,
        name=full_name,
        partitions=_positive_int(table.get("partitions"), f"{where}, key 'partitions'"),
        replication_factor=_positive_int(
            table.get("replication_factor", default_replication),
            f"{where}, key 'replication_factor'",
        ),
        configs={
            str(config): _config_value(value, f"{where}, config '{config}'")
            for config, value in configs.items()
        },
    )


def _table(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise TopicConfigError(f"{where}: must be a table, got {raw!r}")
    return raw


def _check_keys(table: Mapping[str, Any], allowed: set[str] | frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise TopicConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; expected {', '.join(sorted(allowed))}"
        )


def _positive_int(value: Any, where: str) -> int:
    # bool is an int subclass, but `partitions = true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TopicConfigError(f"{where}: must be an integer >= 1, got {value!r}")
    return value


def _config_value(value: Any, where: str) -> str:
    # Kafka configs are strings on the wire; accept TOML scalars for readability.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise TopicConfigError(f"{where}: must be a string or number, got {value!r}")


@dataclass(frozen=True)
class CreationPlan:
    """What `topics create` does: make the missing topics, leave the existing ones be."""

    create: list[TopicSpec]
    existing: list[TopicSpec]

    @property
    def kept_borrowed(self) -> list[str]:
        """Existing request topics named by the settings: another pipeline's, untouched."""
        return [spec.name for spec in self.existing if spec.borrowed]


def plan_creation(specs: Sequence[TopicSpec], existing: set[str], cluster: str) -> CreationPlan:
    """Which declared topics to create on a cluster holding ``existing``.

    embedstream's own topics (retry, results, dlq, and request topics at their default names)
    are created when missing. A request topic a ``topic_requests_*`` setting names is created
    only on a cluster where no request topic exists yet (a fresh deployment); where its
    lane-mates exist it is more likely a misspelt name of an existing pipeline's topic, so that
    is an error naming the setting, and nothing is created.
    """
    fresh = not any(spec.name in existing for spec in specs if spec.key in REQUEST_KEYS)
    plan = CreationPlan([], [])
    for spec in specs:
        if spec.name in existing:
            plan.existing.append(spec)
        elif spec.borrowed and not fresh:
            there = [s.name for s in specs if s.key in REQUEST_KEYS and s.name in existing]
            raise ConfigError(
                SETTING_OF_KEY[spec.key],
                f"topic {spec.name} does not exist at {cluster}, while the request topics "
                f"{', '.join(there)} do; check the name, or create it yourself "
                "(`topics create` makes request topics only where none exists yet)",
            )
        else:
            plan.create.append(spec)
    return plan

"""Loading, prefixing and validating topics.toml; the pure table/drift helpers."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest
from embedstream.core.lanes import InputLane
from embedstream.errors import ConfigError
from embedstream.kafka.client.admin import (
    DEFAULT_PREFIX,
    PACKAGED_TOPICS_FILE,
    TOPIC_KEYS,
    TopicConfigError,
    TopicDescription,
    TopicNames,
    TopicSpec,
    configured_specs,
    configured_topics,
    describe_drift,
    format_description,
    load_topic_specs,
    parse_topic_specs,
    plan_creation,
    topic_names,
)
from embedstream.settings import Settings, load_settings

TOPIC_NAMES = ("requests.high", "requests.low", "retry", "results", "dlq")
CANONICAL_TOPICS_FILE = Path(__file__).parents[2] / "topics" / "topics.toml"


def canonical_document() -> dict[str, Any]:
    return tomllib.loads(CANONICAL_TOPICS_FILE.read_text(encoding="utf-8"))


def test_packaged_copy_is_identical_to_canonical_file() -> None:
    # The wheel ships stream/embedstream/kafka/client/topics.toml; topics/topics.toml is what
    # people edit.
    assert PACKAGED_TOPICS_FILE.read_bytes() == CANONICAL_TOPICS_FILE.read_bytes()


def test_default_load_prefixes_every_topic_in_key_order() -> None:
    specs = load_topic_specs(DEFAULT_PREFIX)
    assert [spec.key for spec in specs] == list(TOPIC_KEYS)
    assert [spec.name for spec in specs] == [
        "embed.requests.high",
        "embed.requests.low",
        "embed.retry",
        "embed.results",
        "embed.dlq",
    ]
    assert all(spec.replication_factor == 1 for spec in specs)
    assert all(spec.configs["cleanup.policy"] == "delete" for spec in specs)


def test_declared_sizes_and_partitions() -> None:
    by_key = {spec.key: spec for spec in load_topic_specs(DEFAULT_PREFIX)}
    assert by_key["requests_high"].partitions == 4
    assert by_key["dead_letters"].partitions == 1
    assert by_key["requests_high"].configs["max.message.bytes"] == "1048576"
    results_limit = int(by_key["results"].configs["max.message.bytes"])
    assert results_limit > int(by_key["requests_high"].configs["max.message.bytes"])
    dlq_retention = int(by_key["dead_letters"].configs["retention.ms"])
    assert dlq_retention > int(by_key["requests_low"].configs["retention.ms"])


@pytest.mark.parametrize("prefix", ["", "t-1_x.", "tenant."])
def test_custom_prefix(prefix: str) -> None:
    names = topic_names(prefix)
    assert names == TopicNames(
        high=(f"{prefix}requests.high",),
        low=(f"{prefix}requests.low",),
        retry=f"{prefix}retry",
        results=f"{prefix}results",
        dead_letters=f"{prefix}dlq",
        batch_jobs=f"{prefix}batch.jobs",
    )


def test_explicit_path_wins_over_packaged_copy(tmp_path: Path) -> None:
    text = CANONICAL_TOPICS_FILE.read_text(encoding="utf-8")
    custom = tmp_path / "topics.toml"
    custom.write_text(text.replace('name = "dlq"', 'name = "dead"'), encoding="utf-8")
    assert topic_names("p.", custom).dead_letters == "p.dead"


def test_topic_replication_factor_overrides_default() -> None:
    document = canonical_document()
    document["defaults"]["replication_factor"] = 3
    document["topics"]["dead_letters"]["replication_factor"] = 2
    by_key = {spec.key: spec for spec in parse_topic_specs(document, "x.")}
    assert by_key["results"].replication_factor == 3
    assert by_key["dead_letters"].replication_factor == 2


def test_toml_scalars_become_kafka_config_strings() -> None:
    document = canonical_document()
    document["topics"]["retry"]["configs"] = {
        "retention.ms": 60_000,
        "preallocate": True,
        "min.cleanable.dirty.ratio": 0.25,
    }
    retry = parse_topic_specs(document, "")[2]
    assert retry.configs == {
        "retention.ms": "60000",
        "preallocate": "true",
        "min.cleanable.dirty.ratio": "0.25",
    }


def broken(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """The canonical document with the entry at path replaced (or removed, for None)."""
    document = copy.deepcopy(canonical_document())
    table = document
    for part in path[:-1]:
        table = table[part]
    if value is None:
        del table[path[-1]]
    else:
        table[path[-1]] = value
    return document


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (broken(("topics", "retry", "partitions"), 0), r"topic 'retry', key 'partitions'.*got 0"),
        (broken(("topics", "retry", "partitions"), "4"), r"topic 'retry', key 'partitions'"),
        (broken(("topics", "retry", "partitions"), True), r"topic 'retry', key 'partitions'"),
        (broken(("topics", "results", "partitions"), None), r"topic 'results', key 'partitions'"),
        (
            broken(("topics", "dead_letters", "replication_factor"), -1),
            r"topic 'dead_letters', key 'replication_factor'",
        ),
        (broken(("defaults", "replication_factor"), 0), r"\[defaults\] key 'replication_factor'"),
        (broken(("topics", "results", "name"), ""), r"topic 'results', key 'name'"),
        (broken(("topics", "results", "name"), "a/b"), r"'x\.a/b' is not a legal Kafka topic"),
        (broken(("topics", "retry", "partiton"), 4), r"topic 'retry': unknown key\(s\) partiton"),
        (
            broken(("topics", "retries"), {"name": "r", "partitions": 1}),
            r"unknown key\(s\) retries",
        ),
        (broken(("topics", "retry"), None), r"\[topics\] lacks retry"),
        (broken(("topics", "retry"), "retry"), r"topic 'retry': must be a table"),
        (broken(("topics", "retry", "configs"), {"x": [1]}), r"topic 'retry', config 'x'"),
        (broken(("topics", "retry", "name"), "dlq"), r"several topics are named x\.dlq"),
        (broken(("topics",), None), r"\[topics\]: must be a table"),
        (broken(("extra",), 1), r"unknown key\(s\) extra"),
    ],
)
def test_invalid_declarations_name_the_topic_and_key(
    document: dict[str, Any], expected: str
) -> None:
    with pytest.raises(TopicConfigError, match=expected):
        parse_topic_specs(document, "x.")


def test_illegal_prefix_is_rejected() -> None:
    with pytest.raises(TopicConfigError, match="not a legal Kafka topic name"):
        load_topic_specs("embed/")


def test_overlong_name_is_rejected() -> None:
    with pytest.raises(TopicConfigError, match="longer than Kafka's 249"):
        load_topic_specs("p" * 240)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "topics.toml"
    path.write_text("[topics\n", encoding="utf-8")
    with pytest.raises(TopicConfigError, match=r"topics\.toml: invalid TOML"):
        load_topic_specs("", path)


SPEC = TopicSpec(
    key="retry",
    name="embed.retry",
    partitions=4,
    replication_factor=1,
    configs={"retention.ms": "1000", "cleanup.policy": "delete"},
)


def described(partitions: int = 4, retention: str = "1000") -> TopicDescription:
    return TopicDescription(
        name="embed.retry",
        partitions=partitions,
        replication_factor=1,
        configs={"retention.ms": retention, "cleanup.policy": "delete", "segment.ms": "9"},
    )


def test_drift_is_empty_when_broker_matches_declaration() -> None:
    assert describe_drift(SPEC, described()) == []


def test_drift_lists_each_difference() -> None:
    assert describe_drift(SPEC, described(partitions=2, retention="5")) == [
        "partitions 2 (declared 4)",
        "retention.ms=5 (declared 1000)",
    ]
    assert describe_drift(SPEC, None) == ["missing"]


def test_format_description_shows_declared_configs_and_status() -> None:
    dlq = TopicSpec("dead_letters", "embed.dlq", 1, 1, {})
    table = format_description([SPEC, dlq], [described(partitions=2)])
    header, retry_row, dlq_row = table.splitlines()
    assert header.split() == ["TOPIC", "PARTITIONS", "RF", "CONFIGS", "STATUS"]
    assert retry_row.split()[:5] == [
        "embed.retry",
        "2",
        "1",
        "cleanup.policy=delete",
        "retention.ms=1000",
    ]
    assert retry_row.endswith("partitions 2 (declared 4)")
    assert "segment.ms" not in table  # undeclared broker configs are not shown
    assert dlq_row.split() == ["embed.dlq", "-", "-", "-", "missing"]


# --------------------------------------------------------------------------- your own topics


def _settings(**values: Any) -> Settings:
    return load_settings(env={}, overrides=values)


def test_unset_topic_settings_give_the_prefixed_defaults() -> None:
    assert configured_topics(_settings(topic_prefix="t.")) == topic_names("t.")


def test_topic_settings_name_each_role_and_lanes_may_list_several() -> None:
    names = configured_topics(
        _settings(
            topic_requests_high="search.queries",
            topic_requests_low=" docs.text , tickets.body ",
            topic_results="vectors",
            topic_prefix="x.",
        )
    )
    assert names.high == ("search.queries",)
    assert names.low == ("docs.text", "tickets.body")
    assert (names.retry, names.results, names.dead_letters) == ("x.retry", "vectors", "x.dlq")
    assert names.inputs == ["search.queries", "docs.text", "tickets.body", "x.retry"]
    assert names.requests_low == "docs.text"  # where `produce` writes
    lanes = {topic: names.lane_of(topic) for topic in names.inputs}
    assert lanes == {
        "search.queries": InputLane.HIGH,
        "docs.text": InputLane.LOW,
        "tickets.body": InputLane.LOW,
        "x.retry": InputLane.RETRY,
    }


def test_every_topic_of_a_lane_gets_the_lane_declaration() -> None:
    specs = configured_specs(_settings(topic_requests_low="a,b"))
    low = [spec for spec in specs if spec.key == "requests_low"]
    assert [(s.name, s.borrowed, s.partitions) for s in low] == [("a", True, 4), ("b", True, 4)]
    assert not any(s.borrowed for s in specs if s.key != "requests_low")


@pytest.mark.parametrize(
    ("values", "setting", "problem"),
    [
        ({"topic_requests_low": "a,,b"}, "topic_requests_low", "empty entry"),
        ({"topic_retry": "r1,r2"}, "topic_retry", "names one topic"),
        ({"topic_results": "no/slash"}, "topic_results", "not a legal Kafka topic name"),
        ({"topic_dlq": "d" * 250}, "topic_dlq", "longer than Kafka's 249"),
        ({"topic_requests_high": "a", "topic_requests_low": "b,a"}, "topic_requests_low",
         "also in topic_requests_high"),
        ({"topic_requests_low": "a,a"}, "topic_requests_low", "lists a twice"),
    ],
)  # fmt: skip
def test_bad_topic_settings_fail_naming_the_setting(
    values: dict[str, str], setting: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        _settings(**values)
    assert caught.value.setting == setting


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        # A set topic that is the default of another role: results would be read back.
        ({"topic_requests_low": "embed.results"}, "topic_requests_low"),
        ({"topic_dlq": "embed.requests.high"}, "topic_dlq"),
    ],
)
def test_a_topic_in_two_roles_through_a_default_names_the_setting(
    values: dict[str, str], setting: str
) -> None:
    with pytest.raises(ConfigError, match="a topic has one role") as caught:
        configured_topics(_settings(**values))
    assert caught.value.setting == setting


def _plan(existing: set[str], **values: str) -> list[str]:
    specs = configured_specs(_settings(**values))
    return [spec.name for spec in plan_creation(specs, existing, "k:9092").create]


def test_create_on_a_fresh_cluster_makes_everything() -> None:
    assert _plan(set()) == [f"embed.{n}" for n in (*TOPIC_NAMES, "batch.jobs")]
    assert _plan(set(), topic_requests_low="orders") == [
        "embed.requests.high", "orders", "embed.retry", "embed.results", "embed.dlq",
        "embed.batch.jobs",
    ]  # fmt: skip


def test_create_next_to_existing_pipelines_makes_only_its_own_topics() -> None:
    plan = plan_creation(
        configured_specs(_settings(topic_requests_high="q", topic_requests_low="a,b")),
        {"q", "a", "b", "unrelated"},
        "k:9092",
    )
    own = ["embed.retry", "embed.results", "embed.dlq", "embed.batch.jobs"]
    assert [spec.name for spec in plan.create] == own
    assert plan.kept_borrowed == ["q", "a", "b"]
    # A lane left at its default name is embedstream's own: made when missing.
    assert _plan({"a"}, topic_requests_low="a") == ["embed.requests.high", *own]


def test_a_missing_named_request_topic_next_to_existing_ones_is_an_error() -> None:
    specs = configured_specs(_settings(topic_requests_low="orders.text,orders.txet"))
    with pytest.raises(ConfigError, match=r"orders\.txet does not exist at k:9092") as caught:
        plan_creation(specs, {"orders.text"}, "k:9092")
    assert caught.value.setting == "topic_requests_low"


def test_the_batch_jobs_topic_is_embedstreams_own_compacted_and_may_be_named() -> None:
    specs = {s.key: s for s in configured_specs(_settings())}
    jobs = specs["batch_jobs"]
    assert jobs.name == "embed.batch.jobs" and jobs.configs["cleanup.policy"] == "compact"
    assert int(jobs.configs["max.message.bytes"]) >= 1_048_576
    assert configured_topics(_settings(topic_batch_jobs="my.jobs")).batch_jobs == "my.jobs"
    with pytest.raises(ConfigError, match="a topic has one role") as caught:
        configured_topics(_settings(topic_batch_jobs="embed.results"))
    assert caught.value.setting == "topic_batch_jobs"


def test_the_chunk_changelog_is_off_unless_named_and_then_compacted_with_its_state() -> None:
    assert [s.key for s in configured_specs(_settings())] == [*TOPIC_KEYS, "batch_jobs"]
    assert configured_topics(_settings()).changelog is None
    specs = {s.key: s for s in configured_specs(_settings(topic_changelog="ix.chunks"))}
    changelog, state = specs["changelog"], specs["changelog_state"]
    assert (changelog.name, state.name) == ("ix.chunks", "ix.chunks.state")
    assert changelog.configs["cleanup.policy"] == state.configs["cleanup.policy"] == "compact"
    assert int(changelog.configs["delete.retention.ms"]) > 0
    names = configured_topics(_settings(topic_changelog="ix.chunks"))
    assert (names.changelog, names.changelog_state) == ("ix.chunks", "ix.chunks.state")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"topic_changelog": "embed.results"}, "also the results topic"),
        ({"topic_changelog": "a", "topic_dlq": "a.state"}, "state topic a.state is also in"),
        ({"topic_changelog": "c" * 245}, "longer than Kafka's 249"),
        ({"topic_changelog": "a,b"}, "names one topic"),
    ],
)
def test_a_changelog_name_at_fault_names_topic_changelog(
    values: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        configured_specs(_settings(**values))
    assert caught.value.setting == "topic_changelog"


def test_the_documents_topic_is_compacted_within_a_day_active_segment_too() -> None:
    """Kafka never compacts the active segment (rolled after 7 days by default) and waits for
    half the log to be dirty: without these, a week of edits stayed in the documents topic and
    a migration's backfill read every version (issue 43)."""
    specs = {s.key: s for s in configured_specs(_settings(topic_documents="ix.docs"))}
    configs = specs["documents"].configs
    assert configs["cleanup.policy"] == "compact"
    assert int(configs["segment.ms"]) <= 3_600_000  # the active segment rolls within an hour
    assert int(configs["max.compaction.lag.ms"]) <= 86_400_000  # compactable within a day

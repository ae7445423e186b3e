"""aiokafka's failures during a one-shot command, as one-line errors a user can act on."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
)

from embedstream.errors import ConfigError, EmbedStreamError
from embedstream.kafka.client.topics import topic_settings
from embedstream.settings import Settings


@contextmanager
def kafka_user_errors(settings: Settings) -> Iterator[None]:
    """aiokafka's failures as one-line errors that name the setting and what to do.

    A broker that cannot be reached, or answers with an error, is the user's environment, not
    a bug: the command reports it in one line (a traceback only with --log-level DEBUG).
    """
    try:
        yield
    except (KafkaConnectionError, KafkaTimeoutError, TimeoutError) as exc:
        # aiokafka's message lists resolved addresses, not why; --log-level DEBUG shows that.
        raise ConfigError(
            "bootstrap_servers",
            f"no Kafka broker answered at {settings.bootstrap_servers}"
            f"{' (timed out)' if not isinstance(exc, KafkaConnectionError) else ''}; "
            "check the address and that the broker is running",
        ) from exc
    except KafkaError as exc:
        raise EmbedStreamError(
            f"Kafka at {settings.bootstrap_servers} refused the request ({_why(exc)})"
        ) from exc


def _why(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    text = text.removeprefix(name + ": ")
    return f"{name}: {text}" if text else name


@contextmanager
def topics_must_exist(settings: Settings, topics: Sequence[str]) -> Iterator[None]:
    """A topic that vanished after the start-up check (see ``admin.require_topics``) ends the
    consumer's start with a bare UnknownTopicOrPartitionError: say which topics and what to do
    (which one is gone, aiokafka does not say)."""
    try:
        yield
    except UnknownTopicOrPartitionError as exc:
        naming = topic_settings(settings, ("requests_high", "requests_low", "retry"))
        setting = naming.get(topics[0], "topic_prefix") if topics else "topic_prefix"
        check = "the prefix" if setting == "topic_prefix" else "the names"
        raise ConfigError(
            setting,
            f"a topic of {', '.join(topics)} does not exist at {settings.bootstrap_servers}; "
            f"create the topics with `embedstream topics create` (or check {check})",
        ) from exc

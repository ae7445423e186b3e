"""Where raw setting values come from: a TOML file, the environment, secret files, overrides.

Lowest precedence first: the TOML file, the environment (``EMBEDSTREAM_<NAME>``, or for a
secret ``EMBEDSTREAM_<NAME>_FILE`` naming a file that holds it, as Kubernetes and Docker mount
secrets), then explicit overrides (the CLI). Values stay raw here; :mod:`embedstream.settings`
types and validates them. Unknown names are errors in every source, with a suggestion, because a
mistyped variable that silently does nothing is worse than one that stops the start.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from embedstream.errors import ENV_PREFIX, ConfigError, UnknownSetting, env_var

FILE_SUFFIX = "_FILE"

# Variables that embedstream's own scripts and tests read and that are not settings. They may
# be in the environment of any `embedstream` process the test suite starts, so they are allowed.
TOOL_VARIABLES: Mapping[str, str] = {
    "EMBEDSTREAM_TEST_BOOTSTRAP": "broker of the integration tests (ops/test.sh sets it)",
    "EMBEDSTREAM_TEST_SECURED_ENV": "secured.env of a running secured broker for the tests",
    "EMBEDSTREAM_TEST_WORKERS": "ops/test.sh: parallel pytest workers of unit and integration",
    "EMBEDSTREAM_TEST_E2E_WORKERS": "ops/test.sh: parallel pytest workers of the e2e tier",
    "EMBEDSTREAM_CHAOS": "size of the chaos tests: short (the test command) or long",
    "EMBEDSTREAM_REQUIRE_BROKER": "1: integration tests fail instead of skipping without a broker",
    "EMBEDSTREAM_REQUIRE_TOOLS": (
        "1: tests fail instead of skipping without a tool they need "
        "(promtool, prometheus, redis-server, tmux, wordllama, java and mvn for Kafka Connect)"
    ),
    "EMBEDSTREAM_PYTHON": "interpreter ops/kafka/kafka.sh probes the broker with",
    "EMBEDSTREAM_KAFKA_PORT": "ops/kafka/kafka.sh: client port",
    "EMBEDSTREAM_KAFKA_CONTROLLER_PORT": "ops/kafka/kafka.sh: KRaft controller port",
    "EMBEDSTREAM_KAFKA_SASL_SSL_PORT": "ops/kafka/kafka.sh: SASL_SSL listener port (secured)",
    "EMBEDSTREAM_KAFKA_SSL_PORT": "ops/kafka/kafka.sh: mutual-TLS SSL listener port (secured)",
    "EMBEDSTREAM_KAFKA_SECURED": "ops/kafka/kafka.sh: 1 adds the SASL_SSL and SSL listeners",
    "EMBEDSTREAM_KAFKA_DIR": "ops/kafka/kafka.sh: data directory",
    "EMBEDSTREAM_KAFKA_CACHE": "ops/kafka/kafka.sh: jar cache",
    "EMBEDSTREAM_KAFKA_AUTO_CREATE_TOPICS": "ops/kafka/kafka.sh: auto.create.topics.enable",
    "EMBEDSTREAM_CONNECT_CACHE": "ops/kafka/connect.sh: jar cache of Kafka Connect",
    "EMBEDSTREAM_CONNECT_HEAP": "ops/kafka/connect.sh: the Connect worker's -Xmx",
}


# Settings that existed once, and what replaced each: refused with that in one line, rather
# than as an unknown name, so an old deployment's setting says what to use now.
REMOVED_SETTINGS: Mapping[str, str] = {
    "high_guard": "set high_process=true: the high lane runs in a process of its own, its "
    "fetch, calls and commits waiting for nothing of the bulk's; delete the setting",
    "high_results_producer": "high results share the one producer (a second one measured no "
    "gain); delete the setting",
    "online_thread": "embedstream run with http_port runs the online lane as a process of its "
    "own (embedstream serve), on the same provider budget; delete the setting",
    "high_thread": "run a processor with input_lanes=high beside one with input_lanes=bulk "
    "(processes of their own, on one provider budget); delete the setting",
    "id_field": "name the path in field_map, e.g. field_map=id=event_id",
    "text_field": "name the path in field_map, e.g. field_map=text=body.content",
    "doc_id_field": "name the path in field_map, e.g. field_map=doc_id=doc.key",
    "priority_field": "name the path in field_map, e.g. field_map=priority=meta.prio",
    "concurrency_mode": "set target_latency_ms above 0 for the adaptive limit (AIMD on 429, "
    "503 and calls slower than it; a large value: on 429 and 503 alone), 0 for a fixed one",
    "online_url": "give `embedstream sink search` --online-url (and --online-key-file)",
    "online_api_key": "give `embedstream sink search` --online-key-file, a file holding the key",
    "schema_registry_cache_size": "every schema read is kept (an id's schema never changes); "
    "delete the setting",
    "max_buffered_items": "memory is bounded by max_buffered_bytes; the item count follows "
    "from max_batch_size x max_concurrency (two full calls per slot, at least 5000)",
    "cache_max_items": "the in-process tier keeps as many vectors as cache_max_bytes holds at "
    "1536 dimensions (10,319 in 64 MiB); size it in bytes with cache_max_bytes",
    "high_target_ms": "it did not shorten the high lane's wait, which was not in the calls "
    "(docs/benchmarks/lanes.md); set high_process=true, the high lane in a process of its own",
}


def removed(name: str) -> ConfigError:
    return ConfigError(name, f"was removed; {REMOVED_SETTINGS[name]}")


def secret_file_var(setting: str) -> str:
    return env_var(setting) + FILE_SUFFIX


def collect_raw(
    names: Sequence[str],
    *,
    secrets: Iterable[str],
    alt_env: Mapping[str, str],
    env: Mapping[str, str] | None,
    file: Path | None,
    overrides: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The raw value of every setting some source sets, by setting name."""
    known = set(names)
    secret_names = set(secrets)
    raw: dict[str, Any] = {}
    if file is not None:
        raw.update(_from_toml(file, known))
    if env is not None:
        check_environment(env, names, secret_names)
        from_toml = set(raw)
        for name in names:
            value = env.get(env_var(name))
            file_var = secret_file_var(name)
            if name in secret_names and env.get(file_var):
                if value:
                    raise ConfigError(name, f"set {env_var(name)} or {file_var}, not both")
                raw[name] = read_secret_file(name, file_var, env[file_var])
            elif value not in (None, ""):
                raw[name] = value
            elif name in alt_env and env.get(alt_env[name]) and name not in from_toml:
                raw[name] = env[alt_env[name]]
    for key, value in (overrides or {}).items():
        if key in REMOVED_SETTINGS and value is not None:
            raise removed(key)
        if key not in known:
            raise UnknownSetting(key, "unknown setting", _suggest(key, known))
        if value is not None:
            raw[key] = value
    return raw


def _from_toml(file: Path, known: set[str]) -> dict[str, Any]:
    try:
        with file.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError("config_file", f"cannot read {file}: {exc}") from exc
    for key in data:
        if key in REMOVED_SETTINGS:
            raise removed(key)
        if key not in known:
            raise UnknownSetting(key, f"unknown setting in {file}", _suggest(key, known))
    return dict(data)


def check_environment(env: Mapping[str, str], names: Sequence[str], secrets: set[str]) -> None:
    """Raise for the first ``EMBEDSTREAM_*`` variable that is neither a setting, a secret's
    ``_FILE`` variant nor a tool variable, suggesting the nearest setting's variable."""
    settings_vars = {env_var(name): name for name in names}
    allowed = set(settings_vars) | {secret_file_var(n) for n in secrets} | set(TOOL_VARIABLES)
    for variable in sorted(env):
        gone = variable.removeprefix(ENV_PREFIX).lower()
        if variable.startswith(ENV_PREFIX) and gone in REMOVED_SETTINGS:
            raise removed(gone)
        if variable.startswith(ENV_PREFIX) and variable not in allowed:
            # Compare the names without the shared prefix, which would make everything "close".
            wanted = variable.removeprefix(ENV_PREFIX).lower()
            near = difflib.get_close_matches(wanted, list(names), n=1, cutoff=0.6)
            hint = f"{env_var(near[0])} ({near[0]})" if near else None
            raise UnknownSetting(variable, "unknown environment variable", hint)


def read_secret_file(setting: str, variable: str, path: str) -> str:
    """A secret from the file a ``_FILE`` variable names. One trailing newline is dropped (what
    `echo` and most secret stores write); anything else is part of the secret."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(setting, f"cannot read {variable}={path}: {reason}") from exc
    secret = text.removesuffix("\n").removesuffix("\r")
    if not secret:
        raise ConfigError(setting, f"{variable}={path} is empty")
    return secret


def _suggest(name: str, known: set[str]) -> str | None:
    near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return near[0] if near else None

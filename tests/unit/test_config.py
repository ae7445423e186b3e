from __future__ import annotations

import re
from pathlib import Path

import pytest
from embedstream.errors import ConfigError, UnknownSetting, env_var
from embedstream.settings import (
    FIELDS,
    SECRETS,
    TOOL_VARIABLES,
    Group,
    Settings,
    load_settings,
    reference_rows,
    scrub_url,
    spec,
)
from embedstream.settings.origins import REMOVED_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
SOURCE_SUFFIXES = {".py", ".sh", ".md", ".toml", ".yml", ".yaml", ".json", ""}


def test_defaults_are_valid() -> None:
    assert load_settings(env={}) == Settings()


def test_env_file_and_overrides_in_order(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text('max_batch_size = 32\nmodel = "from-file"\n')
    env = {"EMBEDSTREAM_MODEL": "from-env", "EMBEDSTREAM_MAX_WAIT_MS": "7.5"}
    s = load_settings(env=env, file=file, overrides={"max_concurrency": "9"})
    assert (s.max_batch_size, s.model, s.max_wait_ms, s.max_concurrency) == (32, "from-env", 7.5, 9)


def test_openai_fallback_variables() -> None:
    s = load_settings(env={"OPENAI_API_KEY": "sk-canary", "OPENAI_BASE_URL": "http://h/v1"})
    assert (s.api_key, s.base_url) == ("sk-canary", "http://h/v1")
    assert "sk-canary" not in repr(s)
    assert s.describe()["api_key"] == "***"


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"EMBEDSTREAM_MAX_BATCH_SIZE": "-1"}, "max_batch_size"),
        ({"EMBEDSTREAM_MAX_BATCH_SIZE": "many"}, "max_batch_size"),
        ({"EMBEDSTREAM_MAX_WAIT_MS": "-3"}, "max_wait_ms"),
        ({"EMBEDSTREAM_SCALE_FACTOR": "0"}, "scale_factor"),
        ({"EMBEDSTREAM_MODEL": " "}, "model"),
        ({"EMBEDSTREAM_BOOTSTRAP_SERVERS": "nohostport"}, "bootstrap_servers"),
        ({"EMBEDSTREAM_LOG_FORMAT": "xml"}, "log_format"),
        ({"EMBEDSTREAM_METRICS_PORT": "70000"}, "metrics_port"),
        ({"EMBEDSTREAM_BASE_URL": "ftp://x"}, "base_url"),
        ({"EMBEDSTREAM_MAX_BUFFERED_BYTES": "1000"}, "max_buffered_bytes"),  # < max_event_bytes
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env=env)
    assert info.value.setting == setting
    assert setting in str(info.value)
    assert "EMBEDSTREAM_" + setting.upper() in str(info.value)


def test_unknown_setting_in_file(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text("max_batch_sizes = 3\n")
    with pytest.raises(ConfigError, match="max_batch_sizes"):
        load_settings(env={}, file=file)


def test_reference_covers_every_setting() -> None:
    names = [row.name for row in reference_rows()]
    assert names == list(Settings.__dataclass_fields__)


# --------------------------------------------------------------------------- ranges


FLOAT_SETTINGS = [name for name, f in FIELDS.items() if str(f.type) == "float"]


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN", "infinity"])
@pytest.mark.parametrize("name", FLOAT_SETTINGS)
def test_every_float_setting_must_be_finite(name: str, text: str) -> None:
    # A NaN max_wait_ms never fires a flush: the processor looked ready and did nothing.
    with pytest.raises(ConfigError) as info:
        load_settings(env={env_var(name): text})
    assert info.value.setting == name
    assert "finite" in str(info.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("request_timeout_s", "0"),
        ("connect_timeout_s", "-1"),
        ("retry_backoff_base_ms", "0"),
        ("retry_backoff_cap_ms", "-5"),
        ("drain_timeout_s", "0"),
        ("rate_limit_rpm", "-1"),
        ("rate_limit_tpm", "-0.5"),
        ("target_latency_ms", "-1"),
        ("min_low_share", "1"),
        ("min_low_share", "-0.1"),
        ("metrics_port", "-1"),
        ("max_buffered_bytes", "0"),
        ("fetch_max_wait_ms", "-1"),
        ("max_poll_records", "0"),
        ("log_level", "verbose"),
        ("security_protocol", "TLS"),
        ("sasl_mechanism", "GSSAPI"),
        ("ssl_check_hostname", "maybe"),
        ("max_wait_ms", "true"),
        # Finite but absurd: a typo, and a backoff cap of 1e300 ms made every retry record
        # carry a not-before time no header can hold (each retry then dead-lettered).
        ("retry_backoff_cap_ms", "1e300"),
        ("retry_backoff_base_ms", "86400001"),
        ("drain_timeout_s", "3601"),
        ("request_timeout_s", "1e9"),
        ("connect_timeout_s", "86400"),
        ("max_wait_ms", "60001"),
        ("scale_factor", "1e12"),
        ("target_latency_ms", "1e12"),
    ],
)
def test_out_of_range_values_name_the_setting(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env={env_var(name): value})
    assert info.value.setting == name
    assert f"setting {name} ({env_var(name)})" in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("debug", "DEBUG"), ("Info", "INFO"), ("WARNING", "WARNING"), ("error", "ERROR")],
)
def test_log_level_is_case_insensitive(value: str, expected: str) -> None:
    assert load_settings(env={"EMBEDSTREAM_LOG_LEVEL": value}).log_level == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("false", False), ("0", False), ("no", False), ("TRUE", True), ("1", True), ("on", True)],
)
def test_booleans_from_text(value: str, expected: bool) -> None:
    settings = load_settings(env={"EMBEDSTREAM_SSL_CHECK_HOSTNAME": value})
    assert settings.ssl_check_hostname is expected


def test_booleans_from_toml(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text("ssl_check_hostname = false\n")
    assert load_settings(env={}, file=file).ssl_check_hostname is False


# --------------------------------------------------------------------------- unknown names


@pytest.mark.parametrize(
    ("variable", "suggestion"),
    [
        ("EMBEDSTREAM_MAX_BACH_SIZE", "EMBEDSTREAM_MAX_BATCH_SIZE (max_batch_size)"),
        ("EMBEDSTREAM_SASL_PASWORD", "EMBEDSTREAM_SASL_PASSWORD (sasl_password)"),
        ("EMBEDSTREAM_BOOTSTRAP_SERVER", "EMBEDSTREAM_BOOTSTRAP_SERVERS (bootstrap_servers)"),
        ("EMBEDSTREAM_MODEL_FILE", "EMBEDSTREAM_MODEL (model)"),  # only secrets have _FILE
        ("EMBEDSTREAM_WHATEVER_ELSE_ENTIRELY", None),
    ],
)
def test_unknown_environment_variables_fail_with_a_suggestion(
    variable: str, suggestion: str | None
) -> None:
    with pytest.raises(UnknownSetting) as info:
        load_settings(env={variable: "5"})
    assert variable in str(info.value)
    if suggestion:
        assert f"did you mean {suggestion}?" in str(info.value)
    else:
        assert "did you mean" not in str(info.value)


def test_unknown_override_suggests_the_setting() -> None:
    with pytest.raises(UnknownSetting, match="did you mean max_batch_size"):
        load_settings(env={}, overrides={"max_bach_size": 3})


def test_other_variables_and_tool_variables_are_allowed() -> None:
    env = {name: "1" for name in TOOL_VARIABLES} | {"OPENAI_API_KEY": "sk-x", "PATH": "/bin"}
    assert load_settings(env=env).api_key == "sk-x"


def test_every_embedstream_variable_in_the_repository_is_known() -> None:
    # A variable a script or test reads must be a setting, a secret's _FILE or a listed tool
    # variable; otherwise `embedstream run` launched with it in the environment would refuse.
    known = {env_var(n) for n in FIELDS} | {env_var(n) + "_FILE" for n in SECRETS}
    known |= set(TOOL_VARIABLES)
    found: set[str] = set()
    for path in ROOT.rglob("*"):
        if ".git" in path.parts or not path.is_file() or path.suffix not in SOURCE_SUFFIXES:
            continue
        found |= set(re.findall(r"EMBEDSTREAM_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="ignore")))
    examples = {"EMBEDSTREAM_MAX_BACH_SIZE", "EMBEDSTREAM_SASL_PASWORD", "EMBEDSTREAM_MODEL_FILE"}
    examples |= {"EMBEDSTREAM_BOOTSTRAP_SERVER", "EMBEDSTREAM_WHATEVER_ELSE_ENTIRELY"}
    examples |= {env_var(name) for name in REMOVED_SETTINGS}  # the tests of their refusal
    assert found - known - examples - {"EMBEDSTREAM_"} == set()


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("name", ["api_key", "sasl_password", "ssl_keyfile_password"])
def test_secret_from_file_with_its_trailing_newline_dropped(tmp_path: Path, name: str) -> None:
    secret = tmp_path / "secret"
    secret.write_text("canary-s3cret \n")
    env = {env_var(name) + "_FILE": str(secret)} | SECURE_ENV
    if name == "sasl_password":
        del env["EMBEDSTREAM_SASL_PASSWORD"]
    if name == "ssl_keyfile_password":
        env |= _client_certificate_env(tmp_path)
    settings = load_settings(env=env)
    assert getattr(settings, name) == "canary-s3cret "
    assert "canary-s3cret" not in repr(settings)
    assert settings.describe()[name] == "***"


def test_secret_file_problems_name_the_setting(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(ConfigError) as info:
        load_settings(env={"EMBEDSTREAM_API_KEY_FILE": str(missing)})
    assert info.value.setting == "api_key" and "EMBEDSTREAM_API_KEY_FILE" in str(info.value)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="is empty"):
        load_settings(env={"EMBEDSTREAM_API_KEY_FILE": str(empty)})
    with pytest.raises(ConfigError, match="not both"):
        load_settings(env={"EMBEDSTREAM_API_KEY_FILE": str(empty), "EMBEDSTREAM_API_KEY": "x"})


def test_secret_file_wins_over_the_openai_fallback(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("from-file")
    env = {"EMBEDSTREAM_API_KEY_FILE": str(secret), "OPENAI_API_KEY": "from-openai"}
    assert load_settings(env=env).api_key == "from-file"


def test_every_secret_is_masked_and_urls_are_scrubbed(tmp_path: Path) -> None:
    env = SECURE_ENV | _client_certificate_env(tmp_path) | {
        "EMBEDSTREAM_SASL_PASSWORD": "canary-sasl",
        "EMBEDSTREAM_SSL_KEYFILE_PASSWORD": "canary-key",
        "EMBEDSTREAM_API_KEY": "canary-api",
        "EMBEDSTREAM_BASE_URL": "https://user:canary-url@gateway.example/v1",
        "EMBEDSTREAM_CACHE": "redis",
        "EMBEDSTREAM_CACHE_URL": "rediss://:canary-redis@cache.example:6380/0",
        "EMBEDSTREAM_BUDGET_URL": "rediss://:canary-budget@budget.example:6380/1",
        "EMBEDSTREAM_EXTRA_HEADERS": '{"X-Gateway-Key": "canary-gw", "X-Route": "eu"}',
        "EMBEDSTREAM_INPUT_FORMAT": "avro",
        "EMBEDSTREAM_SCHEMA_REGISTRY_URL": "https://reg:canary-reg-url@registry.example",
        "EMBEDSTREAM_SCHEMA_REGISTRY_USERNAME": "reg",
        "EMBEDSTREAM_SCHEMA_REGISTRY_PASSWORD": "canary-reg",
        "EMBEDSTREAM_STORE_DSN": "postgresql://writer:canary-pg@db:5432/v?sslmode=require",
        "EMBEDSTREAM_TRACING_HEADERS": '{"Authorization": "Bearer canary-otlp"}',
        "EMBEDSTREAM_HTTP_API_KEYS": "rag:canary-rag,indexer:canary-idx",
    }  # fmt: skip
    settings = load_settings(env=env)
    shown = repr(settings) + str(settings.describe())
    assert "canary" not in shown
    assert settings.describe()["base_url"] == "https://user:***@gateway.example/v1"
    assert settings.describe()["cache_url"] == "rediss://***@cache.example:6380/0"
    assert "canary-redis" in settings.secret_values()  # the log filter masks it alone too
    assert settings.describe()["budget_url"] == "rediss://***@budget.example:6380/1"
    assert "canary-budget" in settings.secret_values()
    assert set(SECRETS) == {
        "api_key",
        "sasl_password",
        "ssl_keyfile_password",
        "extra_headers",
        "cache_url",
        "budget_url",
        "schema_registry_password",
        "schema_registry_bearer_token",
        "schema_registry_ssl_keyfile_password",
        "store_dsn",
        "tracing_headers",
        "http_api_keys",
    }
    assert "canary-reg-url" in settings.secret_values()  # the registry URL's password alone
    assert "canary-pg" in settings.secret_values()
    # A message would quote one header value, never the whole JSON: each is masked on its own.
    assert "canary-gw" in settings.secret_values()
    assert "canary-otlp" in settings.secret_values()  # the collector's token, bare too
    assert {"canary-rag", "canary-idx"} <= set(settings.secret_values())  # each caller's key


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://***@h:6379/0"),
        ("redis://user:pw@h/1?ssl_ca_certs=/ca.pem&password=x", "redis://***@h/1"),
        ("redis://h:6379", "redis://h:6379"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ],
)
def test_the_cache_url_shows_its_host_never_its_password(url: str, shown: str) -> None:
    settings = load_settings(env={"EMBEDSTREAM_CACHE": "redis", "EMBEDSTREAM_CACHE_URL": url})
    assert settings.describe()["cache_url"] == shown


def test_the_cache_url_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "cache-url"
    secret.write_text("redis://:canary-file@h:6379/0\n")
    env = {"EMBEDSTREAM_CACHE": "redis", "EMBEDSTREAM_CACHE_URL_FILE": str(secret)}
    settings = load_settings(env=env)
    assert settings.cache_url == "redis://:canary-file@h:6379/0"
    assert "canary" not in repr(settings)


@pytest.mark.parametrize(
    ("env", "setting", "message"),
    [
        ({"EMBEDSTREAM_CACHE": "redis"}, "cache_url", "needs a Redis URL"),
        (
            {"EMBEDSTREAM_CACHE": "redis", "EMBEDSTREAM_CACHE_URL": "http://:canary@h"},
            "cache_url",
            "must start with redis://",
        ),
        ({"EMBEDSTREAM_CACHE": "disk"}, "cache", "must be one of off, memory, redis"),
        ({"EMBEDSTREAM_CACHE_TTL_S": "-1"}, "cache_ttl_s", "must be >= 0"),
        ({"EMBEDSTREAM_CACHE_MAX_BYTES": "0"}, "cache_max_bytes", "must be > 0"),
        ({"EMBEDSTREAM_CACHE_TIMEOUT_MS": "nan"}, "cache_timeout_ms", "finite"),
    ],
)
def test_bad_cache_settings_fail_naming_them(
    env: dict[str, str], setting: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env=env)
    assert info.value.setting == setting and message in str(info.value)
    assert "canary" not in str(info.value)


@pytest.mark.parametrize(
    ("values", "setting", "problem"),
    [
        ({"provider_profile": "azure"}, "azure_endpoint", "needs the resource endpoint"),
        ({"provider_profile": "azure", "azure_endpoint": "https://r.openai.azure.com",
          "base_url": "http://h/v1"}, "base_url", "set azure_endpoint instead"),
        ({"provider_profile": "azure", "azure_endpoint": "https://r.openai.azure.com"},
         "api_key", "needs the resource's key"),
        ({"azure_deployment": "emb"}, "azure_deployment", "set it to azure"),
        ({"provider_profile": "azure", "azure_endpoint": "r.openai.azure.com", "api_key": "k"},
         "azure_endpoint", "must start with https://"),
        ({"extra_headers": "[1, 2]"}, "extra_headers", "must be a JSON object"),
        ({"extra_headers": '{"X-Key": 5}'}, "extra_headers", "must be a string"),
        ({"extra_headers": '{"X Key": "v"}'}, "extra_headers", "is not a header name"),
        ({"extra_body": "{not json"}, "extra_body", "must be a JSON object"),
        ({"extra_body": '{"input": [], "model": "m"}'}, "extra_body", "must not set input, model"),
    ],
)  # fmt: skip
def test_provider_settings_fail_naming_the_setting(
    values: dict[str, str], setting: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        load_settings(env={}, overrides=values)
    assert caught.value.setting == setting


def test_a_malformed_secret_header_object_does_not_echo_it() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, overrides={"extra_headers": '{"X-Key": "canary-gw"'})
    assert "canary" not in str(caught.value)


def test_extra_headers_and_body_parse_into_mappings() -> None:
    settings = load_settings(
        env={},
        overrides={"extra_headers": '{"X-Route": "eu"}', "extra_body": '{"truncate": true}'},
    )
    assert settings.extra_header_map == {"X-Route": "eu"}
    assert settings.extra_body_map == {"truncate": True}


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:p@h:8080/v1", "http://u:***@h:8080/v1"),
        ("http://token@h/v1", "http://token:***@h/v1"),
        ("http://h/v1?x=a@b", "http://h/v1?x=a@b"),
        ("plain text", "plain text"),
    ],
)
def test_scrub_url(url: str, shown: str) -> None:
    assert scrub_url(url) == shown


def test_a_bad_url_is_reported_without_its_credentials() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env={"EMBEDSTREAM_BASE_URL": "ftp://u:canary@h/v1"})
    assert "canary" not in str(info.value)


# --------------------------------------------------------------------------- Kafka security


SECURE_ENV = {
    "EMBEDSTREAM_SECURITY_PROTOCOL": "SASL_SSL",
    "EMBEDSTREAM_SASL_MECHANISM": "SCRAM-SHA-512",
    "EMBEDSTREAM_SASL_USERNAME": "alice",
    "EMBEDSTREAM_SASL_PASSWORD": "pw",
}


def _client_certificate_env(tmp_path: Path) -> dict[str, str]:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    key.write_text("-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
    return {"EMBEDSTREAM_SSL_CERTFILE": str(cert), "EMBEDSTREAM_SSL_KEYFILE": str(key)}


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        (SECURE_ENV | {"EMBEDSTREAM_SASL_USERNAME": ""}, "sasl_username"),
        (SECURE_ENV | {"EMBEDSTREAM_SASL_PASSWORD": ""}, "sasl_password"),
        (SECURE_ENV | {"EMBEDSTREAM_SASL_MECHANISM": "OAUTHBEARER"}, "sasl_oauth_token_file"),
        ({"EMBEDSTREAM_SASL_USERNAME": "alice"}, "security_protocol"),
        ({"EMBEDSTREAM_SASL_PASSWORD": "pw"}, "security_protocol"),
        ({"EMBEDSTREAM_SSL_CAFILE": "/etc/hostname"}, "security_protocol"),
        (SECURE_ENV | {"EMBEDSTREAM_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                       "EMBEDSTREAM_SSL_CAFILE": "/etc/hostname"}, "security_protocol"),
        (SECURE_ENV | {"EMBEDSTREAM_SSL_CAFILE": "/nonexistent/ca.pem"}, "ssl_cafile"),
        (SECURE_ENV | {"EMBEDSTREAM_SSL_CERTFILE": "/nonexistent/c.pem"}, "ssl_certfile"),
        (SECURE_ENV | {"EMBEDSTREAM_SSL_KEYFILE": "/etc/hostname"}, "ssl_certfile"),
        (SECURE_ENV | {"EMBEDSTREAM_SSL_KEYFILE_PASSWORD": "x"}, "ssl_keyfile_password"),
    ],
)  # fmt: skip
def test_security_settings_must_agree(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env=env)
    assert info.value.setting == setting, str(info.value)
    assert "pw" not in str(info.value).split(":", 1)[1].split()  # the password is not echoed


def test_secured_settings_load(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("jwt")
    settings = load_settings(
        env=SECURE_ENV
        | {
            "EMBEDSTREAM_SASL_MECHANISM": "OAUTHBEARER",
            "EMBEDSTREAM_SASL_OAUTH_TOKEN_FILE": str(token),
        }
    )
    assert settings.sasl_mechanism == "OAUTHBEARER"


# --------------------------------------------------------------------------- groups


def test_every_setting_has_a_group_and_groups_are_contiguous() -> None:
    groups = [spec(name).group for name in FIELDS]
    assert all(isinstance(group, Group) for group in groups)
    order = [group for i, group in enumerate(groups) if i == 0 or groups[i - 1] != group]
    assert order == list(Group), "settings of one group must be declared together, in order"
    assert {spec(name).group for name in FIELDS} == set(Group)

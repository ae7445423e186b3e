from __future__ import annotations

from pathlib import Path

import pytest
from embedstream.config import Settings, load_settings, reference_rows
from embedstream.errors import ConfigError


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
        ({"EMBEDSTREAM_MAX_BUFFERED_ITEMS": "10"}, "max_buffered_items"),
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
    names = [row[0] for row in reference_rows()]
    assert names == list(Settings.__dataclass_fields__)

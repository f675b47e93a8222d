"""Settings: sources, precedence, validation messages, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core import ConfigError, load_settings
from agent_core.settings import missing_model_message


def test_defaults() -> None:
    s = load_settings()
    assert s.llm_temperature == 0.1 and s.agent_max_round == 15
    assert s.agent_default_verbose is False and not s.model_configured


def test_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_PROVIDER", "openai")
    monkeypatch.setenv("LLM_MODEL_NAME", "gpt-4o-mini")
    monkeypatch.setenv("LLM_API_KEY", "sk-test-abcdefghijklmnopqrstuvwxyz")
    monkeypatch.setenv("AGENT_MAX_ROUND", "7")
    s = load_settings()
    assert s.model_configured and s.agent_max_round == 7
    assert "sk-test" not in repr(s) and "sk-test" not in str(s.model_dump())


@pytest.mark.parametrize(("var", "value", "expected"), [
    ("LLM_TEMPERATURE", "hot", "LLM_TEMPERATURE='hot'"),
    ("LLM_TEMPERATURE", "3", "less than or equal to 2"),
    ("LLM_PROVIDER", "openia", "'openai', 'anthropic' or 'ollama'"),
    ("AGENT_MAX_ROUND", "0", "AGENT_MAX_ROUND='0'"),
    ("LLM_BASE_URL", "localhost:8000", "http:// or https://"),
])
def test_a_wrong_value_names_the_variable_and_what_is_allowed(
        monkeypatch: pytest.MonkeyPatch, var: str, value: str, expected: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert var in str(err.value) and expected in str(err.value)


def test_yaml_file_maps_model_section_and_reads_the_key_from_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "hermes.yaml"
    config.write_text(
        "model:\n  provider: anthropic\n  model_name: claude-x\n  api_key_env: MY_KEY\n"
        "  temperature: 0.5\n  max_tokens: 999\nagent:\n  max_round: 9\n")
    monkeypatch.setenv("HERMES_CONFIG", str(config))
    monkeypatch.setenv("MY_KEY", "anthropic-secret-value")
    s = load_settings()
    assert s.llm_provider == "anthropic" and s.llm_model_name == "claude-x"
    assert s.llm_temperature == 0.5 and s.llm_max_tokens == 999 and s.agent_max_round == 9
    assert s.llm_api_key is not None
    assert s.llm_api_key.get_secret_value() == "anthropic-secret-value"


def test_environment_beats_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "hermes.yaml"
    config.write_text("model:\n  temperature: 0.5\n")
    monkeypatch.setenv("HERMES_CONFIG", str(config))
    monkeypatch.setenv("LLM_TEMPERATURE", "0.2")
    assert load_settings().llm_temperature == 0.2


def test_missing_or_broken_yaml_is_a_clear_error(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="no such file"):
        load_settings()
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    monkeypatch.setenv("HERMES_CONFIG", str(bad))
    with pytest.raises(ConfigError, match="cannot parse"):
        load_settings()


def test_secret_values_are_not_echoed_in_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_FALLBACKS", '[{"provider": "nope", "model_name": "x", '
                                        '"api_key": "sk-secret-in-error-abcdef"}]')
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "LLM_FALLBACKS[0].provider='nope'" in str(err.value)
    assert "sk-secret-in-error" not in str(err.value)


def test_missing_model_message_names_the_settings_and_the_demo(
        monkeypatch: pytest.MonkeyPatch) -> None:
    text = missing_model_message()
    for name in ("LLM_PROVIDER", "LLM_MODEL_NAME", "LLM_API_KEY", "LLM_BASE_URL",
                 "`hermes-gateway demo`"):
        assert name in text
    monkeypatch.setenv("HERMES_INVOKED_AS", "python3 dev.py")
    assert "`python3 dev.py demo`" in missing_model_message()


def _mounted_secret(parent: Path, name: str, files: dict[str, str]) -> Path:
    """A directory laid out as the kubelet mounts a Secret: the files in a timestamped
    folder, ``..data`` linking to it and each name linking through ``..data``."""
    mount = parent / name
    real = mount / "..2024_05_01_12_00_00.000000001"
    real.mkdir(parents=True)
    for key, value in files.items():
        (real / key).write_text(value + "\n")
    (mount / "..data").symlink_to(real.name)
    for key in files:
        (mount / key).symlink_to(f"..data/{key}")
    return mount


def test_secret_settings_are_read_from_mounted_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HERMES_SECRETS_DIR: the chart mounts each workload's Secrets as files instead of
    putting them in the environment; later directories win, the environment wins over all."""
    from gateway.settings import GatewaySettings

    settings_dir = _mounted_secret(tmp_path, "settings", {
        "LLM_API_KEY": "sk-from-the-settings-file", "SLACK_BOT_TOKEN": "xoxb-from-a-file",
        "HERMES_WEBHOOK_SECRETS": '{"crm": "whsec-from-a-file"}',
        "REDIS_URL": "redis://:overridden@elsewhere:6379/0"})
    chart_dir = _mounted_secret(tmp_path, "chart", {
        "REDIS_URL": "redis://:store-pw@rel-hermes-gateway-valkey:6379/0",
        "NATS_URL": "nats://gateway:bus-pw@rel-hermes-gateway-nats:4222"})
    monkeypatch.setenv("HERMES_SECRETS_DIR", f"{settings_dir}:{chart_dir}")
    s = load_settings(GatewaySettings)
    assert s.llm_api_key is not None
    assert s.llm_api_key.get_secret_value() == "sk-from-the-settings-file"
    assert s.slack_bot_token is not None
    assert s.slack_bot_token.get_secret_value() == "xoxb-from-a-file"
    assert s.hermes_webhook_secrets["crm"].get_secret_value() == "whsec-from-a-file"
    assert s.redis_url is not None  # the later directory (the chart's) wins
    assert s.redis_url.get_secret_value() == "redis://:store-pw@rel-hermes-gateway-valkey:6379/0"
    assert [u.get_secret_value() for u in s.nats_url] == [
        "nats://gateway:bus-pw@rel-hermes-gateway-nats:4222"]
    assert "bus-pw" not in repr(s) and "sk-from" not in str(s.model_dump())
    assert any("store-pw" in v for v in s.secret_values())  # redacted from logs
    monkeypatch.setenv("LLM_API_KEY", "sk-from-the-environment")
    key = load_settings(GatewaySettings).llm_api_key
    assert key is not None and key.get_secret_value() == "sk-from-the-environment"


def test_a_model_key_named_by_api_key_env_is_read_from_a_mounted_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mounted = _mounted_secret(tmp_path, "settings", {"BACKUP_KEY": "sk-backup-from-a-file",
                                                     "MY_KEY": "anthropic-from-a-file"})
    monkeypatch.setenv("HERMES_SECRETS_DIR", str(mounted))
    monkeypatch.setenv("LLM_FALLBACKS", '[{"provider": "openai", "model_name": "b", '
                                        '"api_key_env": "BACKUP_KEY"}]')
    config = tmp_path / "hermes.yaml"
    config.write_text("model:\n  provider: anthropic\n  model_name: c\n  api_key_env: MY_KEY\n")
    monkeypatch.setenv("HERMES_CONFIG", str(config))
    s = load_settings()
    assert s.llm_api_key is not None
    assert s.llm_api_key.get_secret_value() == "anthropic-from-a-file"
    key = s.llm_fallbacks[0].resolved_key()
    assert key is not None and key.get_secret_value() == "sk-backup-from-a-file"
    assert "sk-backup-from-a-file" in s.secret_values()


def test_a_secrets_dir_that_is_not_there_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_SECRETS_DIR", str(tmp_path / "not-mounted"))
    with pytest.raises(ConfigError,
                       match=r"HERMES_SECRETS_DIR: .*not-mounted.* is not a directory"):
        load_settings()


def test_budgets_prices_and_rate_limits_from_yaml_and_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.settings import GatewaySettings

    config = tmp_path / "hermes.yaml"
    config.write_text(
        "budgets:\n"
        "  - {scope: user, window: day, tokens: 200000, exempt_roles: [admin]}\n"
        "  - {scope: global, window: month, usd: 500}\n"
        "  - {scope: schedule, window: day, usd: 1.0, match: {schedule: nightly}, id: nightly}\n"
        "model_prices:\n"
        "  gpt-4o-mini: {input_per_mtok: 0.15, output_per_mtok: 0.6}\n"
        "hermes:\n  rate_limit: 20/min\n  timezone: Europe/Berlin\n")
    monkeypatch.setenv("HERMES_CONFIG", str(config))
    s = load_settings(GatewaySettings)
    assert [(r.scope, r.window, r.tokens, r.usd) for r in s.hermes_budgets] == [
        ("user", "day", 200000, None), ("global", "month", None, 500.0),
        ("schedule", "day", None, 1.0)]
    assert s.hermes_budgets[0].exempt_roles == ("admin",)
    assert s.hermes_budgets[2].match.schedule == ("nightly",) and s.hermes_budgets[2].key == \
        "nightly"
    assert s.hermes_model_prices["gpt-4o-mini"].output_per_mtok == 0.6
    assert s.rate_limit == (20, 60) and s.hermes_timezone == "Europe/Berlin"
    monkeypatch.setenv("HERMES_BUDGETS", '[{"scope": "user", "window": "hour", "tokens": 5}]')
    monkeypatch.setenv("HERMES_RATE_LIMIT", "5/10s")
    s = load_settings(GatewaySettings)
    assert [r.window for r in s.hermes_budgets] == ["hour"] and s.rate_limit == (5, 10)


@pytest.mark.parametrize(("var", "value", "expected"), [
    ("HERMES_BUDGETS", '[{"scope": "user", "window": "day"}]', "needs tokens, usd or both"),
    ("HERMES_BUDGETS", '[{"scope": "team", "window": "day", "tokens": 1}]', "'user'"),
    ("HERMES_BUDGETS", '[{"scope": "user", "window": "day", "tokens": 1}, '
                       '{"scope": "user", "window": "day", "usd": 2}]', "count the same thing"),
    ("HERMES_MODEL_PRICES", '{"m": {"input_per_mtok": -1, "output_per_mtok": 1}}',
     "greater than or equal to 0"),
    ("HERMES_RATE_LIMIT", "lots", "20/min"),
])
def test_wrong_budgets_and_rates_are_refused_naming_what_to_change(
        monkeypatch: pytest.MonkeyPatch, var: str, value: str, expected: str) -> None:
    from gateway.settings import GatewaySettings

    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as err:
        load_settings(GatewaySettings)
    assert var in str(err.value) and expected in str(err.value)

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

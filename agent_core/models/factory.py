"""Builds the configured model (with its fallback chain) from settings."""

from __future__ import annotations

from typing import assert_never

from ..errors import ConfigError
from ..settings import ModelSpec, Settings
from ._http import ModelHTTP
from .anthropic import API_VERSION, AnthropicModel
from .base import ModelAdapter
from .fallback import FallbackModel
from .ollama import OllamaModel
from .openai_compat import OpenAICompatModel


def build_adapter(spec: ModelSpec, settings: Settings, *, key_setting: str = "LLM_API_KEY"
                  ) -> ModelAdapter:
    """One adapter for one ModelSpec."""
    key = spec.resolved_key()
    headers: dict[str, str] = {}
    if spec.provider == "anthropic":
        if key is None:
            raise ConfigError(f"the anthropic model {spec.model_name!r} needs an API key: "
                              f"set {key_setting}")
        headers = {"x-api-key": key.get_secret_value(), "anthropic-version": API_VERSION}
    elif key is not None:
        headers = {"Authorization": f"Bearer {key.get_secret_value()}"}
    http = ModelHTTP(provider=spec.provider, base_url=spec.url(), headers=headers,
                     timeout=settings.llm_timeout, max_retries=settings.llm_max_retries,
                     key_setting=key_setting, max_concurrency=settings.llm_max_concurrency)
    native = settings.llm_native_tools
    match spec.provider:
        case "openai":
            return OpenAICompatModel(http, spec.model_name, native_tools=native)
        case "anthropic":
            return AnthropicModel(http, spec.model_name, native_tools=native)
        case "ollama":
            return OllamaModel(http, spec.model_name, native_tools=native)
        case unknown:
            assert_never(unknown)


def build_model(settings: Settings) -> ModelAdapter:
    """The primary model, wrapped in a FallbackModel when LLM_FALLBACKS lists others."""
    primary = build_adapter(settings.primary_model(), settings)
    if not settings.llm_fallbacks:
        return primary
    chain = [primary] + [
        build_adapter(spec, settings, key_setting=spec.api_key_env or f"LLM_FALLBACKS[{i}]")
        for i, spec in enumerate(settings.llm_fallbacks)
    ]
    return FallbackModel(chain)

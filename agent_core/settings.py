"""Settings: one object, read from the environment, ``.env`` and an optional YAML file.

Precedence, highest first: explicit arguments, environment variables, ``.env``, files in the
directories named by ``HERMES_SECRETS_DIR`` (one file per setting, as a mounted Kubernetes
Secret lays them out; ``_secretfiles``), the YAML file named by ``HERMES_CONFIG`` (default
``hermes.yaml`` when it exists), built-in defaults.

The YAML file nests settings by section; ``model:`` maps to the ``LLM_*`` settings::

    model:
      provider: openai
      base_url: https://api.openai.com/v1
      api_key_env: OPENAI_API_KEY      # the key is read from this variable (or a file of
                                       # that name in HERMES_SECRETS_DIR), never the YAML
      model_name: gpt-4o-mini
      temperature: 0.1
      max_tokens: 2048
    agent:
      max_round: 15
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from ._secretfiles import env_or_file, secrets_dirs
from .errors import ConfigError
from .mcp.config import McpServerConfig, check_servers

Provider = Literal["openai", "anthropic", "ollama"]

DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "ollama": "http://127.0.0.1:11434",
}

# YAML section -> settings prefix, where they differ.
_SECTION_PREFIX = {"model": "llm"}
# YAML sections that are one setting whole (a mapping of names), not a prefix.
_WHOLE_SECTIONS = {"mcp_servers": "hermes_mcp_servers", "budgets": "hermes_budgets",
                   "model_prices": "hermes_model_prices"}


class ModelSpec(BaseModel):
    """One model endpoint: the primary model or an entry of the fallback chain."""

    provider: Provider
    model_name: str
    base_url: str | None = None
    api_key: SecretStr | None = None
    api_key_env: str | None = None

    def resolved_key(self) -> SecretStr | None:
        """The API key, read from ``api_key_env`` (the variable, or a file of that name in
        HERMES_SECRETS_DIR) when the key itself is not given."""
        if self.api_key is not None:
            return self.api_key
        value = env_or_file(self.api_key_env) if self.api_key_env else None
        return SecretStr(value) if value else None

    def url(self) -> str:
        """The base URL, defaulting per provider."""
        return (self.base_url or DEFAULT_BASE_URLS[self.provider]).rstrip("/")


class Settings(BaseSettings):
    """The agent runtime's settings: model, agent loop, tools, store, context window,
    logging. Names are the environment variable names. The gateway (``GatewaySettings``)
    and the hub add their own sections in subclasses."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        env_ignore_empty=True,  # `LLM_PROVIDER=` (as in .env.example) means "not set"
        validate_default=True,
        # Built when first loaded: a process loads one class of settings (the runtime's,
        # the hub's or the gateway's); building the two it does not use cost ~9 ms.
        defer_build=True,
    )

    # --- model -------------------------------------------------------------------------
    llm_provider: Provider | None = Field(None, description="openai, anthropic or ollama")
    llm_api_key: SecretStr | None = None
    llm_base_url: str | None = None
    llm_model_name: str | None = None
    llm_temperature: float = Field(0.1, ge=0, le=2)
    llm_max_tokens: int = Field(2048, ge=1)
    llm_timeout: float = Field(60.0, gt=0, description="seconds per model HTTP call")
    llm_max_retries: int = Field(3, ge=0, le=10)
    llm_max_concurrency: int = Field(
        0, ge=0, description="model calls in flight at once per process and model (0: no "
        "limit); the rest wait their turn, which LLM_TIMEOUT does not count")
    llm_stream: bool = True
    llm_native_tools: bool = True
    llm_context_tokens: int = Field(32_000, ge=512)
    llm_fallbacks: list[ModelSpec] = Field(default_factory=list)
    llm_repair_with_model: bool = False
    llm_vision: Literal["auto", "true", "false"] = Field(
        "auto", description="show images people send to the model: auto (until it refuses "
        "one), true, or false (the model is told an image it cannot see is attached)")

    # --- agent loop --------------------------------------------------------------------
    agent_max_round: int = Field(15, ge=1, le=200)
    agent_max_invalid: int = Field(3, ge=1, le=20)
    agent_task_timeout: float = Field(300.0, gt=0)
    agent_replan_every: int = Field(5, ge=0, description="0 disables periodic replanning")
    agent_default_verbose: bool = False
    agent_system_prompt: str | None = None

    # --- tools -------------------------------------------------------------------------
    hermes_tools: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["tools.sales", "tools.recall", "tools.files",
                                 "tools.http_fetch", "tools.schedule"],
        description="modules whose @tool functions are enabled",
    )
    tool_timeout: float = Field(30.0, gt=0)
    tool_breaker_failures: int = Field(5, ge=1)
    tool_breaker_window: float = Field(60.0, gt=0)
    tool_breaker_cooldown: float = Field(30.0, gt=0)
    hermes_writes_need_approval: bool = True
    hermes_approval_skip_roles: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="roles whose writes run without approval")
    hermes_approval_skip_tools: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="write tools that run without approval")
    hermes_mcp_servers: dict[str, McpServerConfig] = Field(
        default_factory=dict,
        description="MCP servers whose tools are added: {name: {command|url, ...}} (docs/mcp.md)")

    # --- storage -----------------------------------------------------------------------
    hermes_data_dir: Path = Field(Path("data"), description="state, sandboxes and reports")
    redis_url: SecretStr | None = Field(
        None, description="redis://, rediss:// (TLS) or unix://; unset: embedded Valkey")
    redis_prefix: str = Field("hermes", pattern=r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,63}$")
    redis_cluster_nodes: Annotated[list[str], NoDecode] = Field(default_factory=list, description=(
        "a Redis Cluster's seed nodes, host:port,...; credentials and TLS from REDIS_URL"))
    redis_sentinels: Annotated[list[str], NoDecode] = Field(default_factory=list, description=(
        "Sentinels (host:port,...) naming the primary; its credentials and TLS from REDIS_URL"))
    redis_sentinel_master: str | None = Field(None, description="the primary's name there")
    redis_sentinel_username: str | None = None  # the sentinels' own credentials, if any
    redis_sentinel_password: SecretStr | None = None
    hermes_store_shards: int = Field(16, ge=1, le=1024, description="fixed: it names keys")
    hermes_store_replica_acks: int | None = Field(None, ge=0, le=16, description=(
        "replicas that must have a write (WAIT); unset: 1 on a cluster or Sentinel, else 0"))
    hermes_store_replica_timeout_ms: int = Field(1000, ge=10, le=60_000)
    conversation_ttl: float = Field(0, ge=0, description="forget idle conversations; 0 = off")
    conversation_max_archive: int = Field(100_000, ge=100)
    task_retention: float = Field(7 * 86400, gt=0, description="seconds finished tasks are kept")

    # --- context window ------------------------------------------------------------------
    max_context_messages: int = Field(20, ge=4)
    context_margin: float = Field(0.05, ge=0, lt=0.5)
    context_warn_ratio: float = Field(0.8, gt=0, le=1)
    max_observation_tokens: int = Field(2000, ge=100)
    context_summary_model: ModelSpec | None = None
    recall_embeddings: ModelSpec | None = Field(
        None, description="an OpenAI-compatible /embeddings model for recall (optional)")

    # --- sandboxes and guarded tools --------------------------------------------------
    hermes_sandbox_max_file_bytes: int = Field(1024 * 1024, ge=1)
    hermes_sandbox_max_bytes: int = Field(10 * 1024 * 1024, ge=1)
    hermes_fetch_allow_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    hermes_fetch_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="hosts (* patterns) a task may still send requests "
                                          "to, unasked, after it has read private data")
    hermes_egress_after_private: Literal["ask", "refuse", "allow"] = Field(
        "ask", description="a request to another host by a task that has read private data "
                           "(recall, files, what people sent): ask a human, refuse, or allow")
    hermes_fetch_max_bytes: int = Field(1_000_000, ge=1)
    hermes_fetch_timeout: float = Field(10.0, gt=0)

    # --- logging -----------------------------------------------------------------------
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_json: bool = False

    @field_validator("llm_base_url")
    @classmethod
    def _strip_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("hermes_tools", "hermes_fetch_allow_hosts", "hermes_approval_skip_roles",
                     "hermes_approval_skip_tools", "hermes_fetch_allow", "redis_cluster_nodes",
                     "redis_sentinels", mode="before")  # "a,b" or '["a", "b"]'
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return comma_list(value)

    @field_validator("hermes_mcp_servers")
    @classmethod
    def _mcp_names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        return check_servers(value)

    @field_validator("llm_vision", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        return str(value).lower() if isinstance(value, bool | str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        dirs = secrets_dirs()
        files = [SecretsSettingsSource(settings_cls, secrets_dir=dirs)] if dirs else []
        return (init_settings, env_settings, dotenv_settings, *files, _YamlSource(settings_cls))

    # --- derived -----------------------------------------------------------------------
    @property
    def store_external(self) -> bool:
        """Whether the store is not the embedded one (REDIS_URL, a cluster, Sentinel)."""
        return bool(self.redis_url or self.redis_cluster_nodes or self.redis_sentinels)
    def tool_extra(self) -> dict[str, Any]:
        """Deployment limits every tool call carries in ctx.extra."""
        return {
            "sandbox": {"max_file_bytes": self.hermes_sandbox_max_file_bytes,
                        "max_total_bytes": self.hermes_sandbox_max_bytes},
            "fetch": {"allow_hosts": self.hermes_fetch_allow_hosts,
                      "max_bytes": self.hermes_fetch_max_bytes,
                      "timeout": self.hermes_fetch_timeout},
        }

    @property
    def model_configured(self) -> bool:
        """Whether a primary model is set up well enough to call."""
        if self.llm_provider is None or not self.llm_model_name:
            return False
        # Self-hosted endpoints (Ollama, vLLM, llama.cpp) usually need no key.
        if self.llm_provider == "ollama" or self.llm_base_url:
            return True
        return self.llm_api_key is not None

    def secret_values(self) -> list[str]:
        """Every secret this configuration holds (for redaction), however nested."""
        found: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, SecretStr):
                found.append(value.get_secret_value())
            elif isinstance(value, BaseModel):
                for name in type(value).model_fields:
                    walk(getattr(value, name))
                if isinstance(value, ModelSpec):
                    key = value.resolved_key()
                    if key is not None:
                        found.append(key.get_secret_value())
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)
            elif isinstance(value, list | tuple):
                for v in value:
                    walk(v)

        walk(self)
        return found

    def primary_model(self) -> ModelSpec:
        """The primary model as a ModelSpec; raises ConfigError when it is not configured."""
        if self.llm_provider is None or not self.llm_model_name:
            raise ConfigError(missing_model_message())
        return ModelSpec(
            provider=self.llm_provider,
            model_name=self.llm_model_name,
            base_url=self.llm_base_url,
            api_key=self.llm_api_key,
        )


def command_name() -> str:
    """The command that runs hermes-gateway the way this process was started: dev.py says
    so in HERMES_INVOKED_AS (``python3 dev.py``), else the installed ``hermes-gateway``."""
    return os.environ.get("HERMES_INVOKED_AS", "").strip() or "hermes-gateway"


def missing_model_message() -> str:
    """What to set when no model is configured; shown in chat and on the console."""
    return (
        "No language model is configured yet. Set LLM_PROVIDER (openai, anthropic or ollama), "
        "LLM_MODEL_NAME and LLM_API_KEY (not needed for ollama), plus LLM_BASE_URL for a "
        "self-hosted or OpenAI-compatible server, in the environment or in .env, then "
        f"restart. To see a recorded run offline, try `{command_name()} demo`."
    )


class _YamlSource(PydanticBaseSettingsSource):
    """Reads the YAML file named by HERMES_CONFIG, flattening ``section: {key}`` to names."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        path = os.environ.get("HERMES_CONFIG", "hermes.yaml")
        self._values = _flatten_yaml(Path(path)) if Path(path).is_file() else {}
        if "HERMES_CONFIG" in os.environ and not Path(path).is_file():
            raise ConfigError(f"HERMES_CONFIG={path!r}: no such file")

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in self._values.items() if k in self.settings_cls.model_fields}


def _flatten_yaml(path: Path) -> dict[str, Any]:
    import yaml  # only when there is a settings file to read

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"cannot parse {str(path)!r} as YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{str(path)!r} must hold a mapping of sections")
    flat: dict[str, Any] = {}
    for section, body in data.items():
        if str(section) in _WHOLE_SECTIONS:
            flat[_WHOLE_SECTIONS[str(section)]] = body
            continue
        if not isinstance(body, dict):
            flat[str(section).lower()] = body
            continue
        prefix = _SECTION_PREFIX.get(str(section), str(section))
        for key, value in body.items():
            if key == "api_key_env":
                found = env_or_file(str(value)) if value else None
                if found:
                    flat[f"{prefix}_api_key"] = found
                continue
            flat[f"{prefix}_{key}".lower()] = value
    return flat


def comma_list(value: Any) -> Any:
    """A list setting given as "a,b" or as the JSON list '["a", "b"]'."""
    if isinstance(value, str):
        if value.strip().startswith("["):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not a JSON list: {exc}") from None
        return [v.strip() for v in value.split(",") if v.strip()]
    return value


S = TypeVar("S", bound="Settings")


def load_settings(cls: type[S] | None = None, **overrides: Any) -> S:
    """Load settings (``cls``: a section-extended subclass, such as the gateway's),
    turning validation errors into one ConfigError naming each variable."""
    settings_cls: Any = cls or Settings
    try:
        return settings_cls(**overrides)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc)) from None
    except SettingsError as exc:
        raise ConfigError(f"invalid settings: {exc}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line per wrong setting: the variable, the value given (unless secret), what's allowed."""
    lines = []
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        name = loc[0].upper() if loc else "?"
        where = name + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:])
        path = " ".join(loc).upper()
        secret = any(word in path for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))
        value = err.get("input")
        # Only short scalars are echoed: a dict or list could carry a secret inside.
        echo = not secret and err["type"] != "missing" and isinstance(
            value, str | int | float | bool) and len(str(value)) <= 200
        given = f"={value!r}" if echo else ""
        lines.append(f"{where}{given}: {err['msg']}")
    return "invalid settings: " + "; ".join(lines)

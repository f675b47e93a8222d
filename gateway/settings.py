"""GatewaySettings: the runtime's settings plus the gateway's own sections.

Server, channels (webhooks, Slack, Telegram), access policy, roles and approvals, budgets
and rate limits, and the scheduler. Environment names are exactly those of the fields
(``SLACK_BOT_TOKEN``, ``HERMES_ALLOWED_USERS``, ...), read from the same sources as the
runtime's (environment, ``.env``, the YAML file).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from agent_core.budget import BudgetRule, ModelPrice
from agent_core.settings import comma_list
from hub import HubSettings

#: HERMES_RATE_LIMIT: messages per unit of time, e.g. "20/min".
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|sec|second|m|min|minute|h|hour|d|day)s?\s*$",
                   re.IGNORECASE)
_RATE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class ApproverRule(BaseModel):
    """Who may decide an approval of one tool."""

    requester: bool = True
    roles: list[str] = Field(default_factory=lambda: ["admin"])
    groups: list[str] = Field(default_factory=list)
    #: False: the person who asked may not approve their own request (they may reject it).
    self_approval: bool = True


#: A principal's name: what the audit log and identities (``api:<name>``) show.
PRINCIPAL = r"^[A-Za-z0-9][A-Za-z0-9._@+=-]{0,39}$"


class ApiKey(BaseModel):
    """One bearer token of the HTTP API and the principal it proves: who is calling, in
    which role, and for which of its own users it may act (``X-Hermes-User``)."""

    model_config = ConfigDict(extra="forbid")

    key: SecretStr
    #: The principal (``api:<user>`` in roles, approvals and the audit log).
    user: str = Field(pattern=PRINCIPAL)
    role: str = "user"
    #: Users (``*`` patterns) this key may act for, e.g. a CRM's own customers; none: only
    #: the principal itself.
    act_as: list[str] = Field(default_factory=list)

    @field_validator("key")
    @classmethod
    def _long_enough(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < 16:
            raise ValueError("an API key must be at least 16 characters long")
        return value

    @classmethod
    def bare(cls, key: str) -> ApiKey:
        """A key given as a plain string: a principal named after its digest, role user."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:8]
        return cls(key=SecretStr(key), user=f"key-{digest}")


class GatewaySettings(HubSettings):
    """Every setting of a gateway process (the hub's included: the gateway's agent hands
    work to hub agents)."""

    hermes_hub: bool = Field(
        False, description="connect the agent hub: the delegate tool and the hub's services")

    # --- gateway service ---------------------------------------------------------------
    hermes_host: str = "127.0.0.1"
    hermes_port: int = Field(8080, ge=1, le=65535)
    hermes_public_url: str | None = Field(
        None, description="how users and platforms reach this gateway, for links/webhooks")
    hermes_api_keys: Annotated[list[ApiKey], NoDecode] = Field(
        default_factory=list, description="bearer tokens of the HTTP API and their "
                                          "principals (JSON list of keys or objects)")
    hermes_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="host names browsers and clients may reach this "
                                          "gateway by, besides loopback and the public URL's")
    hermes_trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="reverse proxies (addresses or networks) whose "
                                          "X-Forwarded-For names the client")
    hermes_workers: int = Field(128, ge=1, le=1000, description="concurrent tasks per process")
    hermes_processes: int = Field(
        1, ge=1, le=64, description="serving processes sharing the port (one per core)")
    hermes_event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto", description="serve's event loop; auto: uvloop when it is installed")
    hermes_lease_seconds: float = Field(30.0, ge=2)
    hermes_header_timeout: float = Field(
        10.0, gt=0, description="seconds a request's line and headers may take (408 after)")
    hermes_max_connections: int = Field(
        1000, ge=1, description="HTTP connections per serving process (then 503)")
    hermes_store_outage_wait: float = Field(
        20.0, gt=0, description="seconds a task that lost the store waits for it before "
                                "its user is told the answer is delayed")
    hermes_shutdown_grace: float = Field(
        20.0, ge=0, description="seconds running tasks get to finish when the gateway stops")
    hermes_busy_mode: Literal["queue", "interrupt", "steer", "collect"] = "queue"
    hermes_collect_window_ms: int = Field(
        1500, ge=0, le=60_000, description="collect mode: messages that arrive within this "
                                           "of each other are one task")
    hermes_webhook_secrets: dict[str, SecretStr] = Field(
        default_factory=dict, description="signed webhook sources: {source: secret}")
    hermes_webhook_callback_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="hosts webhook answers and A2A push "
        "notifications may be POSTed to (inside the network too); [] = any public host")

    # --- access policy -----------------------------------------------------------------
    hermes_allow_dms: bool = True
    hermes_allowed_users: Annotated[list[str], NoDecode] = Field(default_factory=list)
    hermes_allowed_spaces: Annotated[list[str], NoDecode] = Field(default_factory=list)
    hermes_allowed_rooms: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # --- roles, approvals, audit --------------------------------------------------------
    hermes_roles: dict[str, list[str]] = Field(
        default_factory=dict, description="role -> identity patterns (channel:user, * "
                                          "wildcards); API callers' roles come from their key")
    hermes_default_role: str = "user"
    hermes_role_permissions: dict[str, list[str]] = Field(
        default_factory=lambda: {"viewer": ["read"], "user": ["read", "write"],
                                 "admin": ["*"]})
    hermes_groups: dict[str, list[str]] = Field(default_factory=dict)
    hermes_approvers: dict[str, ApproverRule] = Field(
        default_factory=dict, description="tool name (or *) -> who may approve")
    hermes_approval_ttl: float = Field(900.0, gt=0)
    hermes_audit_file: Path | None = None
    hermes_trace_url: str | None = Field(
        None, pattern=r"^https?://[^\s]*\{trace_id\}[^\s]*$",
        description="a tracing UI's link to one trace, with {trace_id} where its id goes "
                    "(the console links each task to its trace)")

    # --- files people send ---------------------------------------------------------------
    hermes_max_file_mb: float = Field(
        20.0, gt=0, le=2048, description="largest file a message may carry (MB); a download "
                                         "stops reading past it")
    hermes_max_files_per_message: int = Field(10, ge=0, le=100)
    hermes_max_files_mb_per_task: float = Field(
        50.0, gt=0, description="all the files of one message together (MB)")
    hermes_max_files_mb_per_day: float = Field(
        200.0, gt=0, description="all the files of one conversation in a day (MB, UTC)")
    hermes_file_convert_seconds: float = Field(
        30.0, gt=0, description="a document's conversion to text is stopped after this")
    hermes_file_convert_mb: int = Field(
        1024, ge=128, description="memory of the converter's child process (MB)")
    hermes_file_context_share: float = Field(
        0.5, gt=0, le=0.9, description="share of the prompt budget the documents of one "
                                       "message may fill; the rest is read with read_file")
    hermes_file_url_internal_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="host or host:port an A2A file URL may point to "
                                          "even on an internal address; [] = public only")
    stt_base_url: str | None = Field(
        None, description="an OpenAI-compatible /audio/transcriptions endpoint for voice "
                          "notes; unset: the model's endpoint, when it is OpenAI-compatible")
    stt_model_name: str = "whisper-1"
    stt_api_key: SecretStr | None = Field(None, description="unset: LLM_API_KEY")

    # --- budgets and rate limits -------------------------------------------------------
    hermes_budgets: list[BudgetRule] = Field(
        default_factory=list, description="model budgets: [{scope, window, tokens?, usd?, "
                                          "match?, exempt_roles?, warn_at?, id?}] (JSON)")
    hermes_model_prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="model -> {input_per_mtok, output_per_mtok, "
                                          "cached_input_per_mtok?} in USD, for usd budgets")
    hermes_rate_limit: str | None = Field(
        None, description='messages a person may send in a group, e.g. "20/min"; unset: '
                          "no limit")

    # --- scheduler -----------------------------------------------------------------------
    hermes_timezone: str = Field(
        "UTC", description="default timezone of schedules; budget days and months")
    hermes_schedule_grace: float = Field(3600.0, ge=0, description="misfire grace seconds")
    hermes_schedules_file: Path | None = None

    # --- Slack -------------------------------------------------------------------------
    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api/"
    slack_progress: Literal["message", "reaction", "off"] = "message"
    slack_streaming: bool = Field(
        True, description="show answers as they are written (chat.startStream in threads, "
                          "a message edited in place elsewhere) and the assistant status")
    slack_feedback: bool = Field(True, description="👍 / 👎 buttons under each answer")
    slack_suggested_prompts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="prompts offered when an assistant thread "
                                          "starts: 'title|message' each (or the message)")
    slack_timeout: float = Field(30.0, ge=1, description="seconds per Web API request")

    # --- Telegram ----------------------------------------------------------------------
    telegram_bot_token: SecretStr | None = None
    telegram_webhook_secret: SecretStr | None = None
    telegram_api_url: str = "https://api.telegram.org"
    telegram_mode: Literal["auto", "webhook", "polling"] = "auto"
    telegram_streaming: bool = Field(
        True, description="show answers as they are written: a draft in private chats, "
                          "one message edited in place in groups")
    telegram_group_streaming: bool = Field(
        True, description="in groups and topics, false: only the final message")
    telegram_timeout: float = Field(5.0, gt=0, description="seconds to read a Bot API "
                                                           "answer")

    @field_validator("hermes_allowed_users", "hermes_allowed_spaces", "hermes_allowed_rooms",
                     "hermes_webhook_callback_hosts", "hermes_allowed_hosts",
                     "hermes_trusted_proxies", "hermes_file_url_internal_hosts",
                     "slack_suggested_prompts", mode="before")
    @classmethod
    def _gateway_comma_list(cls, value: Any) -> Any:
        return comma_list(value)

    @field_validator("hermes_api_keys", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        value = comma_list(value)
        if not isinstance(value, list):
            return value
        return [ApiKey.bare(v) if isinstance(v, str) else
                ApiKey.bare(v.get_secret_value()) if isinstance(v, SecretStr) else v
                for v in value]

    @field_validator("hermes_api_keys")
    @classmethod
    def _distinct(cls, value: list[ApiKey]) -> list[ApiKey]:
        names = [k.user for k in value]
        if len(set(names)) != len(names):
            raise ValueError("two keys name the same user; give each principal one key")
        return value

    @field_validator("hermes_trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an address or a network") from None
        return value

    @field_validator("hermes_timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("must be an IANA timezone such as Europe/Berlin") from None
        return value

    @field_validator("hermes_budgets")
    @classmethod
    def _distinct_budgets(cls, value: list[BudgetRule]) -> list[BudgetRule]:
        keys = [rule.key for rule in value]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ValueError(f"two budgets count the same thing ({', '.join(twice)}): give "
                             "each an id, or put tokens and usd in one entry")
        return value

    @field_validator("hermes_rate_limit")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None and value.strip() and _RATE.match(value) is None:
            raise ValueError('use messages per unit of time, e.g. "20/min", "100/hour", '
                             '"5/10s"')
        return value.strip() or None if value is not None else None

    @field_validator("slack_api_url")
    @classmethod
    def _slash(cls, value: str) -> str:
        return value if value.endswith("/") else value + "/"

    def suggested_prompts(self) -> list[dict[str, str]]:
        """SLACK_SUGGESTED_PROMPTS as Slack takes them: ``{title, message}`` each."""
        prompts = []
        for entry in self.slack_suggested_prompts:
            title, _, message = entry.partition("|")
            prompts.append({"title": title.strip()[:75],
                            "message": (message or title).strip()})
        return prompts

    @property
    def stt_endpoint(self) -> str | None:
        """Where voice notes are transcribed: STT_BASE_URL, else the model's endpoint when
        it speaks the OpenAI API; None: nowhere."""
        if self.stt_base_url:
            return self.stt_base_url.rstrip("/")
        if self.llm_provider == "openai":
            return (self.llm_base_url or "https://api.openai.com/v1").rstrip("/")
        return None

    @property
    def rate_limit(self) -> tuple[int, int] | None:
        """HERMES_RATE_LIMIT as (messages, seconds), or None."""
        match = _RATE.match(self.hermes_rate_limit or "")
        if match is None:
            return None
        count, every, unit = match.groups()
        return int(count), int(every or 1) * _RATE_UNITS[unit[0].lower()]

    @property
    def slack_enabled(self) -> bool:
        """Slack needs a bot token plus a signing secret (HTTP) or an app token (sockets)."""
        return self.slack_bot_token is not None and (
            self.slack_signing_secret is not None or self.slack_app_token is not None)

    @property
    def telegram_enabled(self) -> bool:
        """Telegram needs a bot token."""
        return self.telegram_bot_token is not None

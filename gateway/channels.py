"""The configured channels: the API and the web chat always; webhooks, Slack and Telegram
when their secrets are set (a platform that is not configured is not even imported).

Telegram admits one receiver per bot token: one replica at a time (the leader, elected
through the store) sets the webhook or polls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from adapters.base import Channel, Ingest, Interact
from adapters.pacing import Pacer
from adapters.webchat import PullChannel
from agent_core import ConfigError

from .leader import Leadership
from .settings import GatewaySettings

if TYPE_CHECKING:
    from adapters.slack import SlackChannel
    from adapters.telegram import TelegramChannel
    from adapters.webhook import WebhookChannel


@dataclass
class Channels:
    """Every enabled channel by name, and the platform ones with their endpoints."""

    by_name: dict[str, Channel] = field(default_factory=dict)
    webhook: WebhookChannel | None = None
    slack: SlackChannel | None = None
    telegram: TelegramChannel | None = None

    def endpoint(self, name: str) -> WebhookChannel | SlackChannel | TelegramChannel | None:
        """The channel serving ``POST /<name>/...``, if enabled."""
        return {"slack": self.slack, "telegram": self.telegram,
                "webhook": self.webhook}.get(name)


def build_channels(settings: GatewaySettings, *, ingest: Ingest, interact: Interact,
                   into: dict[str, Channel]) -> Channels:
    """The channels the settings enable (not started yet), also entered by name ``into``
    the mapping the deliverer and the approvals were given."""
    into.update(api=PullChannel("api"), webchat=PullChannel("webchat"))
    channels = Channels(into)
    pacer = Pacer()
    if settings.hermes_webhook_secrets:
        from adapters.webhook import WebhookChannel

        channels.webhook = WebhookChannel(
            {k: v.get_secret_value() for k, v in settings.hermes_webhook_secrets.items()},
            ingest=ingest, callback_hosts=settings.hermes_webhook_callback_hosts)
        channels.by_name["webhook"] = channels.webhook
    if settings.slack_enabled:
        from adapters.slack import SlackChannel

        assert settings.slack_bot_token is not None
        channels.slack = SlackChannel(
            bot_token=settings.slack_bot_token.get_secret_value(),
            signing_secret=_secret(settings.slack_signing_secret),
            app_token=_secret(settings.slack_app_token), api_url=settings.slack_api_url,
            ingest=ingest, interact=interact, progress=settings.slack_progress, pacer=pacer,
            streaming=settings.slack_streaming, feedback=settings.slack_feedback,
            suggested_prompts=settings.suggested_prompts(), timeout=settings.slack_timeout)
        channels.by_name["slack"] = channels.slack
    if settings.telegram_enabled:
        from adapters.telegram import TelegramChannel

        assert settings.telegram_bot_token is not None
        channels.telegram = TelegramChannel(
            token=settings.telegram_bot_token.get_secret_value(),
            webhook_secret=_secret(settings.telegram_webhook_secret),
            api_url=settings.telegram_api_url, ingest=ingest, interact=interact, pacer=pacer,
            streaming=settings.telegram_streaming,
            group_streaming=settings.telegram_group_streaming,
            timeout=settings.telegram_timeout)
        channels.by_name["telegram"] = channels.telegram
    return channels


def telegram_leadership(settings: GatewaySettings, telegram: TelegramChannel, redis: Redis,
                        key: str) -> Leadership:
    """The campaign for receiving Telegram's updates (set the webhook, or poll)."""
    mode = settings.telegram_mode
    if mode == "auto":
        mode = "webhook" if settings.telegram_webhook_secret and settings.hermes_public_url \
            else "polling"
    if mode == "webhook" and not settings.hermes_public_url:
        raise ConfigError("TELEGRAM_MODE=webhook needs HERMES_PUBLIC_URL (where Telegram "
                          "can reach /telegram/webhook) and TELEGRAM_WEBHOOK_SECRET")
    url = f"{(settings.hermes_public_url or '').rstrip('/')}/telegram/webhook"

    async def elected() -> None:
        if mode == "webhook":
            await telegram.set_webhook(url)
        else:
            await telegram.start_polling()

    return Leadership(redis, key, on_elected=elected, on_lost=telegram.stop_polling)


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None

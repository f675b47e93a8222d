"""Channels: the contract between the chat platforms and the gateway, and one adapter per
platform (Slack, Telegram, signed webhooks, the web chat and the API). A platform's adapter
is imported when first used, so a deployment without it never loads its SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core import lazy_exports

from .base import (
    Attachment,
    Channel,
    ChannelName,
    FileToShow,
    InboundMessage,
    Ingest,
    Interact,
    Interaction,
    InteractionReply,
    OutboundMessage,
    Routed,
)
from .errors import DeliveryError, DownloadError, GatewayStopping
from .live import LiveChannel, LiveMode, Tag

if TYPE_CHECKING:
    from .slack import SlackChannel
    from .telegram import TelegramChannel
    from .webchat import PullChannel
    from .webhook import WebhookChannel

__all__ = [
    "Attachment",
    "Channel",
    "ChannelName",
    "DeliveryError",
    "DownloadError",
    "FileToShow",
    "GatewayStopping",
    "InboundMessage",
    "Ingest",
    "Interact",
    "Interaction",
    "InteractionReply",
    "LiveChannel",
    "LiveMode",
    "OutboundMessage",
    "PullChannel",
    "Routed",
    "SlackChannel",
    "Tag",
    "TelegramChannel",
    "WebhookChannel",
]

__getattr__ = lazy_exports(__name__, {
    "SlackChannel": "slack", "TelegramChannel": "telegram", "PullChannel": "webchat",
    "WebhookChannel": "webhook"})

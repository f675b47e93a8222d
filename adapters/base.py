"""InboundMessage, OutboundMessage and the Channel interface every adapter implements.

An adapter is a converter plus a thin handler: it turns platform events into
``InboundMessage`` and renders ``OutboundMessage`` back. Routing, dedupe, access policy and
locking happen once, in the gateway, for every channel.
"""

from __future__ import annotations

import abc
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

ChannelName = Literal["slack", "telegram", "webhook", "webchat", "api", "schedule"]
OutboundKind = Literal["answer", "question", "approval", "notice", "error"]


class InboundMessage(BaseModel):
    """A message from any channel, normalised."""

    channel: ChannelName
    conversation_id: str
    user_id: str
    user_name: str = ""
    text: str
    is_direct: bool = False
    mentions_bot: bool = False
    #: The platform's id of this delivery, for dedupe (Slack event, Telegram update, ...).
    platform_message_id: str
    #: Where replies go, in the channel's own terms (channel + thread, chat + topic, URL).
    reply_target: dict[str, Any] = Field(default_factory=dict)
    received_at: float = Field(default_factory=time.time)
    #: Group or workspace the message came from, for allowlists (team id, chat id).
    space_id: str = ""
    #: Channel within the space (Slack channel id), for allowlists.
    room_id: str = ""
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)

    def reply(self, text: str, kind: OutboundKind = "answer", **fields: Any
              ) -> OutboundMessage:
        """A message back to where this one came from (same channel, conversation and
        thread)."""
        return OutboundMessage(channel=self.channel, conversation_id=self.conversation_id,
                               reply_target=self.reply_target, text=text, kind=kind,
                               **fields)


class OutboundMessage(BaseModel):
    """Something to post back into a conversation."""

    channel: ChannelName
    conversation_id: str
    reply_target: dict[str, Any] = Field(default_factory=dict)
    text: str
    kind: OutboundKind = "answer"
    task_id: str = ""
    #: Buttons to offer (ask_user choices).
    choices: list[str] = Field(default_factory=list)
    #: For kind == "approval": the approval id and what is asked.
    approval: dict[str, Any] | None = None


class DeliveryError(Exception):
    """Sending failed. ``retryable`` outages are retried with backoff; others are not."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None
                 ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


#: What an adapter calls with each message it accepted from its platform.
Ingest = Callable[[InboundMessage], Awaitable[None]]


class Channel(abc.ABC):
    """A chat platform, web surface or API: receives messages and delivers replies."""

    name: ChannelName

    @abc.abstractmethod
    async def send(self, message: OutboundMessage) -> dict[str, Any] | None:
        """Deliver a reply; returns where it was posted (to update it later), if anywhere.

        Raises DeliveryError on failure.
        """

    async def direct_target(self, user_id: str) -> dict[str, Any]:
        """Where to reach one user privately (a DM), as a reply target."""
        raise NotImplementedError

    async def working(self, target: dict[str, Any], task_id: str) -> None:
        """Show that a task started (a reaction, a "working" message, typing)."""
        raise NotImplementedError

    async def progress(self, target: dict[str, Any], task_id: str, line: str) -> None:
        """Update the progress display with one line about the latest step."""
        raise NotImplementedError

    async def done(self, target: dict[str, Any], task_id: str) -> None:
        """The task ended: clear progress displays."""
        raise NotImplementedError

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Connect (webhook registration, polling, sockets)."""

    async def stop(self) -> None:  # noqa: B027 - optional hook
        """Disconnect."""

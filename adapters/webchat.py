"""The web chat page and the HTTP API as channels: their clients read answers from the
task API and its event stream, so sending is recording, not pushing."""

from __future__ import annotations

from typing import Any

from .base import Channel, ChannelName, OutboundMessage


class PullChannel(Channel):
    """A channel whose clients pull: ``api`` (POST /agent/run) and ``webchat`` (the page)."""

    def __init__(self, name: ChannelName) -> None:
        self.name = name
        self.sent: int = 0

    async def send(self, message: OutboundMessage) -> dict[str, Any] | None:
        # The task state and its events already hold the answer for the client to read.
        self.sent += 1
        return None

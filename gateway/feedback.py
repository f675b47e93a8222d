"""Feedback on answers: a 👍 or 👎 pressed under one (Slack's feedback buttons) is written to
the audit log and counted in /metrics by channel and model; nothing else happens."""

from __future__ import annotations

import logging
from collections.abc import Callable

from adapters.base import Interaction, InteractionReply

from .audit import AuditLog
from .live_record import ReplyBook

log = logging.getLogger(__name__)

THANKS = "Thanks for the feedback."


class Feedback:
    """Records presses of the feedback buttons (``Interaction.kind == "feedback"``)."""

    def __init__(self, *, book: ReplyBook, audit: AuditLog,
                 counted: Callable[[str, str, bool], None] | None = None) -> None:
        self.book = book
        self.audit = audit
        #: Told the channel, the answer's model and whether it was 👍.
        self.counted = counted

    async def __call__(self, press: Interaction) -> InteractionReply:
        """Record one press; the buttons stay (a person may change their mind)."""
        record = await self.book.load(press.target) if press.target else None
        model = record.model if record is not None else ""
        await self.audit.record({
            "event": "feedback", "rating": "good" if press.approved else "bad",
            "channel": press.channel, "user": f"{press.channel}:{press.user_id}",
            "delivery": press.target, "model": model,
            "task_id": record.task_id if record is not None else "",
            "conversation_id": record.conversation_id if record is not None else ""})
        if self.counted is not None:
            self.counted(press.channel, model, press.approved)
        return InteractionReply(THANKS)

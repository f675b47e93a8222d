"""Button presses, decided once for every channel: approval decisions, ask_user choices,
feedback on answers (``feedback.py``) and "run the edited message" (``edits.py``).

The channels turn a press into an ``Interaction`` and render the ``InteractionReply``.
Approval buttons carry only the approval id; who pressed, and in which conversation, is
checked by ApprovalService. A choice button carries the asking task's id and the answer's
index, which the presser's client can forge (Telegram's callback_data): a choice counts
only when pressed in the conversation that asked, by the person it was asked of (or an
administrator). The chosen answer is then routed into that conversation like a message the
user typed (at most once per question), which resumes the task waiting for it.
"""

from __future__ import annotations

import logging
from typing import assert_never

from adapters.base import InboundMessage, Interaction, InteractionReply
from agent_core.store import ConversationStore
from agent_core.tools.context import ALL_PERMISSIONS

from .access import Roles
from .approvals import ApprovalService
from .edits import Edits
from .feedback import Feedback
from .router import Router

log = logging.getLogger(__name__)

NOT_OURS = "This button is not known here."
NOT_OPEN = "That question is no longer open."
GONE = "That message is gone."
ANSWERED = "That question was already answered."
ELSEWHERE = "That question was asked in another conversation; nothing was sent."
NOT_YOURS = ("That question was asked of someone else: only they (or an administrator) can "
             "answer it. Nothing was sent.")


class Interactions:
    """Decides on the presses of the buttons the channels render (an ``Interact``)."""

    def __init__(self, *, approvals: ApprovalService, router: Router,
                 store: ConversationStore, roles: Roles, feedback: Feedback | None = None,
                 edits: Edits | None = None) -> None:
        self.approvals = approvals
        self.router = router
        self.store = store
        self.roles = roles
        self.feedback = feedback
        self.edits = edits

    async def __call__(self, press: Interaction) -> InteractionReply:
        """One press (already acknowledged to the platform by its channel)."""
        match press.kind:
            case "approval":
                decision = await self.approvals.decide(
                    press.target, approved=press.approved,
                    actor=f"{press.channel}:{press.user_id}", actor_name=press.user_name,
                    place=(press.channel, press.conversation_id))
                return InteractionReply(decision.message,
                                        refused=decision.outcome != "decided")
            case "choice":
                return await self._choose(press)
            case "feedback" if self.feedback is not None:
                return await self.feedback(press)
            case "rerun" if self.edits is not None:
                return await self.edits.rerun(press)
            case "feedback" | "rerun" | "unknown":
                return InteractionReply(NOT_OURS, refused=True)
            case unknown:
                assert_never(unknown)

    async def _choose(self, press: Interaction) -> InteractionReply:
        """Route the chosen answer into the asking task's conversation."""
        state = await self.store.load_task(press.target) if press.target else None
        if state is None:
            return InteractionReply(NOT_OPEN, refused=True)
        if press.conversation_id != state.conversation_id:  # ids name their channel
            return InteractionReply(ELSEWHERE, refused=True)
        presser = f"{press.channel}:{press.user_id}"
        if presser != state.user_id and not self.roles.allows(presser, ALL_PERMISSIONS):
            return InteractionReply(NOT_YOURS, refused=True)
        if state.status != "asked_user":
            return InteractionReply(ANSWERED, refused=True)
        choices = state.question.choices if state.question else []
        if press.choice is None or not 0 <= press.choice < len(choices):
            return InteractionReply(NOT_OPEN, refused=True)
        if press.reply_target is None:
            return InteractionReply(GONE, refused=True)
        choice = choices[press.choice]
        routed = await self.router.ingest(InboundMessage(
            channel=press.channel, conversation_id=state.conversation_id,
            user_id=press.user_id, user_name=press.user_name, text=choice,
            is_direct=press.is_direct, mentions_bot=True,
            platform_message_id=f"choice:{state.task_id}", reply_target=press.reply_target,
            space_id=press.space_id, room_id=press.room_id))
        if routed.status not in ("queued", "steered"):
            return InteractionReply(ANSWERED, refused=True)
        return InteractionReply("Sent.", chosen=choice)

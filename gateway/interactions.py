"""Button presses from Slack and Telegram: approval decisions and ask_user choices.

Approval buttons carry only the approval id; who pressed is checked by ApprovalService.
A choice button carries the task's id (and, on Telegram, the choice's index): the chosen
answer is routed into the conversation like a message the user typed, which resumes the
task waiting for it.
"""

from __future__ import annotations

import logging
from typing import Any

from telegram import Update

from adapters.approvals import (
    APPROVAL_DATA,
    APPROVE,
    CHOICE,
    CHOICE_DATA,
    REJECT,
    parse_callback_data,
)
from adapters.base import InboundMessage
from adapters.slack import SlackChannel
from adapters.telegram import TelegramChannel
from agent_core import TaskState
from agent_core.store.base import ConversationStore

from .approvals import ApprovalService
from .router import Router

log = logging.getLogger(__name__)


class Interactions:
    """Handles presses of the buttons the channels render."""

    def __init__(self, *, approvals: ApprovalService, router: Router,
                 store: ConversationStore) -> None:
        self.approvals = approvals
        self.router = router
        self.store = store

    # --- Slack -----------------------------------------------------------------------------
    def attach_slack(self, slack: SlackChannel) -> None:
        """Route Slack's block_actions here."""

        async def on_action(body: dict[str, Any], action: dict[str, Any]) -> None:
            await self.slack_action(slack, body, action)

        slack.on_action = on_action

    async def slack_action(self, slack: SlackChannel, body: dict[str, Any],
                           action: dict[str, Any]) -> None:
        """One button press in Slack (already acknowledged by the channel)."""
        user = body.get("user") or {}
        user_id = str(user.get("id", ""))
        channel_id = str((body.get("channel") or {}).get("id", ""))
        message = body.get("message") or {}
        thread = message.get("thread_ts") or message.get("ts")
        action_id = str(action.get("action_id", ""))
        if action_id in (APPROVE, REJECT):
            decision = await self.approvals.decide(
                str(action.get("value", "")), approved=action_id == APPROVE,
                actor=f"slack:{user_id}", actor_name=f"<@{user_id}>")
            if decision.outcome != "decided":
                await slack.post_ephemeral(channel_id, user_id, decision.message,
                                           thread_ts=message.get("thread_ts"))
            return
        if action_id.startswith(CHOICE):
            task_id = str(action.get("block_id", "")).partition(":")[2]
            choice = str(action.get("value", ""))
            state = await self.store.load_task(task_id)
            team = str((body.get("team") or {}).get("id", "T"))
            sent = await self._choose(state, choice, InboundMessage(
                channel="slack", conversation_id="-", user_id=user_id, text=choice,
                mentions_bot=True, platform_message_id=str(body.get("trigger_id", "")),
                reply_target={"channel": channel_id, "thread_ts": thread},
                space_id=team, room_id=channel_id), dedupe=f"slack:choice:{task_id}")
            if sent and message.get("ts"):
                await slack.replace_prompt({"channel": channel_id, "ts": message["ts"]},
                                           f"{message.get('text', '')}\n→ {choice} "
                                           f"(<@{user_id}>)")
            elif not sent:
                await slack.post_ephemeral(channel_id, user_id,
                                           "That question was already answered.")

    # --- Telegram --------------------------------------------------------------------------
    def attach_telegram(self, telegram: TelegramChannel) -> None:
        """Route Telegram's callback queries here."""

        async def on_callback(update: Update) -> None:
            await self.telegram_callback(telegram, update)

        telegram.on_callback = on_callback

    async def telegram_callback(self, telegram: TelegramChannel, update: Update) -> None:
        """One inline-keyboard press in Telegram; the query is always answered."""
        query = update.callback_query
        if query is None:
            return
        user = query.from_user
        data = query.data or ""
        actor_name = f"@{user.username}" if user.username else user.full_name
        kind, target, value = parse_callback_data(data)
        if kind == APPROVAL_DATA:
            approval_id, verdict = target, value
            decision = await self.approvals.decide(
                approval_id, approved=verdict == "y", actor=f"telegram:{user.id}",
                actor_name=actor_name)
            await query.answer(decision.message, show_alert=decision.outcome != "decided")
            return
        if kind == CHOICE_DATA:
            task_id, index = target, value
            state = await self.store.load_task(task_id)
            choices = state.question.choices if state and state.question else []
            if not index.isdigit() or int(index) >= len(choices):
                await query.answer("That question is no longer open.", show_alert=True)
                return
            choice = choices[int(index)]
            message = query.message
            chat = message.chat if message is not None else None
            if chat is None or message is None:
                await query.answer("That message is gone.", show_alert=True)
                return
            topic = getattr(message, "message_thread_id", None)
            sent = await self._choose(state, choice, InboundMessage(
                channel="telegram", conversation_id="-", user_id=str(user.id),
                user_name=actor_name, text=choice, is_direct=chat.type == "private",
                mentions_bot=True, platform_message_id=str(query.id),
                reply_target={"chat_id": chat.id, "message_thread_id": topic,
                              "private": chat.type == "private"},
                space_id=str(chat.id), room_id=str(topic or chat.id)),
                dedupe=f"telegram:choice:{task_id}")
            await query.answer("Sent." if sent else "Already answered.")
            if sent:
                await telegram.replace_prompt(
                    {"chat_id": chat.id, "message_id": message.message_id},
                    f"{getattr(message, 'text', '') or ''}\n→ {choice} ({actor_name})")
            return
        await query.answer("This button is not known here.", show_alert=True)

    async def _choose(self, state: TaskState | None, choice: str, template: InboundMessage,
                      dedupe: str) -> bool:
        """Route a chosen answer into the task's conversation; False if already answered."""
        if state is None or state.status != "asked_user":
            return False
        msg = template.model_copy(update={"conversation_id": state.conversation_id})
        routed = await self.router.ingest(msg, dedupe_key=dedupe)
        return routed.status in ("queued", "steered")

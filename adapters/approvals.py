"""Buttons for approvals and ask_user choices, in each platform's format.

Every button carries only an id: Slack in the action value, Telegram in callback_data
(at most 64 bytes). The server looks everything else up and checks who may press it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .base import OutboundMessage

if TYPE_CHECKING:  # imported by the Telegram functions: a Slack-only gateway does not load
    from telegram import InlineKeyboardMarkup  # python-telegram-bot (14 MB)

APPROVE, REJECT, CHOICE = "hermes_approve", "hermes_reject", "hermes_choice"
#: The button under "edits do not run a message again": run the edited text as a new one.
RERUN = "hermes_rerun"


def summary(message: OutboundMessage) -> str:
    """What the approval asks, as the user will see it."""
    approval = message.approval or {}
    args = json.dumps(approval.get("arguments", {}), ensure_ascii=False, indent=1)
    if len(args) > 1500:
        args = args[:1500] + "…"
    return (f"*Approval needed* to run `{approval.get('tool_name')}`"
            f" (requested by {approval.get('requester', 'the agent')}):\n```{args}```\n"
            f"{approval.get('reason', '')}").strip()


def slack_blocks(message: OutboundMessage) -> list[dict[str, Any]]:
    """Block Kit: the action summary and Approve / Reject buttons."""
    approval_id = str((message.approval or {}).get("id", ""))
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": summary(message)[:2900]}},
        {"type": "actions", "block_id": f"approval:{approval_id}", "elements": [
            {"type": "button", "action_id": APPROVE, "style": "primary", "value": approval_id,
             "text": {"type": "plain_text", "text": "Approve"}},
            {"type": "button", "action_id": REJECT, "style": "danger", "value": approval_id,
             "text": {"type": "plain_text", "text": "Reject"}},
        ]},
    ]


def slack_choice_blocks(message: OutboundMessage) -> list[dict[str, Any]]:
    """Block Kit: the question and one button per offered answer."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": message.text[:2900]}},
        {"type": "actions", "block_id": f"choices:{message.task_id}", "elements": [
            {"type": "button", "action_id": f"{CHOICE}_{i}", "value": choice[:2000],
             "text": {"type": "plain_text", "text": choice[:75]}}
            for i, choice in enumerate(message.choices[:10])]},
    ]


#: Telegram callback_data kinds: an approval decision, a chosen answer, a rerun of an edit.
APPROVAL_DATA, CHOICE_DATA, RERUN_DATA = "a", "c", "r"


def callback_data(kind: str, target: str, value: str) -> str:
    """``<kind>:<approval or task id>:<y|n or index>``, within Telegram's 64 bytes."""
    return f"{kind}:{target}:{value}"


def parse_callback_data(data: str) -> tuple[str, str, str]:
    """(kind, target, value) of a ``callback_data``; empty parts when it is not ours."""
    kind, _, rest = data.partition(":")
    target, _, value = rest.partition(":")
    return kind, target, value


def telegram_keyboard(message: OutboundMessage) -> InlineKeyboardMarkup:
    """Approve / Reject, with callback_data ``a:<id>:y`` / ``a:<id>:n``."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    approval_id = str((message.approval or {}).get("id", ""))
    return InlineKeyboardMarkup([[
        InlineKeyboardButton("✅ Approve", callback_data=callback_data(APPROVAL_DATA,
                                                                      approval_id, "y")),
        InlineKeyboardButton("❌ Reject", callback_data=callback_data(APPROVAL_DATA,
                                                                     approval_id, "n")),
    ]])


def telegram_choices(message: OutboundMessage) -> InlineKeyboardMarkup:
    """One button per offered answer, with callback_data ``c:<task id>:<index>``."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    return InlineKeyboardMarkup([
        [InlineKeyboardButton(choice[:60], callback_data=callback_data(
            CHOICE_DATA, message.task_id, str(i)))]
        for i, choice in enumerate(message.choices[:10])])


def slack_rerun_blocks(text: str, edit_id: str) -> list[dict[str, Any]]:
    """Block Kit: a notice and the button that runs an edited message as a new one."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:2900]}},
        {"type": "actions", "block_id": f"rerun:{edit_id}", "elements": [
            {"type": "button", "action_id": RERUN, "value": edit_id,
             "text": {"type": "plain_text", "text": "Run the edited message"}}]},
    ]


def telegram_rerun(edit_id: str) -> InlineKeyboardMarkup:
    """The button that runs an edited message as a new one (``r:<edit id>:``)."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    return InlineKeyboardMarkup([[InlineKeyboardButton(
        "▶️ Run the edited message", callback_data=callback_data(RERUN_DATA, edit_id, ""))]])

"""Approval prompts and ask_user choices, in each platform's format.

An approval prompt shows what will run: the tool, who asked, why, and the arguments the
tool will run with (``arguments.show_arguments``: complete, or a summary that shows every
key and links to the full arguments), escaped for the platform's markup so that nothing in
a request becomes a mention, a link or the end of the code block.

Every button carries only an id: Slack in the action value, Telegram in callback_data
(at most 64 bytes). The server looks everything else up and checks who may press it,
and where.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Any

from .arguments import show_arguments
from .base import OutboundMessage
from .markup import slack_escape, to_mrkdwn

if TYPE_CHECKING:  # imported by the Telegram functions: a Slack-only gateway does not load
    from telegram import InlineKeyboardMarkup  # python-telegram-bot (14 MB)

APPROVE, REJECT, CHOICE = "hermes_approve", "hermes_reject", "hermes_choice"
#: The button under "edits do not run a message again": run the edited text as a new one.
RERUN = "hermes_rerun"


def slack_blocks(message: OutboundMessage) -> list[dict[str, Any]]:
    """Block Kit: what is asked (the tool, who asked, why, the arguments it will run with)
    and Approve / Reject buttons, or, once decided, the decision in their place. Every
    piece from a request is escaped and the sections are ``verbatim`` (Slack parses no
    mention, channel or link in them); the arguments are a code block nothing can close."""
    view = message.approval or {}
    approval_id = str(view.get("id", ""))
    shown = show_arguments(view.get("arguments") or {}, budget=_SLACK_SECTION - 10,
                           measure=lambda text: utf16_len(slack_escape(text)))
    blocks: list[dict[str, Any]] = [
        _slack_section(_slack_header(view)),
        _slack_section(f"```\n{slack_escape(shown.text)}\n```")]
    if not shown.complete:
        blocks.append(_slack_section(_slack_full_link(view)))
    decision = view.get("decision")
    if decision:
        blocks.append(_slack_section(_slack_decision(decision)))
        return blocks
    blocks.append({"type": "actions", "block_id": f"approval:{approval_id}", "elements": [
        {"type": "button", "action_id": APPROVE, "style": "primary", "value": approval_id,
         "text": {"type": "plain_text", "text": "Approve"}},
        {"type": "button", "action_id": REJECT, "style": "danger", "value": approval_id,
         "text": {"type": "plain_text", "text": "Reject"}},
    ]})
    return blocks


_SLACK_SECTION = 3000  # characters of a section's text
_SLACK_USER = re.compile(r"^slack:([UW][A-Z0-9]{1,20})$")


def _slack_section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:_SLACK_SECTION],
                                        "verbatim": True}}


def _slack_header(view: dict[str, Any]) -> str:
    tool = slack_escape(_plain(view.get("tool_name"), 100).replace("`", "'"))
    requester = slack_escape(_plain(view.get("requester") or "the agent", 200))
    reason = slack_escape(_plain(view.get("reason"), 500))
    return f"*Approval needed* to run `{tool}` (requested by {requester}): {reason}"


def _slack_full_link(view: dict[str, Any]) -> str:
    path = f"GET /agent/approvals/{view.get('id', '')}"
    url = str(view.get("arguments_url") or "")
    where = f"<{slack_escape(url).replace('|', '%7C')}|{path}>" if url else \
        f"`{path}` on the gateway's API"
    return f"Too long to show whole: long values are cut (every key is shown). The full " \
           f"arguments: {where}"


def slack_decision_text(message: OutboundMessage) -> str:
    """The decided prompt's notification text (mrkdwn, escaped like its blocks)."""
    view = message.approval or {}
    tool = slack_escape(_plain(view.get("tool_name"), 100).replace("`", "'"))
    return f"{_slack_decision(view.get('decision') or {})} `{tool}`"


def _slack_decision(decision: dict[str, Any]) -> str:
    by = _SLACK_USER.match(str(decision.get("by", "")))
    who = f"<@{by.group(1)}>" if by else slack_escape(_plain(decision.get("by_name"), 200))
    return decision_line(decision, who)


def decision_line(decision: dict[str, Any], who: str) -> str:
    """"✅ Approved by <who>" (with a note when the approver edited the arguments)."""
    status = str(decision.get("status", ""))
    if status == "expired":
        return "⌛ Expired without a decision."
    mark = "✅ Approved" if status == "approved" else "❌ Rejected"
    edited = " with edited arguments (shown above; they are what runs)" \
        if decision.get("edited") else ""
    return f"{mark} by {who}{edited}."


def _plain(value: Any, limit: int) -> str:
    """A short piece of text from a request, on one line."""
    text = " ".join(str(value or "").split())
    return text if len(text) <= limit else text[:limit] + "…"


def slack_choice_blocks(message: OutboundMessage) -> list[dict[str, Any]]:
    """Block Kit: the question (as an answer is rendered: escaped) and one button per
    offered answer."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": to_mrkdwn(message.text)[:2900]}},
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


# --- Telegram's prompt (HTML parse mode) -----------------------------------------------------

_TELEGRAM_TEXT = 4000  # visible characters, under Telegram's 4096


def telegram_prompt(message: OutboundMessage) -> tuple[str, str]:
    """The approval prompt as Telegram HTML and as the same text plain (sent without a parse
    mode if Telegram refuses the HTML): the tool, who asked, why, and the arguments it will
    run with in a ``<pre>`` block (escaped), complete or summarised with the link to them
    all; once decided, the decision below."""
    view = message.approval or {}
    tool = _plain(view.get("tool_name"), 100)
    requester = _plain(view.get("requester") or "the agent", 200)
    reason = _plain(view.get("reason"), 500)
    head_plain = f"Approval needed to run {tool} (requested by {requester}): {reason}"
    head = (f"<b>Approval needed</b> to run <code>{_h(tool)}</code> (requested by "
            f"{_h(requester)}): {_h(reason)}")
    tail_plain, tail = "", ""
    decision = view.get("decision")
    if decision:
        line = decision_line(decision, _plain(decision.get("by_name"), 200))
        tail_plain, tail = f"\n{line}", f"\n{_h(line)}"
    path = f"GET /agent/approvals/{view.get('id', '')}"
    url = str(view.get("arguments_url") or "")
    link_plain = ("\nToo long to show whole: long values are cut (every key is shown). The "
                  f"full arguments: {url or path + ' on the gateway API'}")
    link = ("\nToo long to show whole: long values are cut (every key is shown). The full "
            "arguments: " + (f'<a href="{html.escape(url)}">{_h(path)}</a>' if url
                             else f"<code>{_h(path)}</code> on the gateway API"))
    budget = _TELEGRAM_TEXT - utf16_len(head_plain + tail_plain + link_plain) - 2
    shown = show_arguments(view.get("arguments") or {}, budget=budget, measure=utf16_len)
    more_plain, more = ("", "") if shown.complete else (link_plain, link)
    return (f"{head}\n<pre>{_h(shown.text)}</pre>{more}{tail}",
            f"{head_plain}\n{shown.text}{more_plain}{tail_plain}")


def _h(text: str) -> str:
    return html.escape(text, quote=False)


def utf16_len(text: str) -> int:
    """Length as the platforms count it (UTF-16 code units: an emoji is two)."""
    return len(text.encode("utf-16-le")) // 2

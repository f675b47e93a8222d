"""Telegram updates in the channel contract's terms: a message becomes an InboundMessage
(conversation per chat, or per forum topic; addressed by a mention, a command or a reply),
an edited message an InboundMessage marked as an edit of the one it replaces, a button press
an Interaction."""

from __future__ import annotations

from typing import Any

from telegram import Bot, Message, Update

from .approvals import APPROVAL_DATA, CHOICE_DATA, RERUN_DATA, parse_callback_data
from .base import InboundMessage, Interaction
from .files import telegram_attachments


def interaction_of(update: Update) -> Interaction:
    """The normalised press of a callback query."""
    query = update.callback_query
    assert query is not None
    user = query.from_user
    name = f"@{user.username}" if user.username else user.full_name
    kind, target, value = parse_callback_data(query.data or "")
    message = query.message
    chat = message.chat if message is not None else None
    where: dict[str, Any] = {"channel": "telegram", "user_id": str(user.id),
                             "user_name": name, "target": target}
    if chat is not None and message is not None:
        topic = getattr(message, "message_thread_id", None)
        private = chat.type == "private"
        forum_topic = topic if getattr(message, "is_topic_message", False) else None
        where.update(
            conversation_id=conversation_of(chat.id, forum_topic, private=private),
            reply_target={"chat_id": chat.id, "message_thread_id": topic,
                          "private": private},
            space_id=str(chat.id), room_id=str(topic or chat.id), is_direct=private,
            prompt={"chat_id": chat.id, "message_id": message.message_id},
            prompt_text=getattr(message, "text", "") or "")
    if kind == APPROVAL_DATA:
        return Interaction(kind="approval", approved=value == "y", **where)
    if kind == CHOICE_DATA:
        return Interaction(kind="choice", choice=int(value) if value.isdigit() else None,
                           **where)
    if kind == RERUN_DATA:
        return Interaction(kind="rerun", **where)
    return Interaction(kind="unknown", **where)


def inbound_of(update: Update, bot: Bot) -> InboundMessage | None:
    """The normalised message of an Update, or None to ignore it."""
    message = update.message or update.edited_message
    if message is None or message.from_user is None or message.from_user.is_bot:
        return None
    text = message.text or message.caption or ""
    files = telegram_attachments(message)
    if not isinstance(text, str) or not (text or files):
        return None
    chat = message.chat
    private = chat.type == "private"
    mentioned, text = _addressed(message, text, bot)
    topic = message.message_thread_id if message.is_topic_message else None
    cid = conversation_of(chat.id, topic, private=private)
    target: dict[str, Any] = {"chat_id": chat.id, "message_thread_id": topic,
                              "private": private}
    if not private:
        target["reply_to"] = message.message_id
    user = message.from_user
    # The message's own identity (an edit names the message it edits by it); the delivery's
    # is the update.
    edit_of = f"{bot.id}:m:{chat.id}:{message.message_id}" \
        if update.edited_message is not None else None
    return InboundMessage(
        channel="telegram", conversation_id=cid, user_id=str(user.id),
        user_name=user.username or user.full_name,
        text=text.strip() or ("" if files else "(empty)"), attachments=files,
        is_direct=private, mentions_bot=private or mentioned,
        platform_message_id=f"{bot.id}:{update.update_id}", reply_target=target,
        space_id=str(chat.id), room_id=str(topic or chat.id), edit_of=edit_of,
        message_key=f"{bot.id}:m:{chat.id}:{message.message_id}")


def conversation_of(chat_id: int, topic: int | None, *, private: bool) -> str:
    """A chat's conversation: the chat, or in a forum one conversation per topic."""
    if private or topic is None:
        return f"telegram:{chat_id}"
    return f"telegram:{chat_id}:{topic}"


def _addressed(message: Message, text: str, bot: Bot) -> tuple[bool, str]:
    """Whether a group message addresses the bot, and its text without the mention."""
    username = (bot.username or "").lower()
    addressed = False
    entities = message.entities if message.text else message.caption_entities
    for entity in entities or ():
        piece = text[entity.offset:entity.offset + entity.length]
        if entity.type == "mention" and piece.lower() == f"@{username}":
            addressed = True
            text = text.replace(piece, " ")
        elif entity.type == "text_mention" and entity.user and entity.user.id == bot.id:
            addressed = True
        elif entity.type == "bot_command" and entity.offset == 0:
            target = piece.split("@", 1)[1].lower() if "@" in piece else username
            addressed = addressed or target == username
            if "@" in piece:
                text = text.replace(piece, piece.split("@", 1)[0], 1)
    reply = message.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == bot.id:
        addressed = True
    return addressed, " ".join(text.split())

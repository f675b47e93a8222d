"""Telegram's side of live replies (``adapters/live.py``): in a private chat the answer is
shown as a draft while it is written (sendMessageDraft) and then posted once; in a group or
a topic one message is posted when the task starts and edited in place (at most once a
second, under the chat's pacing), and the answer is the last edit of it. "typing" says a
task runs.

Telegram gives a message no metadata and a send no idempotency key: ``sendMessage`` is the
one step that can show something twice, ``editMessageText`` is idempotent (the same text
again is "message is not modified"), and a draft is replaced by the next. A message that
may repeat one sent before (its first send's answer was lost) says so.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
from typing import Any

from telegram import Bot, Message, ReplyParameters
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError

from .base import OutboundMessage
from .errors import DeliveryError
from .live import Display, LiveMode, Primitive, Tag
from .markup import split_text, to_telegram_html
from .pacing import Pacer
from .telegram_http import Unsent

log = logging.getLogger(__name__)

TEXT_LIMIT = 4096
SPLIT_AT = 4000  # leaves room for what HTML escaping and tags add
TYPING_EVERY = 4.0
WORKING = "⏳ Working on it…"
REPEATED = "_(This may repeat an earlier message.)_"

_SAFE: frozenset[Primitive] = frozenset({"edit", "append", "status", "discard"})
IDEMPOTENT: dict[LiveMode, frozenset[Primitive]] = {
    "draft": _SAFE, "edit": _SAFE, "final": _SAFE, "stream": _SAFE}


def draft_id(delivery: str) -> int:
    """The draft id of a reply (the same on every replica: a takeover continues it)."""
    return int(hashlib.sha256(delivery.encode()).hexdigest()[:8], 16) % (2**31 - 2) + 1


def failure(exc: TelegramError, what: str) -> DeliveryError:
    """A Bot API failure as a DeliveryError: retryable or not, applied or maybe."""
    if isinstance(exc, RetryAfter):
        value = getattr(exc, "_retry_after", None)
        wait = value.total_seconds() if isinstance(value, dt.timedelta) else 1.0
        return DeliveryError(f"telegram {what}: flood control", retryable=True,
                             retry_after=wait, code="retry_after")
    if isinstance(exc, BadRequest | Forbidden):
        return DeliveryError(f"telegram {what}: {exc}", retryable=False,
                             code=type(exc).__name__)
    if isinstance(exc, Unsent):
        return DeliveryError(f"telegram {what}: {exc}", retryable=True)
    if isinstance(exc, NetworkError):  # TimedOut included: sent, its answer lost
        return DeliveryError(f"telegram {what}: {exc}", retryable=True, applied="maybe")
    return DeliveryError(f"telegram {what}: {exc}", retryable=False)


class TelegramOutbound:
    """The outbound half of ``TelegramChannel``."""

    bot: Bot
    pacer: Pacer
    chat_interval: float
    group_interval: float
    global_interval: float
    streaming: bool
    group_streaming: bool
    _typing: dict[str, asyncio.Task[None]]
    ref_key = "message_id"
    idempotent = IDEMPOTENT

    def live_mode(self, target: dict[str, Any]) -> LiveMode:
        if not self.streaming:
            return "final"
        if target.get("private"):
            return "draft"
        return "edit" if self.group_streaming else "final"

    def opens_at_start(self, mode: LiveMode) -> bool:
        """In a group the message to edit is posted when the task starts."""
        return mode == "edit"

    def interval(self, mode: LiveMode) -> float:
        return 0.3 if mode == "draft" else self.chat_interval

    def split(self, message: OutboundMessage) -> list[str]:
        if message.kind == "approval" and message.approval is not None:
            return [message.text]  # one prompt (telegram_prompt fits it to the limit)
        return split_text(message.text, SPLIT_AT) or ["(empty answer)"]

    def _limits(self, target: dict[str, Any]) -> dict[str, float]:
        chat_id = target["chat_id"]
        limits = {f"tg:chat:{chat_id}": self.chat_interval, "tg:global": self.global_interval}
        if not target.get("private"):
            limits[f"tg:group:{chat_id}"] = self.group_interval
        return limits

    # --- posting ----------------------------------------------------------------------------
    async def post(self, message: OutboundMessage, part: int, *, tag: Tag,
                   repeat: bool = False) -> dict[str, Any]:
        parts = self.split(message)
        text = f"{parts[part]}\n\n{REPEATED}" if repeat else parts[part]
        markup = self._markup(message) if part == len(parts) - 1 else None
        html = None
        if message.kind == "approval" and message.approval is not None:
            from .approvals import telegram_prompt

            html, text = telegram_prompt(message)
        sent = await self.send_text(message.reply_target, text, reply=part == 0,
                                    reply_markup=markup, html=html)
        return {"chat_id": message.reply_target["chat_id"], "message_id": sent.message_id}

    @staticmethod
    def _markup(message: OutboundMessage) -> Any:
        if message.kind == "approval" and message.approval is not None:
            from .approvals import telegram_keyboard

            return telegram_keyboard(message)
        if message.choices:
            from .approvals import telegram_choices

            return telegram_choices(message)
        if message.rerun is not None:
            from .approvals import telegram_rerun

            return telegram_rerun(message.rerun)
        return None

    async def send_text(self, target: dict[str, Any], markdown: str, *, reply: bool = False,
                        reply_markup: Any = None, html: str | None = None) -> Message:
        """One message (at most 4096 characters once rendered), paced; one attempt (a
        message whose formatting Telegram refuses goes again as plain text). ``html``:
        already rendered (``markdown`` is then its plain text, sent if Telegram refuses it)."""
        kwargs: dict[str, Any] = {"chat_id": target["chat_id"],
                                  "message_thread_id": target.get("message_thread_id"),
                                  "reply_markup": reply_markup}
        if reply and target.get("reply_to"):
            kwargs["reply_parameters"] = ReplyParameters(
                message_id=target["reply_to"], allow_sending_without_reply=True)
        text: str = to_telegram_html(markdown) if html is None else html
        parse_mode: str | None = ParseMode.HTML
        if len(text) > TEXT_LIMIT:
            text, parse_mode = markdown[:TEXT_LIMIT], None
        limits = self._limits(target)
        await self.pacer.wait(limits)
        try:
            try:
                return await self.bot.send_message(text=text, parse_mode=parse_mode, **kwargs)
            except BadRequest as exc:
                if parse_mode is None or "parse" not in str(exc).lower():
                    raise
                # Telegram refused the formatting (nothing was posted): the plain text.
                return await self.bot.send_message(text=markdown[:TEXT_LIMIT], **kwargs)
        except TelegramError as exc:
            raise self._held(failure(exc, "sendMessage"), target["chat_id"]) from exc

    def _held(self, error: DeliveryError, chat_id: Any) -> DeliveryError:
        """Flood control holds the chat back: its messages and last edits wait, its drafts
        and other edits are dropped until then."""
        if error.retry_after is not None:
            self.pacer.hold(f"tg:chat:{chat_id}", error.retry_after)
            self.pacer.hold(f"tg:hold:{chat_id}", error.retry_after)
        return error

    # --- the live reply ------------------------------------------------------------------------
    async def open(self, target: dict[str, Any], mode: LiveMode, display: Display, *,
                   tag: Tag) -> dict[str, Any] | None:
        if mode != "edit":
            return None  # a draft has no message to hold
        sent = await self.send_text(target, _shown(display), reply=True)
        return {"chat_id": target["chat_id"], "message_id": sent.message_id}

    async def append(self, ref: dict[str, Any] | None, target: dict[str, Any],
                     mode: LiveMode, display: Display, *, tag: Tag) -> None:
        if mode == "edit":
            assert ref is not None
            # At most once a second for the chat, under the bot's global pace; an edit
            # that would have to wait (or that flood control holds back) is dropped: the
            # next one shows the text so far.
            chat_id = target["chat_id"]
            if await self._slot({f"tg:edit:{chat_id}": self.chat_interval,
                                 f"tg:hold:{chat_id}": 0.0, "tg:global": self.global_interval}):
                await self._edit(ref, _shown(display))
            return
        chat_id = target["chat_id"]
        # Drafts have their own pace, under the bot's global one; while flood control holds
        # the chat, a draft is dropped (the next one shows the text so far).
        if not await self._slot({f"tg:hold:{chat_id}": 0.0,
                                 "tg:global": self.global_interval}):
            return
        text = _shown(display)[:SPLIT_AT]
        try:
            await self._drafted(target, tag, to_telegram_html(text), ParseMode.HTML)
        except BadRequest as exc:
            if "parse" not in str(exc).lower():
                raise failure(exc, "sendMessageDraft") from exc
            await self._drafted(target, tag, text, None)

    async def _slot(self, limits: dict[str, float]) -> bool:
        """Wait for a slot of ``limits`` if one is free within a second; False (an update
        dropped) otherwise: the bot's pace is its budget, and the next update carries
        everything so far."""
        wait = self.pacer.take_within(limits, 1.0)
        if wait is None:
            return False
        if wait > 0:
            await asyncio.sleep(wait)
        return True

    async def _drafted(self, target: dict[str, Any], tag: Tag, text: str,
                       parse_mode: str | None) -> None:
        try:
            await self.bot.send_message_draft(
                chat_id=target["chat_id"], draft_id=draft_id(tag.delivery), text=text,
                message_thread_id=target.get("message_thread_id"), parse_mode=parse_mode)
        except BadRequest:
            raise
        except TelegramError as exc:
            raise self._held(failure(exc, "sendMessageDraft"), target["chat_id"]) from exc

    async def edit(self, ref: dict[str, Any], message: OutboundMessage, part: int, *,
                   tag: Tag) -> None:
        chat_id = ref["chat_id"]
        await self._edit(ref, self.split(message)[part],
                         limits={f"tg:edit:{chat_id}": self.chat_interval,
                                 f"tg:hold:{chat_id}": 0.0, "tg:global": self.global_interval})

    async def _edit(self, ref: dict[str, Any], markdown: str, *,
                    limits: dict[str, float] | None = None) -> None:
        """Put ``markdown`` into the message at ``ref``; the same text already there is
        what a repeated edit finds, and is no error."""
        if limits:
            await self.pacer.wait(limits)
        html = to_telegram_html(markdown)
        text, parse_mode = (html, ParseMode.HTML) if len(html) <= TEXT_LIMIT else (
            markdown[:TEXT_LIMIT], None)
        try:
            await self.bot.edit_message_text(chat_id=ref["chat_id"],
                                             message_id=ref["message_id"], text=text,
                                             parse_mode=parse_mode)
        except BadRequest as exc:
            if "not modified" not in str(exc).lower():
                raise failure(exc, "editMessageText") from exc
        except TelegramError as exc:
            raise self._held(failure(exc, "editMessageText"), ref["chat_id"]) from exc

    async def discard(self, ref: dict[str, Any]) -> None:
        try:
            await self.bot.delete_message(chat_id=ref["chat_id"],
                                          message_id=ref["message_id"])
        except BadRequest:
            pass  # gone already
        except TelegramError as exc:
            raise failure(exc, "deleteMessage") from exc

    async def status(self, target: dict[str, Any], line: str | None) -> None:
        key = f"{target['chat_id']}:{target.get('message_thread_id')}"
        if line is not None:
            if key not in self._typing or self._typing[key].done():
                self._typing[key] = asyncio.create_task(self._keep_typing(target))
            return
        task = self._typing.pop(key, None)
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=2)

    async def _keep_typing(self, target: dict[str, Any]) -> None:
        while True:
            try:
                await self.bot.send_chat_action(
                    chat_id=target["chat_id"], action=ChatAction.TYPING,
                    message_thread_id=target.get("message_thread_id"))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise asyncio.CancelledError from exc  # a cancel the client turned into
                log.info("typing indicator failed: %s", exc)
            await asyncio.sleep(TYPING_EVERY)


def _shown(display: Display) -> str:
    """The text of a draft or of the message edited in place: the answer so far and the
    latest step, or "working" and the step."""
    if display.text.strip():
        return f"{display.text}\n\n_{display.line}_" if display.line else f"{display.text} …"
    return f"{WORKING}\n{display.line}" if display.line else WORKING

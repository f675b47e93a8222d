"""Telegram: python-telegram-bot's Bot and Update, by webhook (``POST /telegram/webhook``
with the secret-token header) or long polling (our own getUpdates loop, which confirms an
update only once it is queued). Updates go straight to this channel's two handlers: PTB's
Application (``telegram.ext``: a dispatcher, job queue and persistence this channel does
not use) is not loaded, 4.4 MB and 96 modules less.

- a private chat is a DM conversation; a group is one conversation, a forum topic another
- in groups the bot answers when mentioned, replied to, or given a command
- "typing" is re-sent every 4 s while a task runs (Telegram shows it for only 5 s)
- answers split at 4096 characters on safe boundaries, as Telegram HTML (escaped), paced
  per chat (1/s), per group (20/min) and globally (30/s); 429 retry_after honoured
- the delivery identity is the bot's id and the update_id
- inline-keyboard presses (Approve / Reject, an offered answer) become one ``Interaction``
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import json
import logging
import os
from typing import Any

from aiohttp import web
from telegram import Bot, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TimedOut,
)

from agent_core import ConfigError, StoreUnavailableError

from .base import (
    Channel,
    FileToShow,
    InboundMessage,
    Ingest,
    Interact,
    Interaction,
    OutboundMessage,
)
from .errors import DeliveryError
from .markup import split_text, to_telegram_html
from .pacing import Pacer
from .telegram_http import AiohttpRequest
from .telegram_updates import inbound_of, interaction_of

log = logging.getLogger(__name__)

# Opt in to python-telegram-bot's coming behaviour (time periods as timedelta); without it the
# library warns on every flood-control error it raises.
os.environ.setdefault("PTB_TIMEDELTA", "true")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
TEXT_LIMIT = 4096
_SPLIT_AT = 4000  # leaves room for what HTML escaping and tags add
TYPING_EVERY = 4.0


class TelegramChannel(Channel):
    """The Telegram channel around one bot token."""

    name = "telegram"

    def __init__(
        self,
        *,
        token: str,
        webhook_secret: str | None,
        api_url: str = "https://api.telegram.org",
        ingest: Ingest,
        interact: Interact | None = None,
        pacer: Pacer | None = None,
        intervals: tuple[float, float, float] = (1.0, 3.0, 1 / 30),
    ) -> None:
        api = api_url.rstrip("/")
        #: The Bot API client; its pools as PTB's Application builds them (256 connections
        #: for sending, one for the long poll), on aiohttp.
        self.bot = Bot(token, base_url=f"{api}/bot", base_file_url=f"{api}/file/bot",
                       request=AiohttpRequest(pool_size=256),
                       get_updates_request=AiohttpRequest(pool_size=1))
        self.webhook_secret = webhook_secret
        self.ingest = ingest
        self.interact = interact
        self.pacer = pacer or Pacer()
        self.chat_interval, self.group_interval, self.global_interval = intervals
        self._typing: dict[str, asyncio.Task[None]] = {}
        self._poller: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self.bot.initialize()  # getMe: the bot's id and username
        except InvalidToken:  # its message quotes the token
            raise ConfigError("Telegram refused TELEGRAM_BOT_TOKEN (getMe answered 401): "
                              "check the token, or TELEGRAM_API_URL") from None

    async def stop(self) -> None:
        for task in self._typing.values():
            task.cancel()
        await self.stop_polling()
        await self.bot.shutdown()

    async def set_webhook(self, url: str) -> None:
        """Point Telegram at our webhook (called by one replica only)."""
        await self.bot.set_webhook(url=url, secret_token=self.webhook_secret,
                                   allowed_updates=["message", "callback_query"])

    async def start_polling(self) -> None:
        """Long polling (called by one replica only: the leader)."""
        if self._poller is not None:
            return
        await self.bot.delete_webhook()
        self._poller = asyncio.create_task(self._poll(), name="telegram-polling")

    async def stop_polling(self) -> None:
        """Stop polling (leadership lost, or shutdown)."""
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            await asyncio.wait({poller})

    async def _poll(self, hold: int = 20) -> None:
        """getUpdates in a loop. An update is confirmed to Telegram (by asking for the ones
        after it) only once it is queued: while the store is down the same update is asked
        for again, so nothing is lost (PTB's own Updater confirms updates as it fetches
        them, before they are handled)."""
        offset: int | None = None
        pause = 1.0
        while True:
            try:
                updates = await self.bot.get_updates(
                    offset=offset, timeout=hold, allowed_updates=["message", "callback_query"])
            except RetryAfter as exc:
                await asyncio.sleep(_retry_seconds(exc))
                continue
            except Exception as exc:  # a network blip, the long poll timing out, another
                # process polling with the same token (Conflict), a revoked token: the
                # poller never dies; it says why and tries again, backing off.
                log.warning("telegram getUpdates failed: %s: %s; retrying in %.0fs",
                            type(exc).__name__, exc, pause)
                await asyncio.sleep(pause)
                pause = min(30.0, pause * 2)
                continue
            pause = 1.0
            for update in updates:
                failure = await self.process(update)
                if isinstance(failure, StoreUnavailableError):
                    log.warning("telegram update %d not queued (%s); asking for it again",
                                update.update_id, failure)
                    await asyncio.sleep(1.0)
                    break
                if failure is not None:
                    log.error("telegram update %d dropped: %s: %s", update.update_id,
                              type(failure).__name__, failure)
                offset = update.update_id + 1

    async def process(self, update: Update) -> BaseException | None:
        """Run the handlers on ``update`` (a button press's, then the one every update goes
        to); what one of them raised, if anything, for the caller to decide (a lost update
        must not be acknowledged)."""
        failure: BaseException | None = None
        handlers = (self._on_callback, self._on_update) if update.callback_query \
            else (self._on_update,)
        for handler in handlers:
            try:
                await handler(update)
            except Exception as exc:  # an update of a shape we do not expect, the store
                failure = failure or exc
        return failure

    # --- inbound -------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.Response:
        """``POST /telegram/webhook``."""
        if self.webhook_secret is None:
            return web.json_response({"error": "webhook mode is not configured"}, status=404)
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self.webhook_secret.encode()):
            return web.json_response({"error": "bad or missing secret token"}, status=401)
        raw = await request.content.read(1_000_001)
        if len(raw) > 1_000_000:
            return web.json_response({"error": "body too large"}, status=413)
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
                raise ValueError("an Update needs an integer update_id")
            update = Update.de_json(data, self.bot)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # PTB reading it
            return web.json_response({"error": f"malformed update: {exc}"}, status=400)
        failure = await self.process(update)
        if isinstance(failure, StoreUnavailableError):
            raise failure  # the app answers 503: Telegram delivers the update again
        if failure is not None:  # the same update would fail the same way again
            log.warning("telegram update %d not handled: %s: %s", update.update_id,
                        type(failure).__name__, failure)
            return web.json_response(
                {"error": f"update not handled: {type(failure).__name__}"}, status=400)
        return web.json_response({"ok": True})

    async def _on_update(self, update: Update) -> None:
        msg = self.to_inbound(update)
        if msg is not None:
            await self.ingest(msg)

    async def _on_callback(self, update: Update) -> None:
        """An inline-keyboard press; the query is always answered."""
        query = update.callback_query
        if query is None or self.interact is None:
            return
        press = self.to_interaction(update)
        reply = await self.interact(press)
        await query.answer(reply.text, show_alert=reply.refused)
        if reply.replace_prompt is not None and press.prompt is not None:
            await self.replace_prompt(press.prompt, reply.replace_prompt)

    def to_interaction(self, update: Update) -> Interaction:
        """The normalised press of a callback query."""
        return interaction_of(update)

    def to_inbound(self, update: Update) -> InboundMessage | None:
        """The normalised message of an Update, or None to ignore it."""
        return inbound_of(update, self.bot)

    # --- outbound ------------------------------------------------------------------------
    async def send(self, message: OutboundMessage) -> dict[str, Any] | None:
        target = message.reply_target
        chunks = split_text(message.text, _SPLIT_AT) or ["(empty answer)"]
        ref = message.edits("message_id")
        if ref is not None:
            # Sent before (its removal from the queue was lost): edit the message it is in.
            await self._edit(ref, chunks[-1])
            return ref
        markup = None
        if message.kind == "approval" and message.approval is not None:
            from .approvals import telegram_keyboard

            markup = telegram_keyboard(message)
        elif message.choices:
            from .approvals import telegram_choices

            markup = telegram_choices(message)
        sent: Message | None = None
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            sent = await self.send_text(target, chunk, reply=i == 0,
                                        reply_markup=markup if last else None)
        assert sent is not None
        return {"chat_id": target["chat_id"], "message_id": sent.message_id}

    async def _edit(self, ref: dict[str, Any], markdown: str) -> None:
        """Put ``markdown`` into the message at ``ref``; the same text already there is
        what a repeated reply finds, and is no error."""
        try:
            await self.bot.edit_message_text(chat_id=ref["chat_id"],
                                             message_id=ref["message_id"],
                                             text=to_telegram_html(markdown)[:TEXT_LIMIT],
                                             parse_mode=ParseMode.HTML)
        except BadRequest as exc:
            if "not modified" not in str(exc).lower():
                raise DeliveryError(f"telegram edit failed: {exc}", retryable=False) from exc
        except (NetworkError, TimedOut) as exc:
            raise DeliveryError("telegram edit failed", retryable=True) from exc

    async def replace_prompt(self, ref: dict[str, Any], text: str) -> None:
        """Replace a message that had buttons (an approval, a question) with plain text."""
        await self.bot.edit_message_text(chat_id=ref["chat_id"], message_id=ref["message_id"],
                                         text=text, reply_markup=None)

    async def send_text(self, target: dict[str, Any], markdown: str, *, reply: bool = False,
                        reply_markup: Any = None) -> Message:
        """One message (at most 4096 characters once rendered), paced and retried."""
        chat_id = target["chat_id"]
        limits = {f"tg:chat:{chat_id}": self.chat_interval, "tg:global": self.global_interval}
        if not target.get("private"):
            limits[f"tg:group:{chat_id}"] = self.group_interval
        kwargs: dict[str, Any] = {"chat_id": chat_id,
                                  "message_thread_id": target.get("message_thread_id"),
                                  "reply_markup": reply_markup}
        if reply and target.get("reply_to"):
            kwargs["reply_parameters"] = ReplyParameters(
                message_id=target["reply_to"], allow_sending_without_reply=True)
        text: str = to_telegram_html(markdown)
        parse_mode: str | None = ParseMode.HTML
        if len(text) > TEXT_LIMIT:
            text, parse_mode = markdown[:TEXT_LIMIT], None
        for attempt in range(3):
            await self.pacer.wait(limits)
            try:
                return await self.bot.send_message(text=text, parse_mode=parse_mode, **kwargs)
            except RetryAfter as exc:
                wait = _retry_seconds(exc)
                self.pacer.hold(f"tg:chat:{chat_id}", wait)
                if attempt == 2:
                    raise DeliveryError("telegram flood control", retryable=True,
                                        retry_after=wait) from exc
            except BadRequest as exc:
                if parse_mode is not None and "parse" in str(exc).lower():
                    # Telegram rejected the formatting: send the plain text instead.
                    text, parse_mode = markdown[:TEXT_LIMIT], None
                    continue
                raise DeliveryError(f"telegram rejected the message: {exc}",
                                    retryable=False) from exc
            except Forbidden as exc:
                raise DeliveryError(f"telegram: {exc}", retryable=False) from exc
            except (TimedOut, NetworkError) as exc:
                raise DeliveryError(f"telegram unreachable: {exc}", retryable=True) from exc
        raise DeliveryError("telegram send failed", retryable=True)

    async def direct_target(self, user_id: str) -> dict[str, Any]:
        # A user's private chat with the bot has the user's id.
        return {"chat_id": int(user_id), "private": True}

    async def working(self, target: dict[str, Any], task_id: str) -> None:
        self._typing[task_id] = asyncio.create_task(self._keep_typing(target))

    async def progress(self, target: dict[str, Any], task_id: str, line: str) -> None:
        return None  # "typing" is the progress display on Telegram

    async def attach(self, target: dict[str, Any], task_id: str, file: FileToShow) -> None:
        chat_id = target["chat_id"]
        await self.pacer.wait({f"tg:chat:{chat_id}": self.chat_interval,
                               "tg:global": self.global_interval})
        where = {"chat_id": chat_id, "message_thread_id": target.get("message_thread_id")}
        try:
            if file.is_image and file.mime_type != "image/gif":
                await self.bot.send_photo(photo=file.data, filename=file.name, **where)
            elif file.mime_type.startswith("audio/"):
                await self.bot.send_audio(audio=file.data, filename=file.name, **where)
            else:
                await self.bot.send_document(document=file.data, filename=file.name, **where)
        except (BadRequest, Forbidden, NetworkError, RetryAfter, TimedOut) as exc:
            raise DeliveryError(f"telegram attachment failed: {type(exc).__name__}",
                                retryable=False) from exc

    async def done(self, target: dict[str, Any], task_id: str) -> None:
        task = self._typing.pop(task_id, None)
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


def _retry_seconds(exc: RetryAfter) -> float:
    value = getattr(exc, "_retry_after", None)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return 1.0

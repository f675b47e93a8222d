"""Telegram: python-telegram-bot's Bot and Update, by webhook (``POST /telegram/webhook``
with the secret-token header) or long polling (our own getUpdates loop, which confirms an
update only once it is queued). Updates go straight to this channel's two handlers: PTB's
Application (``telegram.ext``: a dispatcher, job queue and persistence this channel does
not use) is not loaded, 4.4 MB and 96 modules less.

- a private chat is a DM conversation; a group is one conversation, a forum topic another
- in groups the bot answers when mentioned, replied to, or given a command
- "typing" is re-sent every 4 s while a task runs (Telegram shows it for only 5 s)
- replies shown live (``telegram_out.py``): a draft in a private chat, one message edited
  in place in a group
- answers split at 4096 characters on safe boundaries, as Telegram HTML (escaped), paced
  per chat (1/s), per group (20/min) and globally (30/s); 429 retry_after honoured
- the delivery identity is the bot's id and the update_id
- inline-keyboard presses (Approve / Reject, an offered answer) become one ``Interaction``
- an edited message (``edited_message``) comes in as an edit of the one it replaces
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from telegram import Bot, Update
from telegram.constants import ParseMode
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
    Attachment,
    FileToShow,
    InboundMessage,
    Ingest,
    Interact,
    Interaction,
    OutboundMessage,
)
from .errors import DeliveryError, DownloadError
from .files import host_of, stream
from .live import LiveChannel
from .pacing import Pacer
from .telegram_http import AiohttpRequest
from .telegram_out import TelegramOutbound
from .telegram_out import failure as failed
from .telegram_updates import inbound_of, interaction_of

log = logging.getLogger(__name__)

# Opt in to python-telegram-bot's coming behaviour (time periods as timedelta); without it the
# library warns on every flood-control error it raises.
os.environ.setdefault("PTB_TIMEDELTA", "true")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: The updates asked for: messages, their edits, button presses.
UPDATES = ["message", "edited_message", "callback_query"]


class TelegramChannel(TelegramOutbound, LiveChannel):
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
        streaming: bool = True,
        group_streaming: bool = True,
        timeout: float = 5.0,
    ) -> None:
        api = api_url.rstrip("/")
        #: The Bot API client; its pools as PTB's Application builds them (256 connections
        #: for sending, one for the long poll), on aiohttp.
        self.bot = Bot(token, base_url=f"{api}/bot", base_file_url=f"{api}/file/bot",
                       request=AiohttpRequest(pool_size=256, read_timeout=timeout),
                       get_updates_request=AiohttpRequest(pool_size=1))
        self.webhook_secret = webhook_secret
        self.ingest = ingest
        self.interact = interact
        self.pacer = pacer or Pacer()
        self.chat_interval, self.group_interval, self.global_interval = intervals
        self.streaming = streaming
        self.group_streaming = group_streaming
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
                                   allowed_updates=UPDATES)

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
                    offset=offset, timeout=hold, allowed_updates=UPDATES)
            except RetryAfter as exc:
                await asyncio.sleep(failed(exc, "getUpdates").retry_after or 1.0)
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
        if reply.chosen is not None and press.prompt is not None:
            await self.replace_prompt(press.prompt, f"{press.prompt_text}\n→ {reply.chosen} "
                                                    f"({press.user_name})")

    def to_interaction(self, update: Update) -> Interaction:
        """The normalised press of a callback query."""
        return interaction_of(update)

    def to_inbound(self, update: Update) -> InboundMessage | None:
        """The normalised message of an Update, or None to ignore it."""
        return inbound_of(update, self.bot)

    async def download(self, attachment: Attachment) -> AsyncIterator[bytes]:
        """A file's bytes: getFile for its path, then the Bot API's file URL."""
        try:
            found = await self.bot.get_file(attachment.ref)
        except (BadRequest, Forbidden, NetworkError, RetryAfter, TimedOut) as exc:
            raise DownloadError(f"Telegram would not hand the file over: {exc}") from None
        url = found.file_path or ""
        if not url.startswith(self.bot.base_file_url + "/"):
            raise DownloadError("Telegram gave no download path for the file")
        async for chunk in stream(url, hosts={host_of(url)}, what="Telegram"):
            yield chunk

    # --- outbound (the rest is TelegramOutbound's) ----------------------------------------------
    async def replace_prompt(self, ref: dict[str, Any], text: str) -> None:
        """Replace a question's buttons with the chosen answer (plain text)."""
        await self.bot.edit_message_text(chat_id=ref["chat_id"], message_id=ref["message_id"],
                                         text=text, reply_markup=None)

    async def show_decision(self, ref: dict[str, Any], message: OutboundMessage) -> None:
        from .approvals import telegram_prompt

        html, plain = telegram_prompt(message)
        where = {"chat_id": ref["chat_id"], "message_id": ref["message_id"]}
        try:
            await self.bot.edit_message_text(text=html, parse_mode=ParseMode.HTML, **where)
        except BadRequest as exc:
            if "parse" not in str(exc).lower():
                raise
            await self.bot.edit_message_text(text=plain, **where)  # the same, unformatted

    async def direct_target(self, user_id: str) -> dict[str, Any]:
        # A user's private chat with the bot has the user's id.
        return {"chat_id": int(user_id), "private": True}

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

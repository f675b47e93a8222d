"""A local stand-in for the Telegram Bot API: records every call, keeps the messages and
drafts a person would see, answers like Telegram, and can be told to fail a call of a
method in one of the ways a network fails:

- ``fail(method, body)``: an error body (e.g. 429 with ``parameters.retry_after``)
- ``inject(method, "429")``: flood control (``retry_after`` seconds), not applied
- ``inject(method, "timeout")``: no answer until the client gives up, not applied
- ``inject(method, "lost")``: applied, then the connection is dropped before the answer

It hosts the files people send (``host_file``): getFile gives their path,
/file/bot<token>/<path> serves them to the bot's token only, and a download can be dropped
mid-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

BOT_ID = 777000
BOT_USERNAME = "hermes_test_bot"

Injection = Literal["429", "timeout", "lost"]
NOT_MODIFIED = ("Bad Request: message is not modified: specified new message content and "
                "reply markup are exactly the same as a current content and reply markup of "
                "the message")


@dataclass
class Message:
    """A message of the bot as a person sees it."""

    chat_id: int
    message_id: int
    text: str
    thread: int | None = None
    reply_markup: Any = None
    deleted: bool = False
    edits: int = 0


@dataclass
class Attempt:
    """One request, whatever came of it."""

    method: str
    params: dict[str, Any]
    outcome: str  # "ok", "error:<description>", "429", "timeout", "lost"
    at: float = field(default_factory=time.monotonic)


class TelegramAPI:
    """Serve with ``await start()``; point the Bot's base_url at ``url``."""

    def __init__(self, token: str) -> None:
        self.token = token
        #: Calls that were carried out, in order.
        self.calls: list[tuple[str, dict[str, Any]]] = []
        #: Every request, carried out or not.
        self.attempts: list[Attempt] = []
        self.failures: dict[str, deque[dict[str, Any]]] = {}
        self.injected: dict[str, deque[tuple[Injection, float]]] = {}
        self.updates: deque[dict[str, Any]] = deque()
        self.messages: dict[int, Message] = {}
        #: The drafts shown now, by (chat, thread): (draft id, text). A message sent to the
        #: chat ends its draft (as the client shows it).
        self.drafts: dict[tuple[int, int | None], tuple[int, str]] = {}
        #: Every draft text shown, in order: (chat, draft id, text).
        self.draft_log: list[tuple[int, int, str]] = []
        self._new_update = asyncio.Event()
        self._held = asyncio.Event()
        self._message_ids = itertools.count(100)
        #: Files people sent: {file_id: (path, bytes, bytes sent before dropping or None)}.
        self.files: dict[str, tuple[str, bytes, int | None]] = {}
        self.downloads: list[str] = []
        self._file_ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def push_update(self, update: dict[str, Any]) -> None:
        """Make an update available to getUpdates (long polling)."""
        self.updates.append(update)
        self._new_update.set()

    def fail(self, method: str, body: dict[str, Any], times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with an error body."""
        self.failures.setdefault(method, deque()).extend([body] * times)

    def inject(self, method: str, kind: Injection, times: int = 1, *,
               retry_after: float = 1) -> None:
        """Fail the next ``times`` calls of ``method`` this way (see the module's doc)."""
        self.injected.setdefault(method, deque()).extend([(kind, retry_after)] * times)

    def host_file(self, data: bytes, *, path: str = "documents/file_1.pdf",
                  drop_after: int | None = None) -> str:
        """Host a file a person sent; its file_id."""
        file_id = f"BQAD{next(self._file_ids):06d}"
        self.files[file_id] = (path, data, drop_after)
        return file_id

    def of(self, method: str) -> list[dict[str, Any]]:
        """Recorded (carried out) calls of one method."""
        return [params for m, params in self.calls if m == method]

    def chat(self, chat_id: int) -> list[Message]:
        """The bot's messages a person sees in a chat, oldest first."""
        return sorted((m for m in self.messages.values()
                       if m.chat_id == chat_id and not m.deleted),
                      key=lambda m: m.message_id)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.url

    async def stop(self) -> None:
        self._held.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.json_response({"ok": False, "error_code": 401}, status=401)
        path = request.match_info["path"]
        self.downloads.append(path)
        found = next((f for f in self.files.values() if f[0] == path), None)
        if found is None:
            return web.json_response({"ok": False, "error_code": 404}, status=404)
        _, data, drop_after = found
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream",
                                               "Content-Length": str(len(data))})
        await response.prepare(request)
        if drop_after is None:
            await response.write(data)
            await response.write_eof()
            return response
        await response.write(data[:drop_after])
        assert request.transport is not None
        request.transport.close()
        return response

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.json_response({"ok": False, "error_code": 401,
                                      "description": "Unauthorized"}, status=401)
        method = request.match_info["method"]
        params = await _params(request)
        queue = self.failures.get(method)
        if queue:
            body = queue.popleft()
            self.attempts.append(Attempt(method, params, f"error:{body.get('description')}"))
            return web.json_response(body, status=body.get("error_code", 400))
        injected = self.injected.get(method)
        kind, retry_after = injected.popleft() if injected else (None, 0.0)
        if kind == "429":
            self.attempts.append(Attempt(method, params, "429"))
            return web.json_response(
                {"ok": False, "error_code": 429,
                 "description": f"Too Many Requests: retry after {int(retry_after)}",
                 "parameters": {"retry_after": int(retry_after)}}, status=429)
        if kind == "timeout":
            self.attempts.append(Attempt(method, params, "timeout"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._held.wait(), 30)
            return web.json_response({"ok": False, "error_code": 504,
                                      "description": "Gateway Timeout"}, status=504)
        if method == "getUpdates" and not any(
                u["update_id"] >= int(params.get("offset") or 0) for u in self.updates):
            # Long polling: hold the request a little while, as Telegram does.
            self._new_update.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_update.wait(), 0.3)
        try:
            result = self._result(method, params)
        except _BadRequest as exc:
            self.attempts.append(Attempt(method, params, f"error:{exc}"))
            return web.json_response({"ok": False, "error_code": 400,
                                      "description": str(exc)}, status=400)
        self.calls.append((method, params))
        self.attempts.append(Attempt(method, params, "lost" if kind == "lost" else "ok"))
        if kind == "lost":
            assert request.transport is not None
            request.transport.abort()  # carried out; the answer never arrives
        return web.json_response({"ok": True, "result": result})

    def _sent(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        thread = params.get("message_thread_id")
        message = Message(chat_id, next(self._message_ids), str(params.get("text", "")),
                          int(thread) if thread else None, params.get("reply_markup"))
        self.messages[message.message_id] = message
        params["message_id"] = message.message_id  # recorded with the call
        self.drafts.pop((chat_id, message.thread), None)
        return {"message_id": message.message_id, "date": int(time.time()),
                "chat": {"id": chat_id, "type": "private"}, "text": message.text}

    def _result(self, method: str, params: dict[str, Any]) -> Any:
        if method == "getFile":
            file_id = str(params.get("file_id"))
            path, data, _ = self.files.get(file_id, ("", b"", None))
            return {"file_id": file_id, "file_unique_id": f"u{file_id}",
                    "file_size": len(data), "file_path": path}
        if method == "getMe":
            return {"id": BOT_ID, "is_bot": True, "first_name": "Hermes",
                    "username": BOT_USERNAME, "can_join_groups": True,
                    "can_read_all_group_messages": False, "supports_inline_queries": False}
        if method in ("sendPhoto", "sendDocument", "sendAudio"):
            return {"message_id": next(self._message_ids), "date": int(time.time()),
                    "chat": {"id": params.get("chat_id"), "type": "private"}}
        if method == "sendMessage":
            return self._sent(params)
        if method == "sendMessageDraft":
            chat_id = int(params["chat_id"])
            if chat_id < 0:
                raise _BadRequest("Bad Request: drafts can be sent to private chats only")
            thread = params.get("message_thread_id")
            text = str(params.get("text") or "")
            self.drafts[(chat_id, int(thread) if thread else None)] = (
                int(params["draft_id"]), text)
            self.draft_log.append((chat_id, int(params["draft_id"]), text))
            return True
        if method in ("editMessageText", "editMessageReplyMarkup", "deleteMessage"):
            found = self.messages.get(int(params.get("message_id") or 0))
            if found is None or found.deleted or found.chat_id != int(params["chat_id"]):
                raise _BadRequest("Bad Request: message to edit not found")
            if method == "deleteMessage":
                found.deleted = True
                return True
            text = str(params.get("text", found.text))
            markup = params.get("reply_markup")
            if text == found.text and markup == found.reply_markup:
                raise _BadRequest(NOT_MODIFIED)
            found.text, found.reply_markup = text, markup
            found.edits += 1
            return {"message_id": found.message_id, "date": int(time.time()),
                    "chat": {"id": found.chat_id, "type": "private"}, "text": text}
        if method == "getUpdates":
            # As Telegram does: asking for updates from ``offset`` on confirms (drops) the
            # ones before it; the others are delivered again until confirmed.
            offset = int(params.get("offset") or 0)
            while self.updates and self.updates[0]["update_id"] < offset:
                self.updates.popleft()
            return list(self.updates)[:int(params.get("limit") or 100)]
        return True


class _BadRequest(Exception):
    """The Bot API's 400 with this description."""


async def _params(request: web.Request) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if request.content_type == "application/json":
        return dict(await request.json())
    form = await request.post()
    for key, value in form.items():
        if isinstance(value, web.FileField):
            params[key] = {"filename": value.filename, "bytes": value.file.read()}
            continue
        text = value if isinstance(value, str) else str(value)
        try:
            params[key] = json.loads(text)
        except ValueError:
            params[key] = text
    return params

"""A local stand-in for the Telegram Bot API: records calls, answers like Telegram, and can
be told to fail a method (e.g. 429 with retry_after). It hosts the files people send
(``host_file``): getFile gives their path, /file/bot<token>/<path> serves them to the bot's
token only, and a download can be dropped mid-way."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import deque
from typing import Any

from aiohttp import web

BOT_ID = 777000
BOT_USERNAME = "hermes_test_bot"


class TelegramAPI:
    """Serve with ``await start()``; point the Application's base_url at ``url``."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.failures: dict[str, deque[dict[str, Any]]] = {}
        self.updates: deque[dict[str, Any]] = deque()
        self._new_update = asyncio.Event()
        self._message_ids = itertools.count(100)
        self._runner: web.AppRunner | None = None
        self.url = ""
        #: Files people sent: {file_id: (path, bytes, bytes sent before dropping or None)}.
        self.files: dict[str, tuple[str, bytes, int | None]] = {}
        self.downloads: list[str] = []
        self._file_ids = itertools.count(1)

    def push_update(self, update: dict[str, Any]) -> None:
        """Make an update available to getUpdates (long polling)."""
        self.updates.append(update)
        self._new_update.set()

    def fail(self, method: str, body: dict[str, Any], times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with an error body."""
        self.failures.setdefault(method, deque()).extend([body] * times)

    def host_file(self, data: bytes, *, path: str = "documents/file_1.pdf",
                  drop_after: int | None = None) -> str:
        """Host a file a person sent; its file_id."""
        file_id = f"BQAD{next(self._file_ids):06d}"
        self.files[file_id] = (path, data, drop_after)
        return file_id

    def of(self, method: str) -> list[dict[str, Any]]:
        """Recorded calls of one method."""
        return [params for m, params in self.calls if m == method]

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
        params: dict[str, Any] = {}
        if request.content_type == "application/json":
            params = await request.json()
        else:
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, web.FileField):
                    data = value.file.read()
                    params[key] = {"filename": value.filename, "bytes": data}
                    continue
                text = value if isinstance(value, str) else str(value)
                try:
                    params[key] = json.loads(text)
                except ValueError:
                    params[key] = text
        queue = self.failures.get(method)
        if queue:
            body = queue.popleft()
            return web.json_response(body, status=body.get("error_code", 400))
        if method == "getUpdates" and not any(
                u["update_id"] >= int(params.get("offset") or 0) for u in self.updates):
            # Long polling: hold the request a little while, as Telegram does.
            self._new_update.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_update.wait(), 0.3)
        self.calls.append((method, params))
        return web.json_response({"ok": True, "result": self._result(method, params)})

    def _result(self, method: str, params: dict[str, Any]) -> Any:
        if method == "getMe":
            return {"id": BOT_ID, "is_bot": True, "first_name": "Hermes",
                    "username": BOT_USERNAME, "can_join_groups": True,
                    "can_read_all_group_messages": False, "supports_inline_queries": False}
        if method in ("sendPhoto", "sendDocument", "sendAudio"):
            return {"message_id": next(self._message_ids), "date": int(time.time()),
                    "chat": {"id": params.get("chat_id"), "type": "private"}}
        if method in ("sendMessage", "editMessageText"):
            return {"message_id": next(self._message_ids), "date": int(time.time()),
                    "chat": {"id": params.get("chat_id"), "type": "private"},
                    "text": params.get("text", "")}
        if method == "getFile":
            file_id = str(params.get("file_id"))
            path, data, _ = self.files.get(file_id, ("", b"", None))
            return {"file_id": file_id, "file_unique_id": f"u{file_id}",
                    "file_size": len(data), "file_path": path}
        if method == "getUpdates":
            # As Telegram does: asking for updates from ``offset`` on confirms (drops) the
            # ones before it; the others are delivered again until confirmed.
            offset = int(params.get("offset") or 0)
            while self.updates and self.updates[0]["update_id"] < offset:
                self.updates.popleft()
            return list(self.updates)[:int(params.get("limit") or 100)]
        return True

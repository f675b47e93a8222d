"""A local stand-in for the Slack Web API: records calls, answers like Slack, and can be
told to fail a method with an HTTP status (e.g. 429 with Retry-After). It also hosts the
files people share (``host_file``): served at their url_private_download to the bot token
only (anyone else gets Slack's sign-in page), and able to drop a download mid-way."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections import deque
from typing import Any
from urllib.parse import parse_qsl, quote

from aiohttp import web

BOT_USER = "UBOT"
TEAM = "T1"


class SlackAPI:
    """Serve with ``await start()``; point the bolt client's base_url at ``url``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.failures: dict[str, deque[tuple[int, dict[str, str]]]] = {}
        self._ts = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.root = ""
        self.sockets: list[web.WebSocketResponse] = []
        self.socket_acks: list[str] = []
        #: Files uploaded to the URLs files.getUploadURLExternal handed out: {file_id: bytes}.
        self.uploads: dict[str, bytes] = {}
        self._file_ids = itertools.count(1)
        #: Files people shared: {file_id: (bytes, bytes to send before dropping or None)}.
        self.files: dict[str, tuple[bytes, int | None]] = {}
        #: Each download of a shared file: (file_id, its Authorization header).
        self.downloads: list[tuple[str, str]] = []

    def fail(self, method: str, status: int, times: int = 1,
             headers: dict[str, str] | None = None) -> None:
        """Answer the next ``times`` calls of ``method`` with ``status``."""
        self.failures.setdefault(method, deque()).extend([(status, headers or {})] * times)

    def host_file(self, name: str, data: bytes, *, mimetype: str = "application/pdf",
                  drop_after: int | None = None, size: int | None = None) -> dict[str, Any]:
        """Host a file a person shared; the file object of its event (``files``).
        ``drop_after``: the connection closes after that many bytes of the download."""
        file_id = f"F{next(self._file_ids):04d}"
        self.files[file_id] = (data, drop_after)
        quoted = quote(name, safe="")
        return {"id": file_id, "name": name, "title": name, "mimetype": mimetype,
                "filetype": name.rpartition(".")[2], "size": len(data) if size is None
                else size, "mode": "hosted",
                "url_private": f"http://{self.root}/files-pri/T1-{file_id}/{quoted}",
                "url_private_download":
                    f"http://{self.root}/files-pri/T1-{file_id}/download/{quoted}"}

    def of(self, method: str) -> list[dict[str, Any]]:
        """Recorded calls of one method."""
        return [params for m, params in self.calls if m == method]

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/api/{method}", self._handle)
        app.router.add_get("/socket", self._socket)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files-pri/T1-{file_id}/download/{name}", self._file)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.root = f"127.0.0.1:{self._runner.addresses[0][1]}"
        self.url = f"http://{self.root}/api/"
        return self.url

    async def stop(self) -> None:
        for ws in self.sockets:
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def push_event(self, body: dict[str, Any]) -> str:
        """Deliver an Events API body over Socket Mode, as Slack does; the envelope id."""
        envelope = uuid.uuid4().hex
        await self.sockets[-1].send_json({
            "envelope_id": envelope, "type": "events_api", "payload": body,
            "accepts_response_payload": False, "retry_attempt": 0, "retry_reason": ""})
        return envelope

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        await ws.send_json({"type": "hello", "num_connections": 1,
                            "connection_info": {"app_id": "A1"}})
        async for message in ws:
            if message.type.name == "TEXT":
                ack = json.loads(message.data)
                if "envelope_id" in ack:
                    self.socket_acks.append(ack["envelope_id"])
        return ws

    async def _file(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file_id"]
        auth = request.headers.get("Authorization", "")
        self.downloads.append((file_id, auth))
        if not auth.startswith("Bearer xoxb-") or file_id not in self.files:
            # What Slack answers a request without a token that may read files.
            return web.Response(text="<html><body>Sign in to Slack</body></html>",
                                content_type="text/html")
        data, drop_after = self.files[file_id]
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream",
                                               "Content-Length": str(len(data))})
        await response.prepare(request)
        if drop_after is None:
            await response.write(data)
            await response.write_eof()
            return response
        await response.write(data[:drop_after])
        assert request.transport is not None
        request.transport.close()  # the connection drops mid-way
        return response

    async def _upload(self, request: web.Request) -> web.Response:
        self.uploads[request.match_info["file_id"]] = await request.read()
        return web.Response(text=f"OK - {len(self.uploads[request.match_info['file_id']])}")

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        raw = await request.text()
        if request.content_type == "application/json":
            params = json.loads(raw or "{}")
        else:
            params = dict(parse_qsl(raw))
            for key in ("blocks", "attachments"):
                if isinstance(params.get(key), str):
                    params[key] = json.loads(params[key])
        params = {**dict(request.query), **params}  # some methods send query parameters
        if method == "apps.connections.open":
            if not request.headers.get("Authorization", "").startswith("Bearer xapp-"):
                return web.json_response({"ok": False, "error": "not_authed"})
            return web.json_response({"ok": True, "url": f"ws://{self.root}/socket"})
        if not request.headers.get("Authorization", "").startswith("Bearer xoxb-"):
            return web.json_response({"ok": False, "error": "not_authed"})
        queue = self.failures.get(method)
        if queue:
            status, headers = queue.popleft()
            error = "ratelimited" if status == 429 else "internal_error"
            return web.json_response({"ok": False, "error": error}, status=status,
                                     headers=headers)
        self.calls.append((method, params))
        if method == "auth.test":
            return web.json_response({"ok": True, "user_id": BOT_USER, "bot_id": "BBOT",
                                      "team_id": TEAM, "user": "hermes", "team": "Acme"})
        if method in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
            ts = params.get("ts") or f"{int(time.time())}.{next(self._ts):06d}"
            params["ts"] = ts  # recorded with the call, as Slack returns it
            return web.json_response({"ok": True, "channel": params.get("channel"), "ts": ts,
                                      "message": {"text": params.get("text", "")}})
        if method == "files.getUploadURLExternal":
            file_id = f"F{next(self._file_ids):04d}"
            return web.json_response({"ok": True, "file_id": file_id,
                                      "upload_url": f"http://{self.root}/upload/{file_id}"})
        if method == "files.completeUploadExternal":
            files = params["files"]
            files = json.loads(files) if isinstance(files, str) else files
            missing = [f["id"] for f in files if f["id"] not in self.uploads]
            if missing:
                return web.json_response({"ok": False, "error": "file_not_uploaded"})
            return web.json_response({"ok": True, "files": [
                {"id": f["id"], "title": f.get("title")} for f in files]})
        if method == "conversations.open":
            return web.json_response({"ok": True, "channel": {"id": f"D{params['users']}"}})
        return web.json_response({"ok": True})

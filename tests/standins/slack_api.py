"""A local stand-in for the Slack Web API: records every call, keeps the messages a person
would see (posted, updated, streamed, deleted), answers like Slack, and can be told to fail
a call of a method in one of the ways a network fails:

- ``fail(method, status)``: an HTTP error (429 with Retry-After, 500), the call not applied
- ``inject(method, "429")``: rate limited (``retry_after`` seconds), not applied
- ``inject(method, "timeout")``: no answer until the client gives up, not applied
- ``inject(method, "lost")``: applied, then the connection is dropped before the answer
  (the shape of a post Slack made while its response was lost)

It also hosts the files people share (``host_file``): served at their url_private_download
to the bot token only (anyone else gets Slack's sign-in page), and able to drop a download
mid-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, quote

from aiohttp import web

BOT_USER = "UBOT"
BOT_ID = "BBOT"
TEAM = "T1"

Injection = Literal["429", "timeout", "lost"]


@dataclass
class Message:
    """A message as Slack keeps it (what a person sees of it)."""

    channel: str
    ts: str
    text: str = ""
    thread_ts: str | None = None
    blocks: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    #: A message started with chat.startStream and not stopped yet.
    streaming: bool = False
    #: The chunks streamed into it (task updates, plan updates), in order.
    chunks: list[dict[str, Any]] = field(default_factory=list)
    deleted: bool = False

    def shown(self) -> str:
        """What a person reads: the text of its markdown and section blocks when it has
        any (``text`` is then only the notification's), else its text."""
        parts = []
        for block in self.blocks:
            if block.get("type") == "markdown":
                parts.append(str(block.get("text", "")))
            elif block.get("type") == "section":
                parts.append(str((block.get("text") or {}).get("text", "")))
        return "\n".join(parts) if parts else self.text

    def tag(self) -> dict[str, Any] | None:
        """Its hermes_delivery metadata's payload, if it carries one."""
        meta = self.metadata or {}
        if meta.get("event_type") != "hermes_delivery":
            return None
        return dict(meta.get("event_payload") or {})


@dataclass
class Attempt:
    """One request, whatever came of it."""

    method: str
    params: dict[str, Any]
    outcome: str  # "ok", "error:<code>", "429", "timeout", "lost"
    at: float = field(default_factory=time.monotonic)


class SlackAPI:
    """Serve with ``await start()``; point the bolt client's base_url at ``url``."""

    def __init__(self) -> None:
        #: Calls that were carried out, in order.
        self.calls: list[tuple[str, dict[str, Any]]] = []
        #: Every request, carried out or not.
        self.attempts: list[Attempt] = []
        self.failures: dict[str, deque[tuple[int, dict[str, str]]]] = {}
        self.injected: dict[str, deque[tuple[Injection, float]]] = {}
        #: Methods answered with an error code (``refuse``), e.g. missing_scope.
        self.refused: dict[str, str] = {}
        self.messages: dict[str, dict[str, Message]] = {}
        #: Assistant thread statuses in the order they were set: (channel, thread, status).
        self.statuses: list[tuple[str, str, str]] = []
        self._clock = 0.0
        self._runner: web.AppRunner | None = None
        self._held = asyncio.Event()
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

    # --- scripting failures ----------------------------------------------------------------
    def fail(self, method: str, status: int, times: int = 1,
             headers: dict[str, str] | None = None) -> None:
        """Answer the next ``times`` calls of ``method`` with ``status``."""
        self.failures.setdefault(method, deque()).extend([(status, headers or {})] * times)

    def inject(self, method: str, kind: Injection, times: int = 1, *,
               retry_after: float = 1) -> None:
        """Fail the next ``times`` calls of ``method`` this way (see the module's doc)."""
        self.injected.setdefault(method, deque()).extend([(kind, retry_after)] * times)

    def refuse(self, method: str, error: str) -> None:
        """Answer every call of ``method`` with ``{"ok": false, "error": error}``."""
        self.refused[method] = error

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

    def end_streams(self) -> None:
        """End every open stream, as Slack does about five minutes after one started."""
        for message in self.everything():
            message.streaming = False

    # --- what was done ------------------------------------------------------------------
    def of(self, method: str) -> list[dict[str, Any]]:
        """Recorded (carried out) calls of one method."""
        return [params for m, params in self.calls if m == method]

    def thread(self, channel: str, thread_ts: str | None = None) -> list[Message]:
        """The messages a person sees: the thread's replies (or, without ``thread_ts``,
        the channel's top-level messages), oldest first, deleted ones left out."""
        found = [m for m in self.messages.get(channel, {}).values() if not m.deleted and (
            m.thread_ts == thread_ts if thread_ts else m.thread_ts is None)]
        return sorted(found, key=lambda m: float(m.ts))

    def everything(self) -> list[Message]:
        """Every message still there, in every channel."""
        return [m for ms in self.messages.values() for m in ms.values() if not m.deleted]

    # --- serving ------------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle)
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
        self._held.set()
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

    async def _upload(self, request: web.Request) -> web.Response:
        self.uploads[request.match_info["file_id"]] = await request.read()
        return web.Response(text=f"OK - {len(self.uploads[request.match_info['file_id']])}")

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

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params = await _params(request)
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
            self.attempts.append(Attempt(method, params, str(status)))
            return web.json_response({"ok": False, "error": error}, status=status,
                                     headers=headers)
        injected = self.injected.get(method)
        kind, retry_after = injected.popleft() if injected else (None, 0.0)
        if kind == "429":
            self.attempts.append(Attempt(method, params, "429"))
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                     headers={"Retry-After": str(int(retry_after))})
        if kind == "timeout":
            self.attempts.append(Attempt(method, params, "timeout"))
            # Held until the client gives up (it closes the connection), never applied.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._held.wait(), 30)
            return web.json_response({"ok": False, "error": "request_timeout"})
        if method in self.refused:
            self.attempts.append(Attempt(method, params, f"error:{self.refused[method]}"))
            return web.json_response({"ok": False, "error": self.refused[method]})
        body = self._apply(method, params)
        self.attempts.append(Attempt(method, params, "lost" if kind == "lost" else (
            "ok" if body.get("ok") else f"error:{body.get('error')}")))
        if body.get("ok"):
            self.calls.append((method, params))
        if kind == "lost":
            assert request.transport is not None
            request.transport.abort()  # carried out; the answer never arrives
        return web.json_response(body)

    # --- Slack's behaviour ----------------------------------------------------------------
    def _next_ts(self, *seen: Any) -> str:
        """A message ts later than any seen so far (Slack's clock is monotonic)."""
        known = [float(s) for s in seen if isinstance(s, str) and _number(s)]
        self._clock = max([self._clock + 0.000001, time.time(), *known])
        return f"{self._clock:.6f}"

    def _message(self, params: dict[str, Any]) -> Message | None:
        found = self.messages.get(str(params.get("channel")), {}).get(str(params.get("ts")))
        return found if found is not None and not found.deleted else None

    def _apply(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        if method == "auth.test":
            return {"ok": True, "user_id": BOT_USER, "bot_id": BOT_ID, "team_id": TEAM,
                    "user": "hermes", "team": "Acme"}
        if method in ("chat.postMessage", "chat.startStream"):
            if method == "chat.startStream":
                if not params.get("thread_ts"):
                    return {"ok": False, "error": "invalid_arguments"}
                if not channel.startswith("D") and not (
                        params.get("recipient_team_id") and params.get("recipient_user_id")):
                    return {"ok": False, "error": "missing_recipient_team_id"}
            ts = self._next_ts(params.get("thread_ts"))
            message = Message(channel, ts, _text(params), params.get("thread_ts") or None,
                              list(params.get("blocks") or []), params.get("metadata"),
                              streaming=method == "chat.startStream")
            _add_chunks(message, params)
            self.messages.setdefault(channel, {})[ts] = message
            params["ts"] = ts  # recorded with the call, as Slack returns it
            return {"ok": True, "channel": channel, "ts": ts,
                    "message": {"text": message.text, "ts": ts}}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": self._next_ts()}
        if method in ("chat.update", "chat.appendStream", "chat.stopStream", "chat.delete"):
            found = self._message(params)
            if found is None:
                return {"ok": False, "error": "message_not_found"}
            if method == "chat.update":
                if found.streaming:
                    return {"ok": False, "error": "streaming_state_conflict"}
                found.text = _text(params)
                found.blocks = list(params.get("blocks") or [])
                found.chunks = []
                if "metadata" in params:
                    found.metadata = params["metadata"]
            elif method == "chat.delete":
                found.deleted = True
            else:
                if not found.streaming:
                    return {"ok": False, "error": "message_not_in_streaming_state"}
                found.text += str(params.get("markdown_text") or "")
                _add_chunks(found, params)
                if method == "chat.stopStream":
                    found.streaming = False
                    found.blocks = list(params.get("blocks") or [])
                    if params.get("metadata"):
                        found.metadata = params["metadata"]
            return {"ok": True, "channel": channel, "ts": found.ts, "text": found.text}
        if method in ("conversations.replies", "conversations.history"):
            return self._read(method, params)
        if method == "assistant.threads.setStatus":
            self.statuses.append((str(params.get("channel_id")), str(params.get("thread_ts")),
                                  str(params.get("status", ""))))
            return {"ok": True}
        if method == "files.getUploadURLExternal":
            file_id = f"F{next(self._file_ids):04d}"
            return {"ok": True, "file_id": file_id,
                    "upload_url": f"http://{self.root}/upload/{file_id}"}
        if method == "files.completeUploadExternal":
            files = params["files"]
            files = json.loads(files) if isinstance(files, str) else files
            missing = [f["id"] for f in files if f["id"] not in self.uploads]
            if missing:
                return {"ok": False, "error": "file_not_uploaded"}
            return {"ok": True, "files": [{"id": f["id"], "title": f.get("title")}
                                          for f in files]}
        if method == "conversations.open":
            return {"ok": True, "channel": {"id": f"D{params['users']}"}}
        return {"ok": True}

    def _read(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """conversations.replies (a thread: its root and replies) and .history (top
        level), ``oldest`` exclusive; metadata only with include_all_metadata."""
        channel = str(params.get("channel", ""))
        oldest = float(params.get("oldest") or 0)
        everything = self.messages.get(channel, {}).values()
        if method == "conversations.replies":
            root = str(params.get("ts"))
            found = [m for m in everything if m.ts == root or m.thread_ts == root]
        else:
            found = [m for m in everything if m.thread_ts is None]
        found = sorted((m for m in found if not m.deleted and float(m.ts) > oldest),
                       key=lambda m: float(m.ts))
        with_metadata = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        out = []
        for m in found:
            entry: dict[str, Any] = {"type": "message", "ts": m.ts, "text": m.text,
                                     "bot_id": BOT_ID, "user": BOT_USER}
            if m.thread_ts:
                entry["thread_ts"] = m.thread_ts
            if m.streaming:
                entry["streaming_state"] = "in_progress"
            if with_metadata and m.metadata:
                entry["metadata"] = m.metadata
            out.append(entry)
        if method == "conversations.history":
            out.reverse()  # newest first, as Slack lists history
        return {"ok": True, "messages": out, "has_more": False}


async def _params(request: web.Request) -> dict[str, Any]:
    raw = await request.text()
    if request.content_type == "application/json":
        params = json.loads(raw or "{}")
    else:
        params = dict(parse_qsl(raw))
        for key in ("blocks", "attachments", "metadata", "chunks"):
            if isinstance(params.get(key), str):
                params[key] = json.loads(params[key])
    return {**dict(request.query), **params}  # some methods send query parameters


def _add_chunks(message: Message, params: dict[str, Any]) -> None:
    for chunk in params.get("chunks") or []:
        message.chunks.append(chunk)
        if chunk.get("type") == "markdown_text":
            message.text += str(chunk.get("text", ""))


def _text(params: dict[str, Any]) -> str:
    if params.get("markdown_text"):
        return str(params["markdown_text"])
    return str(params.get("text") or "")


def _number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True

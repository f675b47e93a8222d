"""ReplayModelServer: a local HTTP server speaking the OpenAI, Anthropic and Ollama chat APIs,
answering from a script.

It lets the real adapters run over real HTTP with no API key: the test suite scripts
replies and failures with it (and transcripts, at /v1/audio/transcriptions),
``hermes-gateway demo`` replays a recorded session through it, and the load benchmark uses
its ``responder`` with a fixed latency. ``Reply`` is rendered in the shape of the API asked
(refusals and endings included); ``Verbatim`` replays a provider's recorded answer byte for
byte, error events and all.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from ..ids import new_id
from .replay_items import STOPS, Failure, Item, Raw, RawStream, Reply, Responder, Verbatim

__all__ = ["STOPS", "Failure", "Item", "Raw", "RawStream", "ReplayModelServer", "Reply",
           "Responder", "Verbatim", "hashed_embedding"]


class ReplayModelServer:
    """Serves scripted items in order; a ``responder`` answers once the script runs out."""

    def __init__(self, script: Iterable[Item] = (), *, responder: Responder | None = None,
                 latency: float = 0.0, chunk_size: int = 7,
                 embed: Callable[[str], list[float]] | None = None) -> None:
        self.script: deque[Item] = deque(script)
        self.responder = responder
        self.latency = latency
        self.chunk_size = chunk_size
        self.embed = embed or hashed_embedding
        self.requests: list[tuple[str, dict[str, Any]]] = []
        #: The Authorization header of each request, in order ("" when none was sent).
        self.authorizations: list[str] = []
        self.model_seconds = 0.0
        #: When the first piece of the first streamed answer was written (monotonic).
        self.first_token_at: float | None = None
        #: Transcripts /v1/audio/transcriptions answers, in order (then "").
        self.transcripts: deque[str] = deque()
        #: Each transcription asked: model, file name, content type and size of the audio.
        self.transcriptions: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.root = ""

    def add(self, *items: Item) -> None:
        """Append items to the script."""
        self.script.extend(items)

    @property
    def openai_url(self) -> str:
        """Base URL for the OpenAI-compatible adapter."""
        return f"{self.root}/v1"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start listening; returns the root URL."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/api/chat", self._ollama)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        # A client that goes away (a stopped task) ends its request, as a real server does.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.root = f"http://{host}:{bound}"
        return self.root

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ReplayModelServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- handlers ------------------------------------------------------------------------
    async def _next(self, request: web.Request) -> tuple[Item, dict[str, Any]]:
        body = await request.json()
        self.requests.append((request.path, body))
        self.authorizations.append(request.headers.get("Authorization", ""))
        if self.script:
            item = self.script.popleft()
        elif self.responder is not None:
            item = self.responder(request.path, body)
        else:
            item = Failure(500, {"error": {"message": "replay script exhausted"}})
        delay = self.latency + item.delay
        if delay:
            started = time.perf_counter()
            await asyncio.sleep(delay)
            self.model_seconds += time.perf_counter() - started
        return item, body

    async def _given(self, request: web.Request, item: Failure | Raw | RawStream | Verbatim,
                     content_type: str) -> web.StreamResponse:
        """The answer of an item that is not a Reply."""
        if isinstance(item, Failure):
            return self._failure(item)
        if isinstance(item, Raw):
            return web.Response(text=item.body, content_type="application/json")
        if isinstance(item, RawStream):
            return await _stream(request, item.lines, content_type)
        data = item.body.encode() if isinstance(item.body, str) else item.body
        size = item.chunk or len(data) or 1
        pieces = [data[i:i + size] for i in range(0, len(data), size)]
        return await _stream(request, pieces, item.content_type, status=item.status,
                             headers=item.headers)

    def _failure(self, item: Failure) -> web.Response:
        body = item.body if isinstance(item.body, str) else json.dumps(
            item.body if item.body is not None else {"error": {"message": "scripted failure"}})
        return web.Response(status=item.status, text=body, headers=item.headers,
                            content_type="application/json")

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        item, body = await self._next(request)
        if not isinstance(item, Reply):
            return await self._given(request, item, "text/event-stream")
        model = body.get("model", "replay")
        calls: list[dict[str, Any]] = [
            {"id": f"call_{new_id(10)}", "type": "function",
             "function": {"name": c["name"], "arguments": _args_text(c["arguments"])}}
            for c in item.tool_calls]
        if calls and item.stop == "length":
            args = calls[-1]["function"]["arguments"]
            calls[-1]["function"]["arguments"] = args[:len(args) // 2]
        finish = item.stop_for(0, bool(calls))
        usage: dict[str, Any] = {"prompt_tokens": item.prompt_tokens,
                                 "completion_tokens": item.completion_tokens,
                                 "total_tokens": item.prompt_tokens + item.completion_tokens}
        if item.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": item.cached_tokens}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": item.text or None,
                                       "refusal": item.refusal or None}
            if calls:
                message["tool_calls"] = calls
            return web.json_response({
                "id": "chatcmpl-replay", "object": "chat.completion", "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage})
        chunks: list[dict[str, Any]] = []
        for piece in _pieces(item.text, self.chunk_size):
            chunks.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
        for piece in _pieces(item.refusal, self.chunk_size):
            chunks.append({"choices": [{"index": 0, "delta": {"refusal": piece}}]})
        for index, call in enumerate(calls):
            args = call["function"]["arguments"]
            chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}]}}]})
            for piece in _pieces(args, self.chunk_size):
                chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [{
                    "index": index, "function": {"arguments": piece}}]}}]})
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({"choices": [], "usage": usage})
        lines = [f"data: {json.dumps({'model': model, **c})}\n\n" for c in chunks]
        lines.append("data: [DONE]\n\n")
        return await self._stream(request, lines, "text/event-stream", pace=item.pace)

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        item, body = await self._next(request)
        if not isinstance(item, Reply):
            return await self._given(request, item, "text/event-stream")
        model = body.get("model", "replay")
        blocks: list[dict[str, Any]] = []
        if item.text and not item.refusal:
            blocks.append({"type": "text", "text": item.text})
        for c in item.tool_calls:
            args = c["arguments"] if isinstance(c["arguments"], dict) else json.loads(
                c["arguments"])
            blocks.append({"type": "tool_use", "id": f"toolu_{new_id(10)}",
                           "name": c["name"], "input": args})
        stop = item.stop_for(1, bool(item.tool_calls))
        details = {"type": "refusal", "explanation": item.refusal} if item.refusal else None
        if not body.get("stream"):
            return web.json_response({
                "id": "msg_replay", "type": "message", "role": "assistant", "model": model,
                "content": blocks, "stop_reason": stop, "stop_details": details,
                "usage": {**_anthropic_input(item),
                          "output_tokens": item.completion_tokens}})
        events: list[tuple[str, dict[str, Any]]] = [("message_start", {
            "type": "message_start", "message": {
                "id": "msg_replay", "type": "message", "role": "assistant", "model": model,
                "content": [], "usage": {**_anthropic_input(item),
                                         "output_tokens": 1}}})]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                events.append(("content_block_start", {
                    "type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}}))
                for piece in _pieces(block["text"], self.chunk_size):
                    events.append(("content_block_delta", {
                        "type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": piece}}))
            else:
                events.append(("content_block_start", {
                    "type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": block["id"],
                                      "name": block["name"], "input": {}}}))
                args = json.dumps(block["input"])
                if item.stop == "length" and block is blocks[-1]:
                    args = args[:len(args) // 2]
                for piece in _pieces(args, self.chunk_size):
                    events.append(("content_block_delta", {
                        "type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}))
            events.append(("content_block_stop", {"type": "content_block_stop",
                                                  "index": index}))
        events.append(("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": stop,
                                                   "stop_details": details},
                                         "usage": {"output_tokens": item.completion_tokens}}))
        events.append(("message_stop", {"type": "message_stop"}))
        lines = [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events]
        return await self._stream(request, lines, "text/event-stream", pace=item.pace)

    async def _stream(self, request: web.Request, lines: list[str], content_type: str, *,
                      pace: float) -> web.StreamResponse:
        """A scripted answer streamed, ``pace`` seconds between its pieces."""
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        for i, line in enumerate(lines):
            if pace and i:
                await asyncio.sleep(pace)
            await response.write(line.encode())
            if self.first_token_at is None:
                self.first_token_at = time.monotonic()
        await response.write_eof()
        return response

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append((request.path, body))
        texts = body["input"] if isinstance(body.get("input"), list) else [body.get("input")]
        return web.json_response({
            "object": "list", "model": body.get("model", "replay"),
            "data": [{"object": "embedding", "index": i, "embedding": self.embed(str(t))}
                     for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": 0, "total_tokens": 0}})

    async def _transcribe(self, request: web.Request) -> web.Response:
        form = await request.post()
        audio = form.get("file")
        if not isinstance(audio, web.FileField):
            return web.json_response({"error": {"message": "no file"}}, status=400)
        data = audio.file.read()
        self.transcriptions.append({"model": form.get("model"), "name": audio.filename,
                                    "content_type": audio.content_type, "bytes": len(data)})
        return web.json_response({"text": self.transcripts.popleft()
                                  if self.transcripts else ""})

    async def _ollama(self, request: web.Request) -> web.StreamResponse:
        item, body = await self._next(request)
        if not isinstance(item, Reply):
            return await self._given(request, item, "application/x-ndjson")
        model = body.get("model", "replay")
        calls = [{"function": {"name": c["name"], "arguments": c["arguments"] if isinstance(
            c["arguments"], dict) else json.loads(c["arguments"])}} for c in item.tool_calls]
        final = {"model": model, "done": True, "done_reason": item.stop_for(2, bool(calls)),
                 "prompt_eval_count": item.prompt_tokens, "eval_count": item.completion_tokens}
        if not body.get("stream", True):
            message: dict[str, Any] = {"role": "assistant", "content": item.text}
            if calls:
                message["tool_calls"] = calls
            return web.json_response({**final, "message": message})
        lines = [json.dumps({"model": model, "done": False,
                             "message": {"role": "assistant", "content": piece}}) + "\n"
                 for piece in _pieces(item.text, self.chunk_size)]
        if calls:
            lines.append(json.dumps({"model": model, "done": False, "message": {
                "role": "assistant", "content": "", "tool_calls": calls}}) + "\n")
        lines.append(json.dumps({**final, "message": {"role": "assistant",
                                                      "content": ""}}) + "\n")
        return await self._stream(request, lines, "application/x-ndjson", pace=item.pace)


def _anthropic_input(item: Reply) -> dict[str, int]:
    """A reply's prompt as Anthropic counts it: cache reads apart from input_tokens."""
    cached = min(item.cached_tokens, item.prompt_tokens)
    return {"input_tokens": item.prompt_tokens - cached,
            **({"cache_read_input_tokens": cached} if cached else {})}


def hashed_embedding(text: str, dims: int = 64) -> list[float]:
    """A deterministic stand-in embedding: words hashed into ``dims`` buckets."""
    vector = [0.0] * dims
    for word in text.lower().split():
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dims] += 1.0
    return vector


def _args_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments,
                                                                    ensure_ascii=False)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] if text else []


async def _stream(request: web.Request, lines: list[str] | list[bytes], content_type: str, *,
                  status: int = 200, headers: dict[str, str] | None = None
                  ) -> web.StreamResponse:
    response = web.StreamResponse(status=status,
                                  headers={**(headers or {}), "Content-Type": content_type})
    await response.prepare(request)
    for line in lines:
        await response.write(line.encode() if isinstance(line, str) else line)
    await response.write_eof()
    return response

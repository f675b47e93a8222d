"""Agents of the Synadia Agent Protocol (Claude Code, OpenClaw, Hermes Agent, ...) as hub
agents: found with the stock client SDK (``synadia-ai-agents``: ``$SRV.INFO.agents``) and
fronted by the bridge, so ``delegate``, workflow steps and A2A callers use them.

A ``task_request`` to one becomes a prompt: ``arguments.text`` (or the arguments as JSON) is
the prompt, ``arguments.attachments`` (``[{filename, content}]``, base64) its attachments,
the time left before the deadline its ``deadline_ms`` (an extension field) and the stream's
limit. Its stream becomes progress and the answer: a status chunk other than the ack is a
``log_event`` on ``log.<task id>``, the response chunks joined are ``result.answer`` (their
attachments ``result.attachments``), a mid-stream question ends the task ``partial`` with
the question and a next step to the same agent (the stream is closed; the question goes
unanswered), an error frame ends it ``failed`` (``AGENT_ERROR``, the agent's code and words
in the result). An agent that never answers is the deadline watch's: TIMEOUT. Prompts are
signed with the bridge's NATS key when it has one (``Agent-Sender``), so an agent that
wants signed senders takes them. Agents of our own owner token are ours, and not fronted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any

from synadia_ai.agents import Agent as SdkAgent
from synadia_ai.agents import (
    Agents,
    Attachment,
    Envelope,
    IdentityError,
    NatsAgentError,
    Query,
    ResponseChunk,
    StatusChunk,
    StreamMaxWaitExceededError,
    StreamStalledError,
)
from synadia_ai.agents import ValidationError as PromptRefused

from agent_core.background import Background, repeating

from ..deadlines import deadline_of
from ..messages import TaskRequest, TaskResponse
from .names import capabilities, sap_id
from .runner import BridgeRunner, Fronted

log = logging.getLogger(__name__)

#: Scans an agent may be missing from before it is no longer fronted.
_MISSES = 2
#: Seconds of silence (not even the protocol's keep-alive ack) that end a prompt's stream.
_SILENCE = 60.0


def _attachments(arguments: dict[str, Any]) -> list[Attachment] | None:
    """``arguments.attachments`` as the protocol's attachments (None when there are none;
    ValueError for one that is not {filename, content})."""
    raw = arguments.get("attachments")
    if not raw:
        return None
    if not isinstance(raw, list):
        raise ValueError("attachments must be a list of {filename, content}")
    return [Attachment.model_validate(item) for item in raw]


class ProtocolAgent(Fronted):
    """One protocol agent (every instance of ``agent``/``owner``/``session``) on the hub."""

    def __init__(self, handle: SdkAgent) -> None:
        super().__init__()
        self.handle = handle
        self.agent_id = sap_id(handle.agent, handle.owner, handle.session_name)
        declared = (handle.metadata.get("capabilities") or "").split(",")
        self.capabilities = capabilities(*declared, handle.agent)
        self.version = (handle.version or "0")[:64]
        self.misses = 0

    async def on_message(self, request: TaskRequest) -> TaskResponse:
        arguments = request.arguments
        text = arguments.get("text")
        if not isinstance(text, str) or not text.strip():
            text = json.dumps({k: v for k, v in arguments.items() if k != "attachments"},
                              ensure_ascii=False)
        try:
            files = _attachments(arguments)
        except ValueError as exc:
            return self.respond(request, "failed", {"error": str(exc)},
                                error_code="INVALID_ARGUMENTS")
        left = max(0.1, deadline_of(request) - time.time())
        envelope = Envelope(prompt=text, attachments=files, deadline_ms=int(left * 1000))
        answer: list[str] = []
        returned: list[dict[str, str]] = []
        try:
            stream = self.handle.prompt(envelope, timeout=min(_SILENCE, left + 1),
                                        max_wait_s=left + 1)
            # An async generator: closed at once when the loop leaves early (a question).
            async with contextlib.aclosing(stream):  # type: ignore[type-var]
                async for message in stream:
                    if isinstance(message, ResponseChunk):
                        answer.append(message.text)
                        returned += [a.model_dump() for a in message.attachments or ()]
                    elif isinstance(message, StatusChunk):
                        if message.status != "ack":
                            await self.note(request, "status", status=message.status)
                    elif isinstance(message, Query):
                        return self._asked(request, message)
        except (StreamStalledError, StreamMaxWaitExceededError) as exc:
            return self.respond(request, "failed", {"error": str(exc)}, error_code="TIMEOUT")
        except PromptRefused as exc:
            return self.respond(request, "failed", {"error": str(exc)},
                                error_code="INVALID_ARGUMENTS")
        except IdentityError as exc:
            return self.respond(request, "failed", {"error": str(exc)},
                                error_code="PERMISSION")
        except NatsAgentError as exc:  # an error frame, a closed client
            return self.respond(request, "failed", {"error": str(exc)},
                                error_code="AGENT_ERROR")
        result: dict[str, Any] = {"answer": "".join(answer)}
        if returned:
            result["attachments"] = returned
        return self.respond(request, "success", result)

    def _asked(self, request: TaskRequest, query: Query) -> TaskResponse:
        """A question mid-stream: the task is partial, its next step the same agent with
        the caller's answer as the text."""
        return self.respond(request, "partial", {
            "question": query.prompt,
            "next_steps": [{"intent": request.intent, "agent": self.agent_id,
                            "arguments": {"question": query.prompt}}]})


class ProtocolAgents:
    """Finds the protocol's agents every ``every`` seconds and fronts each (not ours)."""

    def __init__(self, runner: BridgeRunner, client: Agents, *, owner: str,
                 every: float) -> None:
        self.runner = runner
        self.client = client
        self.owner = owner
        self.every = every
        self.fronted: dict[str, ProtocolAgent] = {}
        self._loop: Background | None = None

    async def start(self) -> None:
        await self.scan()
        self._loop = repeating(self.scan, self.every, "protocol-agents")

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()
        for agent_id in list(self.fronted):
            await self.runner.unfront(agent_id)
        self.fronted.clear()

    async def scan(self) -> None:
        """Front the agents found now; stop fronting those missing twice in a row."""
        found: dict[str, SdkAgent] = {}
        for handle in await self.client.discover(stall=0.25, max_wait=1.5):
            if handle.owner == self.owner or not handle.session_name:
                continue  # ours, or a custom subject with no session token
            found.setdefault(sap_id(handle.agent, handle.owner, handle.session_name), handle)
        for agent_id, handle in found.items():
            known = self.fronted.get(agent_id)
            if known is not None:
                known.handle, known.misses = handle, 0
                continue
            agent = ProtocolAgent(handle)
            if not agent.capabilities:
                log.warning("protocol agent %s has no usable capability: not fronted",
                            handle.prompt_subject)
                continue
            try:
                await self.runner.front(agent)
            except Exception as exc:  # the core did not enrol it: tried at the next scan
                log.warning("protocol agent %s not fronted: %s: %s", agent_id,
                            type(exc).__name__, exc)
                continue
            self.fronted[agent_id] = agent
        for agent_id, agent in list(self.fronted.items()):
            if agent_id not in found:
                agent.misses += 1
                if agent.misses >= _MISSES:
                    del self.fronted[agent_id]
                    await self.runner.unfront(agent_id)

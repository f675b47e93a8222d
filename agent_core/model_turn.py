"""ModelTurn: one model call of a task, with the context it is given.

The context is the system message (instructions, the pinned plan, how much is archived,
the tools) and the conversation's window, within the token budget; a prompt the model
refuses as too long is shrunk once and sent again. The call is timed and its tokens
counted into the task's report.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

from . import tracing
from .attachments.view import shows_images, with_images, without_images
from .context.tokens import TokenCounter
from .context.window import WindowPolicy, fit
from .errors import ContextLengthError, ModelHTTPError
from .events import EventType
from .journal import Journal
from .messages import Message
from .models.base import ModelAdapter, ModelRequest, ModelResponse
from .prompt import REPAIR_PROMPT, system_message
from .run import LoopConfig, Run
from .toolcalls import VisibleStream

log = logging.getLogger(__name__)

#: What a task that was sent files has read, for the egress rule (as a private tool would).
SENT_FILES = "sent files"


class ModelTurn:
    """Assembles a run's context and calls the model with it."""

    def __init__(self, model: ModelAdapter, journal: Journal, counter: TokenCounter,
                 config: LoopConfig, *, tool_specs: Sequence[dict[str, Any]],
                 has_recall: bool) -> None:
        self.model = model
        self.journal = journal
        self.counter = counter
        self.config = config
        self.tool_specs = list(tool_specs)
        self.has_recall = has_recall
        #: The tools tagged private: their results in the window (of this task or one
        #: before it) are private data the task has read.
        self.private_tools: frozenset[str] = frozenset()
        self.native_tools = bool(getattr(model, "native_tools", True))
        #: Whether images are shown to the model (LLM_VISION; "auto" until it refuses one).
        self.sees_images = config.vision != "false"
        # The system message changes only with the plan and the archive's size: its count is
        # worth keeping (~0.1 ms of tokenizing per model call otherwise).
        self._system_tokens = functools.lru_cache(maxsize=256)(counter.count)

    async def call(self, run: Run) -> ModelResponse:
        """The model's reply to the run's context as it is now."""
        messages = await self.context(run, shrink=False)
        try:
            response = await self.complete_seeing(run, messages)
        except ContextLengthError:
            log.warning("context too long for the model; shrinking once and retrying")
            messages = await self.context(run, shrink=True)
            response = await self.complete_seeing(run, messages)
        await self.journal.settle(run)  # nothing acts on an answer to messages not yet stored
        return response

    async def complete_seeing(self, run: Run, messages: list[Message]) -> ModelResponse:
        """``complete``, with the images people sent shown to a model that sees them. With
        LLM_VISION=auto, a model that refuses an image (a 4xx naming images) is called
        again without them, and from then on is not shown any."""
        if not self.sees_images:
            return await self.complete(run, without_images(messages))
        shown = await with_images(messages)
        if not shows_images(shown):
            return await self.complete(run, shown)
        try:
            return await self.complete(run, shown)
        except ModelHTTPError as exc:
            if self.config.vision != "auto" or not 400 <= exc.status_code < 500 \
                    or exc.status_code == 429 or "image" not in exc.body.lower():
                raise
            log.warning("the model refused an image (HTTP %d); LLM_VISION=auto goes on "
                        "without images", exc.status_code)
            self.sees_images = False
            return await self.complete(run, without_images(messages))

    async def complete(self, run: Run, messages: list[Message]) -> ModelResponse:
        """One timed call, counted into the run's report."""
        request = ModelRequest(
            messages=messages, tools=self.tool_specs, temperature=self.config.temperature,
            max_tokens=self.config.max_tokens, stream=self.config.stream,
            on_event=_ModelEvents(run),
        )
        started = time.perf_counter()
        provider, _, name = str(getattr(self.model, "name", "")).rpartition(":")
        with tracing.span(f"chat {name}", {  # OpenTelemetry's GenAI conventions
                "gen_ai.operation.name": "chat", "gen_ai.request.model": name,
                "gen_ai.provider.name": provider, "hermes.round": run.state.round},
                kind="client") as span:
            try:
                response = await self.model.complete(request)
            finally:
                run.report.model_time += time.perf_counter() - started
                run.report.model_calls += 1
            span.set_attributes({
                "gen_ai.usage.input_tokens": response.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": response.usage.completion_tokens,
                "gen_ai.response.model": response.model or name,
                "hermes.tool_calls": len(response.tool_calls)})
        run.report.prompt_tokens += response.usage.prompt_tokens
        run.report.completion_tokens += response.usage.completion_tokens
        return response

    async def context(self, run: Run, *, shrink: bool) -> list[Message]:
        """The messages of the next model call: system message and window, in budget."""
        state = run.state
        snap = await self.journal.conversation(run, wait=False)
        system = system_message(
            instructions=self.config.system_prompt, plan=snap.plan, archived=snap.archived,
            has_recall=self.has_recall, tools=self.tool_specs,
            native_tools=self.native_tools)
        run.system_tokens = self._system_tokens(system) + 4
        window = snap.window
        if self.private_tools:
            read = {m.name for m in window if m.role == "tool" and m.name in self.private_tools}
            state.private_reads.extend(sorted(read - set(state.private_reads)))
        if SENT_FILES not in state.private_reads and any(m.parts for m in window):
            state.private_reads.append(SENT_FILES)  # files people send are private data
        budget = self.config.prompt_budget
        if shrink:
            policy = WindowPolicy(max_messages=max(4, self.config.max_context_messages // 2),
                                  budget_tokens=max(256, (budget - run.system_tokens) // 2))
            window = fit(window, policy, self.counter, task_id=state.task_id).keep
        if run.ephemeral:
            window = [dataclasses.replace(m, content=run.ephemeral[m.id])
                      if m.id in run.ephemeral else m for m in window]
            run.ephemeral.clear()
        used = run.system_tokens + sum(m.tokens for m in window)
        payload = {"tokens": used, "budget": budget, "messages": len(window) + 1,
                   "archived": snap.archived, "shrunk": shrink}
        run.emit(EventType.CONTEXT_UPDATED, payload)
        if used >= budget * self.config.context_warn_ratio:
            run.emit(EventType.CONTEXT_WARNING, payload)
        return [Message(role="system", content=system, kind="note"), *window]

    async def repair(self, text: str) -> str:
        """The model's own repair of an output the parser could not read."""
        response = await self.model.complete(ModelRequest(
            messages=[Message(role="system", content=REPAIR_PROMPT),
                      Message(role="user", content=text[:8000])],
            temperature=0.0, max_tokens=self.config.max_tokens))
        return response.text


class _ModelEvents:
    """The model adapter's events as the run's. Streamed text is what may be shown of the
    reply so far (never reasoning, tool-call markup or special tokens); a retry or a
    fallback starts the reply again."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.visible = VisibleStream()

    def __call__(self, name: str, payload: dict[str, Any]) -> None:
        if name == "MODEL_DELTA":
            text = self.visible.feed(str(payload.get("text") or ""))
            if not text:
                return
            payload = {**payload, "text": text}
        elif name in ("MODEL_RETRY", "MODEL_FALLBACK"):
            self.visible = VisibleStream()
        if name in EventType.__members__:
            self.run.emit(EventType[name], payload)

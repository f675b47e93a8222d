"""ModelTurn: one model call of a task, with the context it is given.

The context is the system message (instructions, the pinned plan, how much is archived,
the tools) and the conversation's window, within the token budget; a prompt the model
refuses as too long is shrunk once and sent again. The call is timed and its tokens
counted into the task's report. ``decide`` reads how the turn ended (``ModelResponse.stop``)
and gives each ending its own path: a refusal is the answer, a tool call cut at the token
limit is asked for again with a raised limit, never run with guessed arguments.

Every model call of a task (its turns, a replan, a repair) goes through ``ask``: with a
``Budget``, its worst case (the prompt as counted plus max_tokens) is reserved first, and
settled to the provider's usage after; a budget with no room raises BudgetExceeded before
anything is sent.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, assert_never

from . import tracing
from .attachments.view import shows_images, with_images, without_images
from .budget.base import Budget, Charge, Hold
from .context.tokens import TokenCounter
from .context.window import WindowPolicy, fit
from .decisions import AgentDecision
from .errors import (
    BudgetExceeded,
    ContextLengthError,
    ModelHTTPError,
    ModelModeratedError,
    ModelOutputCutOff,
    ModelPausedError,
    RuntimeFailure,
)
from .events import EventType
from .journal import Journal
from .messages import Message
from .models.base import ModelAdapter, ModelRequest, ModelResponse, Usage
from .parser import DecisionParser
from .prompt import REPAIR_PROMPT, system_message
from .replanner import Replanner
from .run import LoopConfig, Run
from .toolcalls import VisibleStream

log = logging.getLogger(__name__)

#: What a task that was sent files has read, for the egress rule (as a private tool would).
SENT_FILES = "sent files"
#: The answer when the model refused without saying anything (Anthropic's refusal stop
#: may come with no text and no explanation).
REFUSED = "The model declined to answer this request."
#: The answer when the provider's content filter withheld the output.
FILTERED = "The model provider's content filter withheld this answer."
#: The answer when the provider's moderation declined the request itself.
MODERATED = "The model provider's moderation declined this request."
#: How many times a turn whose tool call was cut at the output limit is asked for again,
#: each time with twice the limit.
MAX_RAISES = 2


class ModelTurn:
    """Assembles a run's context and calls the model with it."""

    def __init__(self, model: ModelAdapter, journal: Journal, counter: TokenCounter,
                 config: LoopConfig, *, tool_specs: Sequence[dict[str, Any]],
                 has_recall: bool, budget: Budget | None = None) -> None:
        self.model = model
        #: Reserves and settles each call (None: calls are not budgeted).
        self.budget = budget
        self.replanner = Replanner(model)
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
        #: Model calls of this runtime under way now (the console's "in flight").
        self.in_flight = 0

    async def decide(self, run: Run, parser: DecisionParser
                     ) -> tuple[ModelResponse, list[AgentDecision]]:
        """The model's turn and what it decides. Every way a turn ends has its path:

        - end, tool_calls: parsed (``parser``; repaired by the model when so configured)
        - refusal: the refusal is the answer, marked (``report.refusal``, rule "refusal")
        - content_filter (or the provider's moderation declining the request): the person is
          told the provider withheld the answer
        - length: a tool call cut at the limit is never run nor repaired: the model is
          asked again with twice the limit (at most ``MAX_RAISES`` times, within the context
          window), then ModelOutputCutOff; a plain answer cut there is given as it is
        - paused: the adapter continued it already; still paused is ModelPausedError
        """
        limit = cut_at = self.config.max_tokens
        tools: list[str] = []
        for raised in range(MAX_RAISES + 1):
            try:
                response = await self.call(run, max_tokens=limit)
            except ModelModeratedError as exc:
                log.info("the provider's moderation declined the request: %s", exc)
                run.report.refusal = "content_filter"
                return ModelResponse(model=self.model.name, stop="content_filter"), [
                    AgentDecision(type="final_answer", content=MODERATED,
                                  rule="content_filter")]
            except ModelHTTPError as exc:
                if raised and exc.status_code == 400:  # the raised limit is refused
                    raise ModelOutputCutOff(cut_at, tools) from exc
                raise
            match response.stop:
                case "end" | "tool_calls":
                    repair = self.repairer(run) if self.config.repair_with_model else None
                    return response, await parser.parse_with_repair(response, repair)
                case "refusal":
                    run.report.refusal = "refusal"
                    return response, [AgentDecision(
                        type="final_answer", content=response.text.strip() or REFUSED,
                        rule="refusal")]
                case "content_filter":
                    run.report.refusal = "content_filter"
                    return response, [AgentDecision(type="final_answer", content=FILTERED,
                                                    rule="content_filter")]
                case "paused":
                    raise ModelPausedError(self.model.name, 0)
                case "length":
                    decisions = parser.parse(response)  # never repaired: it would guess
                    if not response.tool_calls and all(d.type != "invalid"
                                                       for d in decisions):
                        return response, decisions  # an answer cut short, given as it is
                    tools = [c.name for c in response.tool_calls]
                    bigger = min(limit * 2, self.config.context_tokens - run.prompt_tokens)
                    if raised == MAX_RAISES or bigger <= limit:
                        raise ModelOutputCutOff(limit, tools)
                    log.warning("the model's output was cut at %d tokens inside a tool call; "
                                "asking again with %d", limit, bigger)
                    run.emit(EventType.MODEL_RETRY, {
                        "reason": "output cut at the token limit", "max_tokens": bigger,
                        "attempt": raised + 1, "tools": tools})
                    cut_at, limit = limit, bigger
                case unknown:
                    assert_never(unknown)
        raise AssertionError("unreachable")  # the last pass returns or raises

    async def call(self, run: Run, *, max_tokens: int | None = None) -> ModelResponse:
        """The model's reply to the run's context as it is now."""
        messages = await self.context(run, shrink=False)
        try:
            response = await self.complete_seeing(run, messages, max_tokens=max_tokens)
        except ContextLengthError:
            log.warning("context too long for the model; shrinking once and retrying")
            messages = await self.context(run, shrink=True)
            response = await self.complete_seeing(run, messages, max_tokens=max_tokens)
        await self.journal.settle(run)  # nothing acts on an answer to messages not yet stored
        return response

    async def complete_seeing(self, run: Run, messages: list[Message], *,
                              max_tokens: int | None = None) -> ModelResponse:
        """``complete``, with the images people sent shown to a model that sees them. With
        LLM_VISION=auto, a model that refuses an image (a 4xx naming images) is called
        again without them, and from then on is not shown any."""
        if not self.sees_images:
            return await self.complete(run, without_images(messages), max_tokens=max_tokens)
        shown = await with_images(messages)
        if not shows_images(shown):
            return await self.complete(run, shown, max_tokens=max_tokens)
        try:
            return await self.complete(run, shown, max_tokens=max_tokens)
        except ModelHTTPError as exc:
            if self.config.vision != "auto" or not 400 <= exc.status_code < 500 \
                    or exc.status_code == 429 or "image" not in exc.body.lower():
                raise
            log.warning("the model refused an image (HTTP %d); LLM_VISION=auto goes on "
                        "without images", exc.status_code)
            self.sees_images = False
            return await self.complete(run, without_images(messages), max_tokens=max_tokens)

    async def complete(self, run: Run, messages: list[Message], *,
                       max_tokens: int | None = None) -> ModelResponse:
        """One timed call, counted into the run's report."""
        request = ModelRequest(
            messages=messages, tools=self.tool_specs, temperature=self.config.temperature,
            max_tokens=max_tokens or self.config.max_tokens, stream=self.config.stream,
            on_event=_ModelEvents(run),
        )
        # The prompt's tokens as counted: the system message and the window.
        prompt = run.system_tokens + sum(m.tokens for m in messages[1:])
        provider, _, name = str(getattr(self.model, "name", "")).rpartition(":")
        with tracing.span(f"chat {name}", {  # OpenTelemetry's GenAI conventions
                "gen_ai.operation.name": "chat", "gen_ai.request.model": name,
                "gen_ai.provider.name": provider, "hermes.round": run.state.round},
                kind="client") as span:
            response = await self.ask(run, request, prompt)
            span.set_attributes({
                "gen_ai.usage.input_tokens": response.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": response.usage.completion_tokens,
                "gen_ai.response.model": response.model or name,
                "hermes.tool_calls": len(response.tool_calls)})
        run.report.prompt_tokens += response.usage.prompt_tokens
        run.report.completion_tokens += response.usage.completion_tokens
        return response

    async def ask(self, run: Run, request: ModelRequest, prompt_tokens: int | None = None
                  ) -> ModelResponse:
        """The model's answer to ``request``, timed into the run's report and, with a
        budget, reserved before and settled after (``prompt_tokens``: as counted; the
        request's messages are counted when not given)."""
        hold = await self._reserve(run, request, prompt_tokens)
        started = time.perf_counter()
        self.in_flight += 1
        try:
            response = await self.model.complete(request)
        except BaseException as exc:
            self._called(run, started, None, type(exc).__name__)
            if hold is not None and self.budget is not None:
                await self.budget.settle(hold, None)  # nothing answered: nothing charged
            raise
        self._called(run, started, response, "")
        if hold is not None and self.budget is not None:
            usage = response.usage
            if not usage.prompt_tokens and not usage.completion_tokens:
                # A provider that reports no usage: what was counted, and the answer's text.
                usage = Usage(hold.charge.prompt_tokens, self.counter.count(response.text))
            await self.budget.settle(hold, usage, model=response.model)
        return response

    async def _reserve(self, run: Run, request: ModelRequest, prompt_tokens: int | None
                       ) -> Hold | None:
        if self.budget is None:
            return None
        state = run.state
        if prompt_tokens is None:
            prompt_tokens = sum(self.counter.count(m.content) + 4 for m in request.messages)
        extra = state.extra
        charge = Charge(
            task_id=state.task_id, user_id=state.user_id, conversation_id=state.conversation_id,
            role=state.role, model=str(getattr(self.model, "name", "")),
            prompt_tokens=prompt_tokens, max_tokens=request.max_tokens,
            channel=_text(extra.get("channel")), schedule=_text(extra.get("job_id")),
            agent=_text(extra.get("agent_id")), started=run.report.model_calls > 0,
            extra=extra)
        try:
            return await self.budget.reserve(charge)
        except BudgetExceeded as exc:
            state.budget = exc.overrun
            raise

    async def replan(self, run: Run, why: str) -> None:
        """Ask the model for a short plan of the task and pin it (a failed call skips it)."""
        snap = await self.journal.conversation(run)  # the plan is about to change
        try:
            plan = await self.replanner.summarise(
                snap.window, run.state.instruction,
                ask=lambda request: self.ask(run, request))
        except BudgetExceeded:
            raise
        except RuntimeFailure as exc:
            log.info("replanning skipped: %s", exc)
            return
        if plan:
            await self.journal.store.set_plan(run.state.conversation_id, plan)
            run.emit(EventType.PLAN_UPDATED, {"plan": plan, "why": why})

    def _called(self, run: Run, started: float, response: ModelResponse | None,
                error: str) -> None:
        """Count a call that ended (answered, or ``error``) and tell it (MODEL_CALLED)."""
        self.in_flight -= 1
        seconds = time.perf_counter() - started
        run.report.model_time += seconds
        run.report.model_calls += 1
        usage = response.usage if response is not None else None
        run.emit(EventType.MODEL_CALLED, {
            "model": str(getattr(self.model, "name", "")), "seconds": round(seconds, 6),
            "ok": response is not None,
            "prompt_tokens": usage.prompt_tokens if usage else 0,
            "completion_tokens": usage.completion_tokens if usage else 0,
            **({"error": error} if error else {})})

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
        run.prompt_tokens = used
        payload = {"tokens": used, "budget": budget, "messages": len(window) + 1,
                   "archived": snap.archived, "shrunk": shrink}
        run.emit(EventType.CONTEXT_UPDATED, payload)
        if used >= budget * self.config.context_warn_ratio:
            run.emit(EventType.CONTEXT_WARNING, payload)
        return [Message(role="system", content=system, kind="note"), *window]

    def repairer(self, run: Run) -> Callable[[str], Awaitable[str]]:
        """The model's own repair of an output the parser could not read, for ``run``."""

        async def repair(text: str) -> str:
            response = await self.ask(run, ModelRequest(
                messages=[Message(role="system", content=REPAIR_PROMPT),
                          Message(role="user", content=text[:8000])],
                temperature=0.0, max_tokens=self.config.max_tokens))
            return response.text

        return repair


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


def _text(value: Any) -> str | None:
    return str(value) if value else None

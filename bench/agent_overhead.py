"""The agent runtime's own cost per step.

A step is one round: build the context, call the model, parse its decision, run the tool
through the executor's policy chain, record the result, emit the events. The model answers
instantly in-process and the tool does nothing, so what is measured is the runtime alone,
at a 50-message context.

    .venv/bin/python bench/agent_overhead.py [--steps 2000] [--counter tiktoken|estimate]

Target on the reference machine (2 cores): median < 1 ms per step.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time

from agent_core import (
    EventBus,
    EventType,
    LoopConfig,
    TaskLoop,
    TaskRequest,
    ToolExecutor,
    ToolRegistry,
    tool,
)
from agent_core.context import EstimateCounter, TiktokenCounter, message_tokens
from agent_core.messages import Message, ToolCall
from agent_core.models import ModelAdapter, ModelRequest, ModelResponse, RawToolCall, Usage
from agent_core.store import MemoryConversationStore

CONTEXT_MESSAGES = 50


@tool
def noop(n: int) -> str:
    """Does nothing."""
    return "ok"


class InstantModel(ModelAdapter):
    """Answers at once: a tool call per round, then a final answer."""

    name = "instant"
    native_tools = True

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls >= self.rounds:
            return ModelResponse(text="done", usage=Usage(50, 5))
        return ModelResponse(tool_calls=[RawToolCall("noop", '{"n": 1}', f"c{self.calls}")],
                             usage=Usage(50, 5))


async def prefill(store: MemoryConversationStore, counter: object) -> None:
    history: list[Message] = []
    for i in range(CONTEXT_MESSAGES // 2):
        call = ToolCall(f"old{i}", "noop", {"n": i})
        history.append(Message(role="assistant", kind="decision", tool_calls=[call]))
        history.append(Message(role="tool", kind="observation", tool_call_id=call.id,
                               name="noop", content=f"result {i} " * 8))
    for m in history:
        m.tokens = message_tokens(counter, m)  # type: ignore[arg-type]
    await store.append("bench", history)


async def measure(steps: int, counter_name: str) -> list[float]:
    counter = TiktokenCounter() if counter_name == "tiktoken" else EstimateCounter()
    store = MemoryConversationStore()
    await prefill(store, counter)
    bus = EventBus()
    stamps: list[float] = []
    bus.subscribe(lambda e: stamps.append(time.perf_counter()), EventType.PLANNER_DECISION)
    loop = TaskLoop(
        model=InstantModel(steps + 1), executor=ToolExecutor(ToolRegistry([noop])),
        store=store, bus=bus, counter=counter,
        # evict_to=1.0 keeps the window at 50 messages every step (eviction included),
        # the worst case for the runtime's own cost.
        config=LoopConfig(max_rounds=steps + 5, replan_every=0, evict_to=1.0,
                          max_context_messages=CONTEXT_MESSAGES, task_timeout=600))
    result = await loop.run(TaskRequest(text="go", conversation_id="bench"))
    assert result.outcome == "answered", result.text
    window = (await store.snapshot("bench")).window
    assert len(window) >= CONTEXT_MESSAGES - 2, len(window)
    return [(b - a) * 1e6 for a, b in itertools.pairwise(stamps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--counter", choices=["tiktoken", "estimate"], default="tiktoken")
    args = parser.parse_args()
    asyncio.run(measure(200, args.counter))  # warm-up: imports, caches
    per_step = asyncio.run(measure(args.steps, args.counter))
    per_step.sort()
    p99 = per_step[int(len(per_step) * 0.99) - 1]
    print(f"agent runtime overhead per step ({args.steps} steps, {CONTEXT_MESSAGES}-message "
          f"context, counter={args.counter}):")
    print(f"  median {statistics.median(per_step):8.1f} us")
    print(f"  p99    {p99:8.1f} us")
    print(f"  mean   {statistics.fmean(per_step):8.1f} us")
    print("  target: median < 1000 us")


if __name__ == "__main__":
    main()

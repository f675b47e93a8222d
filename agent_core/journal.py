"""Journal: how a task's steps reach the store.

Every step appends its messages together with the task's state, in one atomic store call,
so that a paused or interrupted task resumes in any process from where it was. Three
refinements keep that to one round trip per step:

- an append before a model call reads the conversation back in the same call (the next
  model call's context);
- a new task's first append, when the caller already read the conversation (the gateway's
  queue reads it with the message), runs *behind* the first model call: that call uses the
  conversation as read plus the new messages, and every later step waits for the write
  (``settle``) and fails the task if it failed;
- a window over its limits is evicted (and archived) down to a low-water mark, so that a
  full window is rewritten every few messages rather than on every one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from .context.tokens import TokenCounter, message_tokens
from .context.window import WindowPolicy, fit
from .messages import Message
from .run import LoopConfig, Run
from .store.base import ConversationStore, Snapshot, WindowSize
from .task import TaskState


class Journal:
    """Writes a run's messages and state; reads its conversation for the next step."""

    def __init__(self, store: ConversationStore, counter: TokenCounter,
                 config: LoopConfig) -> None:
        self.store = store
        self.counter = counter
        self.config = config

    async def append(self, run: Run, messages: list[Message], *,
                     read_back: bool = False) -> None:
        """Store messages with the task's state; ``read_back`` when a model call comes next,
        so that its read of the conversation rides on the same round trip."""
        await self.settle(run)
        state = self._stamp(run, messages)
        run.snapshot = None
        if read_back:
            size, run.snapshot = await self.store.append_and_read(
                state.conversation_id, messages, task=state)
        else:
            size = await self.store.append(state.conversation_id, messages, task=state)
        await self._evict_if_over(run, size)

    async def append_behind(self, run: Run, messages: list[Message],
                            conversation: Snapshot) -> None:
        """Store messages while the next model call is under way: that call reads
        ``conversation`` (as the caller read it) plus them, and ``settle`` waits for the
        write before anything else touches the store. Saves the round trip in front of a
        new task's first model call."""
        state = self._stamp(run, messages)
        run.snapshot = dataclasses.replace(conversation,
                                           window=[*conversation.window, *messages])
        # A copy: the state moves on (its round) before the write's coroutine first runs.
        behind = asyncio.ensure_future(self.store.append(
            state.conversation_id, messages, task=state.model_copy()))
        behind.add_done_callback(_retrieved)  # a failure is raised by settle, not logged
        run.behind = behind
        await self._evict_if_over(run, WindowSize(len(run.snapshot.window),
                                                  run.snapshot.tokens))  # settles first

    async def settle(self, run: Run) -> None:
        """Wait for an append still under way; raises what it failed with."""
        behind, run.behind = run.behind, None
        if behind is not None:
            await behind

    async def conversation(self, run: Run, *, wait: bool = True) -> Snapshot:
        """The conversation as it is now: the one the last append read back, if nothing
        changed it since, else read. ``wait=False``: a write still under way is not waited
        for when the conversation read with the request (plus it) is at hand."""
        if wait or run.snapshot is None:
            await self.settle(run)
        snap = run.snapshot or await self.store.snapshot(run.state.conversation_id)
        run.snapshot = None  # the caller is about to change or use it
        return snap

    async def save(self, run: Run) -> None:
        """Store the task's state alone (its final state, when no message ends it)."""
        await self.settle(run)
        state = run.state
        state.report = run.report.to_dict()
        state.updated_at = time.time()
        await self.store.save_task(state)

    def _stamp(self, run: Run, messages: list[Message]) -> TaskState:
        """Ready messages and the task's state for storing; returns the state."""
        state = run.state
        for m in messages:
            m.task_id = state.task_id
            m.round = state.round
            m.tokens = message_tokens(self.counter, m)
        state.report = run.report.to_dict()
        state.updated_at = time.time()
        return state

    async def _evict_if_over(self, run: Run, size: WindowSize) -> None:
        budget = self.config.prompt_budget - run.system_tokens
        if size.messages > self.config.max_context_messages or size.tokens > budget:
            await self._evict(run, budget)

    async def _evict(self, run: Run, budget: int) -> None:
        snap = await self.conversation(run)  # the window is about to change
        # Evict down to a low-water mark, so that a full window is rewritten every few
        # messages rather than on every one.
        low = self.config.evict_to
        policy = WindowPolicy(max_messages=max(4, int(self.config.max_context_messages * low)),
                              budget_tokens=max(256, int(budget * low)),
                              warn_ratio=self.config.context_warn_ratio)
        eviction = fit(snap.window, policy, self.counter, task_id=run.state.task_id)
        if eviction.changed:
            await self.store.rewrite_window(run.state.conversation_id, eviction.keep,
                                            eviction.archive, base=[m.id for m in snap.window])


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a background write's failure as seen (it is raised where it is awaited)."""
    if not future.cancelled():
        future.exception()

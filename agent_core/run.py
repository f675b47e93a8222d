"""One drive of a task (``Run``) and the limits every drive keeps (``LoopConfig``).

A ``Run`` is what the loop's parts share while they drive a task: its persisted state and
report, what lives only in this process (failure counts, the conversation as last read,
a write still under way) and the bus its events go to.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .events import Event, EventBus, EventType
from .messages import Message
from .report import TaskReport
from .store.base import Snapshot
from .task import RuntimeState, TaskControl, TaskState

if TYPE_CHECKING:
    from .settings import Settings


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Limits and switches of the loop (from settings, or given directly)."""

    max_rounds: int = 15
    max_invalid: int = 3
    task_timeout: float = 300.0
    replan_every: int = 5
    temperature: float = 0.1
    max_tokens: int = 2048
    stream: bool = False
    context_tokens: int = 32_000
    context_margin: float = 0.05
    max_context_messages: int = 20
    context_warn_ratio: float = 0.8
    max_observation_tokens: int = 2_000
    system_prompt: str | None = None
    repair_with_model: bool = False
    #: What a task does when the store cannot be reached: "fail" ends it failed with a
    #: plain sentence (a CLI run); "raise" lets StoreUnavailableError out, saving nothing,
    #: for a caller that waits for the store and continues the task (the gateway).
    on_store_outage: Literal["fail", "raise"] = "fail"
    #: Share of the limits a full window is evicted down to.
    evict_to: float = 0.6
    #: Whether images people send are shown to the model (LLM_VISION): "auto" shows them
    #: until the model refuses one.
    vision: Literal["auto", "true", "false"] = "auto"

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> LoopConfig:
        """A config from the loaded settings."""
        values: dict[str, Any] = {
            "max_rounds": settings.agent_max_round,
            "max_invalid": settings.agent_max_invalid,
            "task_timeout": settings.agent_task_timeout,
            "replan_every": settings.agent_replan_every,
            "temperature": settings.llm_temperature,
            "max_tokens": settings.llm_max_tokens,
            "stream": settings.llm_stream,
            "context_tokens": settings.llm_context_tokens,
            "system_prompt": settings.agent_system_prompt,
            "repair_with_model": settings.llm_repair_with_model,
            "vision": settings.llm_vision,
        }
        for name in ("max_context_messages", "context_warn_ratio", "max_observation_tokens",
                     "context_margin"):
            if hasattr(settings, name):
                values[name] = getattr(settings, name)
        values.update(overrides)
        return cls(**values)

    @property
    def prompt_budget(self) -> int:
        """Tokens the prompt may use: the context minus the answer and a safety margin."""
        return int(self.context_tokens * (1 - self.context_margin)) - self.max_tokens


@dataclass(slots=True)
class Run:
    """One drive of a task: persisted state plus what lives only in this process."""

    state: TaskState
    report: TaskReport
    bus: EventBus
    runtime: RuntimeState = field(default_factory=RuntimeState)
    control: TaskControl | None = None
    #: Tool outputs shown to the model once and not kept (context_policy "drop").
    ephemeral: dict[str, str] = field(default_factory=dict)
    system_tokens: int = 1_500
    #: Tokens of the last prompt sent (system message and window, as counted).
    prompt_tokens: int = 0
    #: Messages that end the task, stored together with its final state (one round trip).
    closing: list[Message] = field(default_factory=list)
    #: The conversation as read back by the last append, for the next model call (None
    #: once used, or when something may have changed it since).
    snapshot: Snapshot | None = None
    #: An append still under way (the first one, when the conversation came with the
    #: request); every later store step waits for it first (``Journal.settle``).
    behind: asyncio.Future[Any] | None = None

    def emit(self, type_: EventType, payload: dict[str, Any]) -> None:
        """An event of this task, at its current round."""
        self.bus.emit(Event(type_, self.state.trace_id, self.state.conversation_id,
                            self.state.round, payload, task_id=self.state.task_id))

"""Live replies: the steps a chat platform offers for showing a reply while it is written,
and which of them may be repeated safely.

The gateway owns each reply's state machine (``gateway/live.py``: draft or stream, then the
final answer, kept in the store so another replica can finish it) and decides every retry
and every reconciliation; a ``LiveChannel`` only performs the one step it is asked for and
says, through ``DeliveryError.applied``, whether a failed step may have been carried out
anyway. The steps:

==========  ============================================================================
open        show that an answer is coming: a stream started, a message posted to edit
append      the text so far (or the new part of it) and the steps taken
stop        end a stream, with the rest of the answer (``stop_stream``)
edit        replace a message held by its ref with a part of the final answer
post        post a part of a reply (the one step that may show something twice)
find        look for a part posted before by its delivery tag (after an unanswered post)
status      what the agent is doing now ("is checking the sales data…"), or clear it
discard     remove the message an answer was shown in (an approval replaces it)
==========  ============================================================================
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from .base import Channel, OutboundMessage

#: How a reply is shown while it is written, on one target:
#: - stream: the platform's own streaming message (Slack chat.startStream)
#: - edit: one message posted, then edited in place, paced
#: - draft: an ephemeral draft (Telegram sendMessageDraft), then the answer posted once
#: - final: nothing until the answer
LiveMode = Literal["stream", "edit", "draft", "final"]
Primitive = Literal["open", "append", "stop", "edit", "post", "find", "status", "discard"]
StepStatus = Literal["in_progress", "complete", "error"]
#: The part number a live message's tag carries (a streamed or edited message, before it
#: holds the answer's first part).
LIVE_PART = -1


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the agent's work, as a platform's task display shows it."""

    id: str
    title: str
    status: StepStatus


@dataclass(frozen=True, slots=True)
class Tag:
    """What a posted message carries to be found again: its reply and part."""

    delivery: str
    part: int


@dataclass(slots=True)
class Display:
    """What a live message shows now: the answer's text so far, the steps and the status
    line; ``delta`` and ``steps_new`` are what changed since the last append."""

    text: str = ""
    delta: str = ""
    steps: list[Step] = field(default_factory=list)
    steps_new: list[Step] = field(default_factory=list)
    line: str = ""
    #: The agent's plan, in a line (empty: none), and whether it changed since the last
    #: append.
    plan: str = ""
    plan_new: bool = False
    #: The task's first sign of life was a step (a tool), not text: a stream shows its
    #: steps as a plan; one that began writing, as a timeline.
    began_with_steps: bool = False


class LiveChannel(Channel):
    """A channel whose replies the gateway shows live and delivers exactly once."""

    #: The primitives that may be repeated with the same effect, per mode (the gateway
    #: retries these after an unanswered request; the others it reconciles first).
    idempotent: ClassVar[dict[LiveMode, frozenset[Primitive]]] = {}
    #: What a ref of this channel holds the message's identity in (Slack's ``ts``).
    ref_key: ClassVar[str] = "ts"

    @abc.abstractmethod
    def live_mode(self, target: dict[str, Any]) -> LiveMode:
        """How replies to ``target`` are shown while written."""

    def interval(self, mode: LiveMode) -> float:
        """The least time between two appends to one live reply."""
        return 1.0

    def no_stream_in(self, where: str) -> None:
        """A stream could not be started in ``where`` (a channel): use another mode
        there from now on."""

    def opens_at_start(self, mode: LiveMode) -> bool:
        """Whether the live message is opened when the task starts (a "working" message),
        rather than with the first text or step."""
        return False

    @abc.abstractmethod
    def split(self, message: OutboundMessage) -> list[str]:
        """The texts of the messages ``message`` is posted as (the platform's limits)."""

    @abc.abstractmethod
    async def post(self, message: OutboundMessage, part: int, *, tag: Tag,
                   repeat: bool = False) -> dict[str, Any]:
        """Post part ``part`` of ``message`` (the last one with its buttons), carrying
        ``tag`` where the platform can; ``repeat``: it may repeat a message posted before,
        and says so. Returns its ref."""

    async def find(self, target: dict[str, Any], tag: Tag, *,
                   known: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """The ref of the message posted with ``tag`` (for ``LIVE_PART``: a live message
        opened for that reply, not one of ``known``), or None when there is none.
        NotImplementedError: the platform cannot tell."""
        raise NotImplementedError

    async def open(self, target: dict[str, Any], mode: LiveMode, display: Display, *,
                   tag: Tag) -> dict[str, Any] | None:
        """Show that an answer is coming, as ``mode`` does; the ref of the live message
        (None for a draft, which has none)."""
        raise NotImplementedError

    async def append(self, ref: dict[str, Any] | None, target: dict[str, Any],
                     mode: LiveMode, display: Display, *, tag: Tag) -> None:
        """Bring the live reply up to ``display``."""
        raise NotImplementedError

    async def stop_stream(self, ref: dict[str, Any], message: OutboundMessage, *,
                          rest: str | None, tag: Tag, display: Display | None = None) -> None:
        """End the stream at ``ref``: ``rest`` is the text still to add to it (None: it
        is ended as it is); ``display``'s changes since the last append (a tool that
        finished, a plan pinned, as the answer came) and the last part's buttons and
        ``tag`` go with it."""
        raise NotImplementedError

    @abc.abstractmethod
    async def edit(self, ref: dict[str, Any], message: OutboundMessage, part: int, *,
                   tag: Tag) -> None:
        """Make the message at ``ref`` show part ``part`` of ``message``."""

    async def status(self, target: dict[str, Any], line: str | None) -> None:
        """Say what the agent is doing (None: it has stopped)."""
        raise NotImplementedError

    async def discard(self, ref: dict[str, Any]) -> None:
        """Remove the message at ``ref`` (gone already: done)."""
        raise NotImplementedError

    async def send(self, message: OutboundMessage) -> dict[str, Any] | None:
        """Every part posted in turn (no reconciliation: the gateway's deliverer uses
        ``post`` and ``find`` itself); the last part's ref."""
        ref: dict[str, Any] | None = None
        for part in range(len(self.split(message))):
            ref = await self.post(message, part, tag=Tag(message.task_id or "-", part))
        return ref

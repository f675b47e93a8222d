"""What to do with a task when its work comes up: the task state machine.

A unit of work names a task and, for an approval, carries the human's decision. It comes
up when a worker takes it, the first time or again after a worker died. What to do then
follows from the work's kind, the task's stored state and the conversation's waiting
task (one that asked the user a question)::

    work        stored state of the task               step
    approval    (any)                                  ApplyApproval
    scheduled   none yet, or queued                    Start(unattended=True)
    any         cancelled before its first round       Skip
    any         running                                Recover    (its process died)
    any         ended or paused                        Redeliver  (done before a crash)
    message     none or queued; a question waits for   AnswerWaiting(that task)
                its sender
    message     none or queued                         Start

The gateway's workers carry the step out (``match`` on it, ending in ``assert_never``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .task import ACTIVE, TaskState

#: What a unit of work asks for: a message to answer, a decision to apply to a paused
#: task, a scheduled job's run.
WorkKind = Literal["message", "approval", "scheduled", "workflow"]


@dataclass(frozen=True, slots=True)
class Start:
    """Start the task (``unattended``: nobody can be asked; a scheduled run)."""

    unattended: bool = False


@dataclass(frozen=True, slots=True)
class ApplyApproval:
    """Resume the paused task with the human's decision the work carries."""


@dataclass(frozen=True, slots=True)
class AnswerWaiting:
    """The message answers the question task ``task_id`` asked: resume that task."""

    task_id: str


@dataclass(frozen=True, slots=True)
class Recover:
    """Continue the task from its last stored step (the process running it died)."""


@dataclass(frozen=True, slots=True)
class Redeliver:
    """The task ended (or paused) before its reply was known to be delivered: send the
    reply it stored again, without running anything."""

    state: TaskState


@dataclass(frozen=True, slots=True)
class Skip:
    """Nothing to do: the task was cancelled before it started."""


Step = Start | ApplyApproval | AnswerWaiting | Recover | Redeliver | Skip


def next_step(kind: WorkKind, stored: TaskState | None, waiting: TaskState | None, *,
              sender: str | None = None) -> Step:
    """The step for work of ``kind`` on a task stored as ``stored`` (None: never stored),
    in a conversation whose waiting task is ``waiting``, sent by ``sender`` (channel:user).
    A question is answered only by the person it asked: in a group, another member's
    message is a task of their own (it would resume the asker's task in the asker's role)."""
    if kind == "approval":
        return ApplyApproval()
    if stored is not None and stored.status not in ACTIVE:
        if stored.status == "cancelled" and stored.round == 0:
            return Skip()
        return Redeliver(stored)
    if stored is not None and stored.status == "running":
        return Recover()
    if kind == "scheduled":
        return Start(unattended=True)
    if kind == "workflow":  # a run of a hub workflow: never the answer to a question
        return Start()
    if waiting is not None and waiting.status == "asked_user" \
            and (sender is None or waiting.user_id == sender):
        return AnswerWaiting(waiting.task_id)
    return Start()

"""Sections of ``Keys`` that live in one slot each and need nothing of its layout: the
operator's console's keys and the A2A edge's (``keys.py`` says how every key is built)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConsoleKeys:
    """What the operator's console reads (``gateway.activity`` writes it): the live feed,
    an index of recent and open tasks, who spoke in which conversation, per-minute and
    per-day figures, and the serving processes. One hash tag: one slot."""

    prefix: str

    def feed(self) -> str:
        """STREAM of what happened (tasks changing state, audit entries, dead letters):
        the console's live event stream."""
        return f"{self.prefix}:{{console}}:feed"

    def tasks(self) -> str:
        """ZSET: task id -> when it last changed (the last day's)."""
        return f"{self.prefix}:{{console}}:tasks"

    def open(self) -> str:
        """SET of the task ids queued, running or waiting for a person."""
        return f"{self.prefix}:{{console}}:open"

    def people(self) -> str:
        """ZSET: JSON [user, conversation id] -> when that user last spoke there."""
        return f"{self.prefix}:{{console}}:people"

    def minute(self, minute: int) -> str:
        """HASH of one minute's figures (tasks, model calls and seconds, errors, dead
        letters, the queue), ``minute`` in minutes since 1970; expires after two hours."""
        return f"{self.prefix}:{{console}}:minute:{minute}"

    def usage(self, day: str) -> str:
        """HASH of one UTC day's (YYYYMMDD) tokens by user, channel and model."""
        return f"{self.prefix}:{{console}}:usage:{day}"

    def processes(self) -> str:
        """HASH: serving process -> its figures now (JSON, with when they were written)."""
        return f"{self.prefix}:{{console}}:processes"


@dataclass(frozen=True, slots=True)
class A2AKeys:
    """The A2A edge's keys (``gateway.a2a_tasks``): each task, each caller's tasks of one
    agent (what ListTasks reads), each task's push notification configs."""

    prefix: str

    def task(self, task_id: str) -> str:
        """STRING: an A2A task as the edge keeps it (JSON: the task in ProtoJSON, its agent,
        its caller's principal, ...)."""
        return f"{self.prefix}:a2a:{task_id}"

    def listed(self, agent_id: str, principal: str) -> str:
        """ZSET: task id -> when it was made, of one principal's tasks of one agent (the
        principal hashed: a name of HERMES_API_KEYS may hold any character)."""
        digest = hashlib.sha256(principal.encode()).hexdigest()[:32]
        return f"{self.prefix}:a2a-list:{agent_id}:{digest}"

    def pushes(self, task_id: str) -> str:
        """HASH: push notification config id -> the config (JSON) of one task."""
        return f"{self.prefix}:a2a:{task_id}:push"

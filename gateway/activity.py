"""Activity: what the operator's console reads, written as it happens.

The gateway's events (a task queued, started, paused, finished; a model call; a tool call),
its audit entries and its dead letters become, in the store (``Keys.console``):

- the feed: one capped stream the console's live event stream follows, so a page sees
  what every replica does;
- an index of tasks: the last day's by when they last changed, and the open ones (queued,
  running, waiting for a person), which the overview reads back by id;
- who spoke where: (user, conversation) by last activity, for the conversation search;
- per-minute figures, kept two hours: tasks queued and started, tasks ended by outcome and
  channel (``outcome:<outcome>:<channel>``); model calls, their seconds and errors; tool
  calls and errors; dead letters; approvals asked; and, sampled, the conversations waiting
  and the age of the oldest;
- per-day tokens by user, channel and model, kept eight days.

Handlers only append to a list; the writer (``flush``, every quarter second) sends what
gathered in one pipeline, so neither a task nor a request waits on these writes, and a
store outage costs the console some figures, never a task. ``beat`` (every few seconds)
records this process's own figures (conversations it works on, model calls under way and
waiting) under its name, which the overview sums over the processes seen lately.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from adapters.base import InboundMessage, Routed
from agent_core import Event, EventType
from agent_core.store import Keys, store_boundary
from agent_core.task import PAUSED, TERMINAL, TaskState

log = logging.getLogger(__name__)

#: Entries the feed keeps (about: trimmed approximately).
FEED_LENGTH = 10_000
#: How long the task index and the (user, conversation) index remember.
INDEX_SECONDS = 86_400.0
MINUTE_TTL = 2 * 3600
USAGE_TTL = 8 * 86_400
#: Outcomes counted as failures (the error rate's numerator).
FAILED = frozenset({"failed", "limit", "invalid"})
_STATUS_OF = {EventType.AGENT_STARTED: "running", EventType.ASK_USER: "asked_user",
              EventType.HUMAN_CONFIRM_REQUIRED: "awaiting_approval"}
#: What an audit entry shows in the feed (never its arguments: the console reads those
#: from the audit log itself, for admins).
_AUDIT_FIELDS = ("type", "tool", "decision", "outcome", "action", "job_id", "approval_id",
                 "conversation_id", "task_id", "requester", "decided_by", "principal", "actor")

#: This process's figures now: ``active`` (conversations it works on), ``in_flight`` and
#: ``model_waiting`` (model calls), and the queue's ``waiting`` and ``oldest_seconds``.
Figures = Callable[[], Awaitable[dict[str, Any]]]


def channel_of(conversation_id: str) -> str:
    """The channel a conversation id names (``slack:T1:C9`` -> ``slack``)."""
    return conversation_id.partition(":")[0] or "unknown"


def minute_of(ts: float) -> int:
    """Minutes since 1970 of a Unix time."""
    return int(ts // 60)


@dataclass(slots=True)
class _Pending:
    """What the writer has not sent yet."""

    feed: list[dict[str, Any]] = field(default_factory=list)
    #: task id -> (when it changed, still open)
    tasks: dict[str, tuple[float, bool]] = field(default_factory=dict)
    people: dict[tuple[str, str], float] = field(default_factory=dict)
    #: (minute, field) -> amount
    counts: dict[tuple[int, str], float] = field(default_factory=dict)
    #: (day, field) -> tokens; field "user|<identity>" with identity None until read
    tokens: list[tuple[str, str, str | None, str, int]] = field(default_factory=list)

    def count(self, ts: float, name: str, amount: float = 1.0) -> None:
        key = (minute_of(ts), name)
        self.counts[key] = self.counts.get(key, 0.0) + amount


@store_boundary
class Activity:
    """An EventBus subscriber (and router, audit and dead-letter listener) that records
    what the console shows; ``flush`` and ``beat`` run in the background."""

    def __init__(self, redis: Redis, prefix: str, *, figures: Figures | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.redis = redis
        self.keys = Keys.of(redis, prefix).console
        self._task_key = Keys.of(redis, prefix).task
        self.figures = figures
        self.clock = clock
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._pending = _Pending()
        #: task id -> the identity (channel:user) it runs for, while it runs here.
        self._who: dict[str, str] = {}
        #: The last write failed (the store is out): the next failures are not warned of.
        self._failing = False

    # --- what happens ------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        """EventBus handler."""
        kind, task_id, payload = event.type, event.task_id, event.payload
        if kind == EventType.REPLY_UNDELIVERABLE:  # a task's or not (a notice)
            self._dead(event)
            return
        if not task_id:
            return
        now, pending = event.timestamp, self._pending
        cid = event.conversation_id
        match kind:
            case EventType.AGENT_STARTED | EventType.ASK_USER | \
                    EventType.HUMAN_CONFIRM_REQUIRED:
                status = _STATUS_OF[kind]
                if kind == EventType.AGENT_STARTED and not payload.get("resumed"):
                    pending.count(now, "started")
                    user = str(payload.get("user_id") or "")  # an identity: channel:user
                    if user:
                        self._who[task_id] = user
                        pending.people[(user, cid)] = now
                if kind == EventType.HUMAN_CONFIRM_REQUIRED:
                    pending.count(now, "approvals")
                self._task(task_id, cid, status, now, tool=payload.get("tool_name"))
            case EventType.AGENT_FINISHED:
                outcome = str(payload.get("outcome") or "unknown")
                if outcome in TERMINAL:
                    pending.count(now, f"outcome:{outcome}:{channel_of(cid)}")
                # Ended or paused: a resumed run (here or elsewhere) reads whom it is for
                # from its state, so nothing here outlives the run.
                self._who.pop(task_id, None)
                self._task(task_id, cid, outcome, now)
            case EventType.MODEL_CALLED:
                pending.count(now, "model_calls")
                pending.count(now, "model_seconds", float(payload.get("seconds") or 0.0))
                if not payload.get("ok"):
                    pending.count(now, "model_errors")
                tokens = int(payload.get("prompt_tokens") or 0) + \
                    int(payload.get("completion_tokens") or 0)
                if tokens:
                    pending.tokens.append((_day(now), task_id, self._who.get(task_id),
                                           f"channel|{channel_of(cid)}", tokens))
                    pending.tokens.append((_day(now), task_id, None,
                                           f"model|{payload.get('model') or 'unknown'}",
                                           tokens))
            case EventType.TOOL_FINISHED:
                pending.count(now, "tool_calls")
            case EventType.TOOL_ERROR:
                pending.count(now, "tool_calls")
                pending.count(now, "tool_errors")
            case _:
                pass

    def routed(self, msg: InboundMessage, routed: Routed) -> None:
        """Router callback: a message that became a queued task."""
        if routed.status != "queued" or routed.task_id is None:
            return
        now = self.clock()
        self._pending.count(now, "queued")
        who = f"{msg.channel}:{msg.user_id}"
        self._pending.people[(who, msg.conversation_id)] = now
        self._task(routed.task_id, msg.conversation_id, "queued", now)

    def audited(self, entry: dict[str, Any]) -> None:
        """AuditLog listener: an entry, shown in the feed (without its arguments)."""
        self._pending.feed.append({"kind": "audit", "at": entry.get("ts") or self.clock(),
                                   **{k: entry[k] for k in _AUDIT_FIELDS if k in entry}})

    def _dead(self, event: Event) -> None:
        """A reply given up on (and kept as a dead letter)."""
        self._pending.count(event.timestamp, "dead")
        self._pending.feed.append({"kind": "dead_letter", "at": event.timestamp,
                                   "channel": event.payload.get("channel"),
                                   "conversation_id": event.conversation_id,
                                   "task_id": event.task_id or None,
                                   "reason": str(event.payload.get("reason") or "")[:300]})

    def _task(self, task_id: str, cid: str, status: str, now: float, *,
              tool: Any = None) -> None:
        still_open = status not in TERMINAL
        self._pending.tasks[task_id] = (now, still_open)
        self._pending.feed.append({"kind": "task", "at": now, "task_id": task_id,
                                   "conversation_id": cid, "channel": channel_of(cid),
                                   "status": status, **({"tool": tool} if tool else {})})

    # --- the writer ----------------------------------------------------------------------
    async def flush(self) -> None:
        """Send what gathered since the last flush (one pipeline)."""
        pending, self._pending = self._pending, _Pending()
        if not (pending.feed or pending.tasks or pending.people or pending.counts
                or pending.tokens):
            return
        users = await self._users(pending)
        keys = self.keys
        pipe = self.redis.pipeline(transaction=False)
        for item in pending.feed:
            pipe.xadd(keys.feed(), {"data": json.dumps(item, default=str)},
                      maxlen=FEED_LENGTH, approximate=True)
        now = self.clock()
        if pending.tasks:
            pipe.zadd(keys.tasks(), {t: at for t, (at, _) in pending.tasks.items()})
            pipe.zremrangebyscore(keys.tasks(), "-inf", now - INDEX_SECONDS)
            opened = [t for t, (_, still) in pending.tasks.items() if still]
            closed = [t for t, (_, still) in pending.tasks.items() if not still]
            if opened:
                pipe.sadd(keys.open(), *opened)
            if closed:
                pipe.srem(keys.open(), *closed)
        if pending.people:
            pipe.zadd(keys.people(), {json.dumps([who, cid]): at
                                      for (who, cid), at in pending.people.items()})
            pipe.zremrangebyscore(keys.people(), "-inf", now - INDEX_SECONDS * 7)
        minutes: set[int] = set()
        for (minute, name), amount in pending.counts.items():
            pipe.hincrbyfloat(keys.minute(minute), name, amount)
            minutes.add(minute)
        for minute in minutes:
            pipe.expire(keys.minute(minute), MINUTE_TTL)
        days: set[str] = set()
        for day, task_id, who, name, tokens in pending.tokens:
            if name.startswith("channel|"):
                identity = who or users.get(task_id)
                if identity:
                    pipe.hincrby(keys.usage(day), f"user|{identity}", tokens)
            pipe.hincrby(keys.usage(day), name, tokens)
            days.add(day)
        for day in days:
            pipe.expire(keys.usage(day), USAGE_TTL)
        try:
            await pipe.execute()
        except Exception as exc:  # the console's figures must never take a task down
            self._failed(exc)
        else:
            self._failing = False

    def _failed(self, exc: Exception) -> None:
        """Warn once per outage, not at every flush and beat."""
        log.log(logging.DEBUG if self._failing else logging.WARNING,
                "could not record the console's activity (its figures miss this): %s", exc)
        self._failing = True

    async def _users(self, pending: _Pending) -> dict[str, str]:
        """Whom the tasks of tokens counted without a known user run for (a task resumed
        in this process after it started in another), read from their states."""
        missing = sorted({task_id for _, task_id, who, name, _ in pending.tokens
                          if who is None and name.startswith("channel|")})
        if not missing:
            return {}
        try:
            raws = await self.redis.mget([self._task_key(t) for t in missing])
        except Exception as exc:
            log.info("could not read whom %d tasks run for: %s", len(missing), exc)
            return {}
        found: dict[str, str] = {}
        for task_id, raw in zip(missing, raws, strict=True):
            if raw:
                state = TaskState.model_validate_json(raw)
                found[task_id] = state.user_id
                if state.status not in TERMINAL | PAUSED:  # runs here until its finish
                    self._who[task_id] = found[task_id]
        return found

    async def beat(self) -> None:
        """Record this process's figures now (and sample the queue into this minute)."""
        if self.figures is None:
            return
        try:
            figures = await self.figures()  # reads the queue's figures from the store
        except Exception as exc:
            self._failed(exc)
            return
        now = self.clock()
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(self.keys.processes(), self.name,
                  json.dumps({**figures, "name": self.name, "at": now}))
        queue: dict[Any, Any] = {k: float(figures[k])
                                 for k in ("waiting", "oldest_seconds") if k in figures}
        if queue:
            pipe.hset(self.keys.minute(minute_of(now)), mapping=queue)
            pipe.expire(self.keys.minute(minute_of(now)), MINUTE_TTL)
        try:
            await pipe.execute()
        except Exception as exc:
            self._failed(exc)

    async def leave(self) -> None:
        """This process stops: its figures go (the last flush is the caller's)."""
        try:
            await self.redis.hdel(self.keys.processes(), self.name)
        except Exception as exc:
            log.info("could not remove this process's console figures: %s", exc)


def _day(ts: float) -> str:
    return time.strftime("%Y%m%d", time.gmtime(ts))

"""Overview: what the console's pages read back of ``gateway.activity``'s records.

The state of the system now (open tasks by status and channel, the oldest queued work,
model calls in flight, approvals waiting, dead letters, the serving processes), the last
hour minute by minute, tokens by user, channel and model, recent tasks, and the
conversation search. Everything is read from the store, so any replica answers the same.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

from redis.asyncio import Redis

from agent_core.store import Keys, as_text, store_boundary
from agent_core.task import TERMINAL, TaskState

from .activity import FAILED, MINUTE_TTL, channel_of, minute_of
from .queue import backlog

#: A process whose figures are older than this is gone (it writes every few seconds).
PROCESS_STALE = 20.0
#: One not heard of for this long is forgotten.
PROCESS_FORGOTTEN = 3600.0
#: The figures of a minute that are summed (the sampled ones are not).
_SAMPLED = ("waiting", "oldest_seconds")
ENDED = ("answered", "failed", "limit", "invalid", "cancelled")


@store_boundary
class Overview:
    """Reads the console's records (and the queue's, approvals' and dead letters' own)."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.all_keys = Keys.of(redis, prefix)
        self.keys = self.all_keys.console

    async def now(self) -> dict[str, Any]:
        """The state of the system now and its last hour in sums."""
        keys, now = self.all_keys, time.time()
        pipe = self.redis.pipeline(transaction=False)
        pipe.smembers(keys.console.open())
        pipe.llen(keys.dead_letters())
        pipe.zcard(keys.approvals.expiry())
        pipe.hgetall(keys.console.processes())
        (open_ids, dead, approvals, processes), (waiting, oldest) = await asyncio.gather(
            pipe.execute(), backlog(self.redis, keys))
        states = await self._states(sorted(as_text(t) for t in open_ids), prune=True)
        by_channel: dict[str, Counter[str]] = {}
        for state in states:
            by_channel.setdefault(channel_of(state.conversation_id), Counter())[
                state.status] += 1
        hour = await self.minutes(60)
        for name, amount in hour["sums"].items():
            if name.startswith("outcome:"):
                _, outcome, channel = name.split(":", 2)
                by_channel.setdefault(channel, Counter())[f"{outcome}_last_hour"] += int(amount)
        totals: Counter[str] = Counter()
        for counts in by_channel.values():
            totals.update(counts)
        live, stale = self._processes(processes, now)
        if stale:
            await self.redis.hdel(keys.console.processes(), *stale)
        sums = hour["sums"]
        ended = sum(totals[f"{o}_last_hour"] for o in ENDED)
        failed = sum(totals[f"{o}_last_hour"] for o in FAILED)
        calls = sums.get("model_calls", 0.0)
        return {
            "at": now,
            "tasks": {s: totals[s] for s in ("queued", "running", "awaiting_approval",
                                             "asked_user")}
            | {"failed_last_hour": failed, "answered_last_hour":
               totals["answered_last_hour"], "ended_last_hour": ended},
            "by_channel": {c: dict(v) for c, v in sorted(by_channel.items())},
            "queue": {"conversations_waiting": int(waiting),
                      "oldest": {"conversation_id": oldest[0], "since": oldest[1],
                                 "age_seconds": max(0.0, now - oldest[1])}
                      if oldest else None},
            "model": {"in_flight": sum(int(p.get("in_flight", 0)) for p in live),
                      "waiting": sum(int(p.get("model_waiting", 0)) for p in live),
                      "calls_last_hour": int(calls),
                      "mean_seconds_last_hour": sums.get("model_seconds", 0.0) / calls
                      if calls else None,
                      "errors_last_hour": int(sums.get("model_errors", 0))},
            "error_rate_last_hour": failed / ended if ended else None,
            "approvals_pending": int(approvals),
            "dead_letters": int(dead),
            "processes": live,
        }

    async def gauges(self) -> dict[str, float]:
        """The figures /metrics reads from the store at scrape: the oldest work's age, the
        dead letters, the approvals waiting."""
        keys = self.all_keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.llen(keys.dead_letters())
        pipe.zcard(keys.approvals.expiry())
        (dead, approvals), (_, oldest) = await asyncio.gather(pipe.execute(),
                                                             backlog(self.redis, keys))
        age = max(0.0, time.time() - oldest[1]) if oldest else 0.0
        return {"oldest_seconds": age, "dead_letters": float(dead),
                "approvals_pending": float(approvals)}

    async def minutes(self, count: int) -> dict[str, Any]:
        """The last ``count`` minutes (this one included), oldest first: each minute's
        figures, and the sums of those that add up."""
        count = max(1, min(count, MINUTE_TTL // 60))
        last = minute_of(time.time())
        first = last - count + 1
        pipe = self.redis.pipeline(transaction=False)
        for minute in range(first, last + 1):
            pipe.hgetall(self.keys.minute(minute))
        rows = [{as_text(k): float(v) for k, v in row.items()}
                for row in await pipe.execute()]
        sums: Counter[str] = Counter()
        for row in rows:
            sums.update({k: v for k, v in row.items() if k not in _SAMPLED})
        return {"start": first * 60, "step": 60, "minutes": rows, "sums": dict(sums)}

    async def series(self, count: int) -> dict[str, Any]:
        """The charts' series over the last ``count`` minutes: tasks answered and failed,
        the error rate, model calls and their mean seconds, tool errors, dead letters, and
        the queue's depth and oldest age as sampled."""
        data = await self.minutes(count)
        rows = data["minutes"]

        def outcome(row: dict[str, float], names: tuple[str, ...] | frozenset[str]) -> float:
            return sum(v for k, v in row.items()
                       if k.startswith("outcome:") and k.split(":")[1] in names)

        answered = [outcome(r, ("answered",)) for r in rows]
        failed = [outcome(r, FAILED) for r in rows]
        ended = [outcome(r, ENDED) for r in rows]
        calls = [r.get("model_calls", 0.0) for r in rows]
        return {
            "start": data["start"], "step": data["step"],
            "times": [data["start"] + 60 * i for i in range(len(rows))],
            "queued": [r.get("queued", 0.0) for r in rows],
            "answered": answered, "failed": failed,
            "error_rate": [f / e if e else None for f, e in zip(failed, ended, strict=True)],
            "model_calls": calls,
            "model_mean_seconds": [r.get("model_seconds", 0.0) / c if c else None
                                   for r, c in zip(rows, calls, strict=True)],
            "tool_errors": [r.get("tool_errors", 0.0) for r in rows],
            "dead_letters": [r.get("dead", 0.0) for r in rows],
            "waiting": [r.get("waiting") for r in rows],
            "oldest_seconds": [r.get("oldest_seconds") for r in rows],
        }

    async def recent_tasks(self, limit: int) -> list[TaskState]:
        """The tasks that changed last, newest first."""
        ids = await self.redis.zrevrange(self.keys.tasks(), 0, limit - 1)
        states = await self._states([as_text(t) for t in ids])
        return sorted(states, key=lambda s: s.updated_at, reverse=True)

    async def usage(self, days: int) -> dict[str, Any]:
        """Tokens of the last ``days`` UTC days (today included) by user, channel, model."""
        now = time.time()
        names = [time.strftime("%Y%m%d", time.gmtime(now - 86_400 * i)) for i in range(days)]
        pipe = self.redis.pipeline(transaction=False)
        for day in names:
            pipe.hgetall(self.keys.usage(day))
        found: dict[str, Counter[str]] = {"user": Counter(), "channel": Counter(),
                                          "model": Counter()}
        for row in await pipe.execute():
            for key, value in row.items():
                kind, _, name = as_text(key).partition("|")
                if kind in found:
                    found[kind][name] += int(value)
        return {"days": days, "since_day": names[-1],
                **{kind: [{"name": n, "tokens": t} for n, t in counts.most_common(50)]
                   for kind, counts in found.items()}}

    async def people(self, query: str, limit: int) -> list[tuple[str, str, float]]:
        """(user, conversation, when last) pairs whose user contains ``query``, newest
        first (of the last week's)."""
        rows: Any = await self.redis.zrevrange(self.keys.people(), 0, 4999, withscores=True)
        found = []
        needle = query.lower()
        for member, score in rows:
            who, cid = json.loads(member)
            if needle in who.lower():
                found.append((who, cid, float(score)))
                if len(found) >= limit:
                    break
        return found

    async def _states(self, task_ids: list[str], *, prune: bool = False) -> list[TaskState]:
        """The tasks' states (those still kept); ``prune``: drop the ids of tasks gone or
        ended from the open set (a queued task cancelled, a conversation forgotten)."""
        states: list[TaskState] = []
        gone: list[str] = []
        for start in range(0, len(task_ids), 500):
            chunk = task_ids[start:start + 500]
            raws = await self.redis.mget([self.all_keys.task(t) for t in chunk])
            for task_id, raw in zip(chunk, raws, strict=True):
                state = TaskState.model_validate_json(raw) if raw else None
                if state is None or (prune and state.status in TERMINAL):
                    gone.append(task_id)
                if state is not None and not (prune and state.status in TERMINAL):
                    states.append(state)
        if prune and gone:
            await self.redis.srem(self.keys.open(), *gone)
        return states

    def _processes(self, raw: dict[Any, Any], now: float
                   ) -> tuple[list[dict[str, Any]], list[str]]:
        """The processes seen lately (with how long ago), and the names of those long
        gone (a process that died without saying so), to forget."""
        live, stale = [], []
        for name, value in raw.items():
            figures = json.loads(value)
            age = now - float(figures.get("at", 0))
            if age <= PROCESS_STALE:
                live.append({**figures, "age_seconds": round(max(0.0, age), 1)})
            elif age > PROCESS_FORGOTTEN:
                stale.append(as_text(name))
        return sorted(live, key=lambda p: str(p.get("name"))), stale

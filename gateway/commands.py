"""Chat commands understood on every channel: /help, /status, /reset, /stop, /forget,
/schedule, /schedules, /unschedule, /workflow, /usage.

Commands that change what others have are checked like anything else that decides: /stop
stops only the running task of the person who sent it (an administrator's stops any);
/reset and /forget in a group are for administrators (in a direct conversation the person
is its only member). A refusal says why and changes nothing.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Literal, assert_never, get_args
from zoneinfo import ZoneInfo

from pydantic import ValidationError

from adapters.base import InboundMessage
from agent_core.budget import Charge, StoreBudget
from agent_core.budget import words as budget_words
from agent_core.store import RedisConversationStore

from .access import Roles
from .forgetting import forget
from .queue import WorkItem, WorkQueue
from .scheduler import Job, Scheduler, place_of
from .settings import GatewaySettings

_COMMAND = re.compile(r"^\s*/([a-z]+)(?:@\w+)?\b", re.IGNORECASE)

HELP = """Here is what I understand:
• just ask: I plan, use my tools step by step and answer here
• /status: what I am doing in this conversation
• /stop: stop the running task
• /reset: start a fresh session (older messages stay searchable)
• /forget: delete everything this conversation stored
• /schedule "0 9 * * MON" <what to do>: run it on a timetable and post here
  (also: /schedule every 2h <...>, /schedule at 2026-12-01T09:00 <...>)
• /schedules: the schedules posting here; /unschedule <id>: remove one
• /workflow <id> <what to do>: run a workflow of the agent hub and post its result here
• /usage: how much of your model budgets you have used, and when they reset
• /help: this message"""

_SPEC = re.compile(r'^\s*(?:"(?P<cron>[^"]+)"|every\s+(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[smhd])'
                   r"|at\s+(?P<at>\S+))\s+(?P<prompt>.+)$", re.DOTALL | re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

Command = Literal["help", "status", "reset", "stop", "forget", "schedule", "schedules",
                  "unschedule", "workflow", "usage"]


class Commands:
    """Parses and runs chat commands; each returns the text to reply with."""

    NAMES: tuple[Command, ...] = get_args(Command)

    def __init__(self, *, queue: WorkQueue, store: RedisConversationStore,
                 model_status: Callable[[], str], settings: GatewaySettings,
                 scheduler: Scheduler | None = None, workflows: bool = False,
                 budget: StoreBudget | None = None) -> None:
        self.queue = queue
        self.store = store
        self.model_status = model_status
        self.settings = settings
        self.roles = Roles.from_settings(settings)
        self.scheduler = scheduler
        #: Whether /workflow runs (the hub is connected): then the router queues it.
        self.workflows = workflows
        #: The deployment's budgets, for /usage.
        self.budget = budget

    def parse(self, text: str) -> Command | None:
        """The command a message is, or None for an ordinary message."""
        match = _COMMAND.match(text)
        if match is None:
            return None
        name = match.group(1).lower()
        return next((c for c in self.NAMES if c == name), None)

    async def run(self, command: Command, msg: InboundMessage) -> str:
        """Carry out a command for the message's conversation."""
        cid = msg.conversation_id
        match command:
            case "help":
                return HELP
            case "status":
                return await self._status(cid)
            case "stop":
                return await self._stop(msg)
            case "reset":
                if refusal := self._refuse_group_wide(msg, "start a fresh session"):
                    return refusal
                if await self.queue.is_busy(cid):
                    await self.queue.signal(cid, "stop")
                await self.store.reset(cid)
                return "Started a fresh session. Older messages are archived and searchable."
            case "forget":
                if refusal := self._refuse_group_wide(msg, "delete what it stored"):
                    return refusal
                if await self.queue.is_busy(cid):
                    await self.queue.signal(cid, "stop")
                await forget(self.store, self.settings.hermes_data_dir, cid)
                return "Deleted everything this conversation had stored."
            case "schedule":
                return await self._schedule(msg)
            case "schedules":
                return await self._schedules(msg)
            case "unschedule":
                return await self._unschedule(msg)
            case "workflow":  # with the hub the router queues it as a task instead
                return "Workflows need the agent hub, which is not enabled here " \
                       "(HERMES_HUB=true)."
            case "usage":
                return await self._usage(msg)
            case unknown:
                assert_never(unknown)

    async def _stop(self, msg: InboundMessage) -> str:
        """Stop the running task: its requester's or an administrator's command."""
        cid = msg.conversation_id
        running = await self.queue.running(cid)
        if running is None:
            return "Nothing is running in this conversation."
        identity = f"{msg.channel}:{msg.user_id}"
        if identity not in _requesters(running) \
                and not self.roles.is_admin(self.roles.role_of_sender(msg)):
            return ("Only the person who asked for the running task, or an administrator, can "
                    "stop it. Nothing was stopped.")
        await self.queue.signal(cid, "stop", running.task_id)
        return "Stopping the running task."

    def _refuse_group_wide(self, msg: InboundMessage, what: str) -> str | None:
        """Why ``msg``'s sender may not change the whole conversation, or None if they may:
        in a group only an administrator may."""
        if msg.is_direct or self.roles.is_admin(self.roles.role_of_sender(msg)):
            return None
        return (f"In a group only an administrator can {what} for everyone here. Nothing was "
                "changed.")

    async def _schedule(self, msg: InboundMessage) -> str:
        if self.scheduler is None:
            return "Scheduling is not enabled on this gateway."
        identity = f"{msg.channel}:{msg.user_id}"
        if not self.roles.grants(self.roles.role_of_sender(msg), "schedule"):
            return ("You need the 'schedule' permission to create schedules here; ask an "
                    "administrator.")
        args = _COMMAND.sub("", msg.text, count=1)
        match = _SPEC.match(args)
        if match is None:
            return ('Usage: /schedule "0 9 * * MON" <what to do> (cron, in quotes), '
                    "/schedule every 2h <what to do>, or /schedule at 2026-12-01T09:00 "
                    "<what to do>")
        trigger: dict[str, object] = {}
        if match["cron"]:
            trigger["cron"] = match["cron"]
        elif match["n"]:
            trigger["every"] = float(match["n"]) * _UNITS[match["unit"].lower()]
        else:
            trigger["at"] = match["at"]
        try:
            job = await self.scheduler.create(
                name=match["prompt"].strip()[:60], prompt=match["prompt"].strip(),
                trigger=trigger, channel=msg.channel, reply_target=msg.reply_target,
                room_id=msg.room_id, run_as=identity, role=msg.role)
        except ValidationError as exc:
            return f"That schedule is not valid: {exc.errors()[0]['msg']}"
        when = _when(job.next_run_at, job.trigger.timezone or self.settings.hermes_timezone)
        return f"Scheduled {job.id}: {job.name!r}, next run {when}."

    async def _schedules(self, msg: InboundMessage) -> str:
        if self.scheduler is None:
            return "Scheduling is not enabled on this gateway."
        jobs = await self.scheduler.jobs(
            target=place_of(msg.channel, msg.reply_target, msg.room_id))
        if not jobs:
            return "No schedules post here."
        zone = self.settings.hermes_timezone
        return "\n".join(
            f"• {j.id}: {j.name!r} ({_describe(j)}), next "
            f"{'paused' if j.paused else _when(j.next_run_at, j.trigger.timezone or zone)}"
            for j in jobs)

    async def _unschedule(self, msg: InboundMessage) -> str:
        if self.scheduler is None:
            return "Scheduling is not enabled on this gateway."
        job_id = _COMMAND.sub("", msg.text, count=1).strip()
        job = await self.scheduler.get(job_id) if job_id else None
        if job is None:
            return f"No schedule {job_id!r}; /schedules lists them."
        identity = f"{msg.channel}:{msg.user_id}"
        if job.owner != identity and not self.roles.is_admin(self.roles.role_of_sender(msg)):
            return "Only the schedule's owner or an administrator can remove it."
        await self.scheduler.delete(job.id)
        return f"Removed schedule {job.id}."

    async def _usage(self, msg: InboundMessage) -> str:
        """The sender's budgets in their current windows: those that count what they ask
        here (theirs, this conversation's, the channel's, everyone's)."""
        if self.budget is None or not self.budget.rules:
            return budget_words.usage([], now=0.0)
        me = Charge(task_id="", user_id=f"{msg.channel}:{msg.user_id}",
                    conversation_id=msg.conversation_id, role=self.roles.role_of_sender(msg),
                    model="", prompt_tokens=0, max_tokens=0, channel=msg.channel)
        uses = await self.budget.uses(self.budget.applying(me))
        return budget_words.usage(uses, now=self.budget.calendar.now())

    async def _status(self, cid: str) -> str:
        snap = await self.store.snapshot(cid)
        busy = await self.queue.is_busy(cid)
        queued = await self.queue.length(cid)
        lines = [
            f"model: {self.model_status()}",
            "working on a task now" if busy else "idle",
            f"messages waiting: {max(0, queued - (1 if busy else 0))}",
            f"in view: {len(snap.window)} messages ({snap.tokens} tokens); "
            f"archived: {snap.archived}",
        ]
        if snap.waiting_task:
            lines.append("waiting for your answer to my last question")
        if snap.plan:
            lines.append(f"plan: {snap.plan.splitlines()[0]}")
        return "\n".join(lines)


def _requesters(item: WorkItem) -> set[str]:
    """Who asked for the task of a queued item: its sender; for a scheduled run, the job's
    identity and its owner."""
    if item.kind == "scheduled" and item.schedule is not None:
        return {str(item.schedule.get("run_as", "")), str(item.schedule.get("owner", ""))}
    return {f"{item.inbound.channel}:{item.inbound.user_id}"}


def _when(ts: float | None, zone: str) -> str:
    if ts is None:
        return "never (no further runs)"
    return dt.datetime.fromtimestamp(ts, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def _describe(job: Job) -> str:
    t = job.trigger
    if t.cron:
        return f"cron {t.cron}"
    if t.every:
        return f"every {t.every:g}s"
    return f"once at {t.at}"

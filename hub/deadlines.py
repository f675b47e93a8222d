"""The deadline watch: when a request's deadline passes without an answer, the hub itself
answers its caller, failed with TIMEOUT, even if the agent died.

It reads every request and every answer as they are persisted (ordered consumers on the
two streams, from the moment it starts), and keeps the open requests by deadline. Several
copies may run: the one that claims a timed-out request first (a key created in the
``HMP_TIMEOUTS`` bucket) answers it, so its caller hears TIMEOUT once; should the bucket
fail, each copy publishes the same message id, which JetStream stores once.
An agent's answer after the deadline is dropped by its runner (and logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from typing import Any

from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy, KeyValueConfig, StorageType
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from agent_core.background import Background
from agent_core.ids import new_id

from .bus import REPLIES, TASKS, Bus, Headers
from .identity import CORE
from .messages import TaskRequest, TaskResponse, Violation
from .subjects import addressee_of, reply_subject, responder_of, responders

log = logging.getLogger(__name__)

#: Who answers a timeout: the core (requesters take an answer from it too).
HUB_ID = CORE
#: Which copy of the watch answers a timed-out request (a key per request, kept a while).
CLAIMS = "HMP_TIMEOUTS"
_CLAIM_TTL = 600.0
#: Seconds a failing timeout claim is tried again (a cluster electing the bucket's leader).
_CLAIM_RETRY = 5.0


def deadline_of(request: TaskRequest) -> float:
    """When the request's deadline passes (wall clock, seconds)."""
    return request.timestamp + request.deadline_ms / 1000


class DeadlineWatch:
    """Answers TIMEOUT for requests nobody answered in time."""

    def __init__(self, bus: Bus, *, tick: float = 0.1) -> None:
        self.bus = bus
        self.tick = tick
        #: task id -> (the request, its headers, the agent it was sent to)
        self._open: dict[str, tuple[TaskRequest, Headers, str]] = {}
        self._due: list[tuple[float, str]] = []
        self._subscriptions: list[Any] = []
        self._loop = Background()
        self._claims: KeyValue | None = None
        #: Timeouts this copy answered, and those it left to the copy that claimed them.
        self.timed_out = 0
        self.left_to_others = 0
        #: What this copy writes as its claim (told apart from another copy's).
        self._token = f"{HUB_ID}:{new_id(8)}".encode()

    async def start(self) -> None:
        """Follow both streams from now on and start the clock."""
        self._claims = await self.bus.js.create_key_value(KeyValueConfig(
            bucket=CLAIMS, history=1, ttl=_CLAIM_TTL, storage=StorageType.FILE,
            replicas=self.bus.settings.hub_replicas))
        self._subscriptions = [
            await self.bus.js.subscribe("task.request.>", stream=TASKS, ordered_consumer=True,
                                        deliver_policy=DeliverPolicy.NEW, cb=self._on_request),
            await self.bus.js.subscribe("reply.>", stream=REPLIES, ordered_consumer=True,
                                        deliver_policy=DeliverPolicy.NEW, cb=self._on_reply)]
        self._loop.start(self._watch(), name="deadline-watch")

    async def stop(self) -> None:
        """Stop watching (a timeout being answered is answered first)."""
        await self._loop.stop()
        for subscription in self._subscriptions:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    def watching(self, task_id: str) -> bool:
        """Whether ``task_id`` is a request this copy still waits to see answered."""
        return task_id in self._open

    async def _on_request(self, msg: Msg) -> None:
        try:
            request = self.bus.parse(msg.data)
        except Violation:
            return  # its agent answers it with the violation
        if isinstance(request, TaskRequest) and request.task_id not in self._open:
            agent = addressee_of(msg.subject)
            self._open[request.task_id] = (request, Headers.of(msg, request), agent)
            heapq.heappush(self._due, (deadline_of(request), request.task_id))

    async def _on_reply(self, msg: Msg) -> None:
        try:
            answer = self.bus.parse(msg.data)
        except Violation:
            return
        if not isinstance(answer, TaskResponse) or answer.status == "partial":
            return
        entry = self._open.get(answer.task_id)
        # Only an answer from the agent asked (the bridge for one it fronts), or another
        # copy's TIMEOUT, ends the wait.
        if entry is not None and responder_of(msg.subject) in responders(entry[2]):
            del self._open[answer.task_id]

    async def _watch(self) -> None:
        while self._loop.running:
            now = time.time()
            while self._due and self._due[0][0] <= now:
                _, task_id = heapq.heappop(self._due)
                entry = self._open.pop(task_id, None)
                if entry is not None:
                    await self._time_out(*entry)
            await self._loop.pause(self.tick)

    async def _claim(self, task_id: str) -> bool:
        """Whether this copy answers ``task_id``'s timeout (no other copy claimed it).
        A claim that fails (on a NATS cluster, the bucket has no leader for a moment
        while a server is lost) is tried again for up to ``_CLAIM_RETRY`` seconds; one
        found taken after a failed try is this copy's if it holds this copy's token (the
        failed try was stored after all). Still failing: answered anyway (the message id
        keeps it once in the stream; a live subscriber may then see it twice)."""
        if self._claims is None:
            return True
        deadline = time.monotonic() + _CLAIM_RETRY
        pause, failed = 0.05, False
        while True:
            try:
                await self._claims.create(task_id, self._token)
                return True
            except KeyWrongLastSequenceError:
                if not failed:
                    return False
                with contextlib.suppress(Exception):
                    return bool((await self._claims.get(task_id)).value == self._token)
                return True
            except (Exception, asyncio.CancelledError) as exc:
                task = asyncio.current_task()
                if isinstance(exc, asyncio.CancelledError) and task is not None \
                        and task.cancelling():
                    raise
                failed = True
                if time.monotonic() + pause > deadline:
                    log.warning("timeout claim of %s failed: %s", task_id, exc)
                    return True
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.5)

    async def _time_out(self, request: TaskRequest, headers: Headers, agent: str) -> None:
        if not await self._claim(request.task_id):
            log.debug("timeout of %s answered by another copy", request.task_id)
            self.left_to_others += 1
            return
        answer = TaskResponse(
            message_id=f"timeout-{request.task_id}", sender_id=HUB_ID,
            receiver_id=request.sender_id, correlation_id=request.correlation_id,
            task_id=request.task_id, status="failed", error_code="TIMEOUT",
            result={"error": f"no answer from {agent} within {request.deadline_ms} ms"})
        deadline, pause = time.monotonic() + _CLAIM_RETRY, 0.05
        while True:  # the same message id, kept once: tried again while the bus moves
            try:
                await self.bus.publish(reply_subject(HUB_ID, request.sender_id), answer,
                                       headers)
                self.timed_out += 1
                log.info("task %s timed out after %d ms", request.task_id, request.deadline_ms)
                return
            except (Exception, asyncio.CancelledError) as exc:
                task = asyncio.current_task()
                if isinstance(exc, asyncio.CancelledError) and task is not None \
                        and task.cancelling():
                    raise
                if time.monotonic() + pause > deadline:
                    log.warning("could not answer the timeout of %s: %s", request.task_id,
                                exc)
                    return
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.5)

"""``/workflow <id> <text>`` in every channel: the run is started on the hub and its answer
posted in the conversation when it comes, by whichever gateway process is up then.

Where an answer goes is kept in the store before the run is asked for
(``<prefix>:workflow:<task id>``). Answers come on ``reply.gateway-chat-<prefix>`` and are
read from ``HMP_REPLIES`` by one durable consumer that every gateway process of the
deployment pulls from: an answer
that comes while the process that started the run is down is posted by another, or by it
once it is back.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any, Literal

from redis.asyncio import Redis

from adapters.base import InboundMessage
from agent_core.background import Background

from .delivery import Deliverer

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from hub import Bus, TaskResponse

log = logging.getLogger(__name__)

_MAX_TEXT = 3500


def sender_of(prefix: str) -> str:
    """The sender id of one deployment's chat runs (its store prefix: replicas share it)."""
    return "gateway-chat-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in prefix)


class WorkflowChat:
    """Starts runs for chat messages and posts their answers."""

    def __init__(self, bus: Bus, redis: Redis, prefix: str, deliverer: Deliverer, *,
                 retention: float) -> None:
        from hub.workflows.store import WorkflowStore

        self.bus = bus
        self.redis = redis
        self.prefix = prefix
        self.deliverer = deliverer
        self.retention = retention
        self.store = WorkflowStore(bus)
        self.sender = sender_of(prefix)
        self._loop = Background()

    def _key(self, task_id: str) -> str:
        return f"{self.prefix}:workflow:{task_id}"

    async def start(self) -> None:
        """Pull answers from the shared durable consumer."""
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        from hub.bus import REPLIES, reply_subject

        durable = self.sender.replace("-", "_")
        self._subscription = await self.bus.js.pull_subscribe(
            reply_subject(self.sender), durable=durable, stream=REPLIES, config=ConsumerConfig(
                durable_name=durable, ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.NEW, ack_wait=30,
                filter_subject=reply_subject(self.sender)))
        self._loop.start(self._pull(), name="workflow answers")

    async def stop(self) -> None:
        await self._loop.stop(grace=3)
        with contextlib.suppress(Exception):
            await self._subscription.unsubscribe()

    async def begin(self, msg: InboundMessage, arguments: str) -> str:
        """The command's own reply: the run started, or why not."""
        from hub.workflows.client import NoExecutor, Started, start_run

        workflow_id, _, text = arguments.strip().partition(" ")
        if not workflow_id:
            kept = await self.store.versions()
            listed = ", ".join(kept) or "none yet"
            return f"Usage: /workflow <id> <what to do>. Workflows here: {listed}."
        workflow = await self.store.get(workflow_id)
        if workflow is None:
            listed = ", ".join(await self.store.versions()) or "none yet"
            return f"There is no workflow {workflow_id!r}. Workflows here: {listed}."

        async def keep(started: Started) -> None:
            await self.redis.set(self._key(started.task_id), msg.model_dump_json(),
                                 ex=int(self.retention))

        try:
            started = await start_run(self.bus, workflow_id, {
                "text": text.strip(), "conversation_id": msg.conversation_id,
                "channel": msg.channel, "user_id": msg.user_id}, sender_id=self.sender,
                before=keep)
        except NoExecutor as exc:
            return f"The workflow cannot start: {exc}."
        return (f"Started workflow {workflow_id} v{workflow.version} (run {started.run_id}); "
                "I will post its result here.")

    async def _pull(self) -> None:
        from nats.errors import TimeoutError as NatsTimeout

        while self._loop.running:
            try:
                messages = await self._subscription.fetch(1, timeout=1.0)
            except NatsTimeout:
                continue
            except Exception as exc:
                log.warning("workflow answers: cannot pull: %s", exc)
                await self._loop.pause(1.0)
                continue
            for message in messages:
                try:
                    await self._post(message)
                except Exception as exc:  # redelivered after the ack wait
                    log.warning("workflow answer not posted yet: %s: %s",
                                type(exc).__name__, exc)

    async def _post(self, message: Msg) -> None:
        from hub import TaskResponse, Violation

        try:
            answer = self.bus.parse(message.data)
        except Violation:
            await message.ack()
            return
        if not isinstance(answer, TaskResponse):
            await message.ack()
            return
        key = self._key(answer.task_id)
        raw = await self.redis.get(key)
        if raw is None:  # posted already, or not started from a chat
            await message.ack()
            return
        inbound = InboundMessage.model_validate_json(raw)
        kind: Literal["answer", "error"] = "answer" if answer.status == "success" else "error"
        await self.deliverer.deliver(inbound.reply(describe(answer), kind))
        await self.redis.delete(key)
        await message.ack()


def describe(answer: TaskResponse) -> str:
    """A run's answer as a chat message."""
    result = answer.result
    name = f"{result.get('workflow_id', 'the workflow')}"
    if answer.status == "success":
        output: Any = result.get("output")
        if isinstance(output, dict) and isinstance(output.get("answer"), str):
            text = output["answer"]
            cited = output.get("citations")
            if isinstance(cited, list) and cited:
                text += "\n\nSources: " + ", ".join(str(c) for c in cited)
        elif isinstance(output, str):
            text = output
        else:
            text = f"Workflow {name} finished:\n```\n" + json.dumps(
                output, ensure_ascii=False, indent=2)[:_MAX_TEXT] + "\n```"
        return str(text)[:_MAX_TEXT]
    if answer.error_code == "CANCELLED":
        return f"Workflow {name} was cancelled."
    step = result.get("failed_step")
    error = result.get("error") or ""
    where = f" at step {step}" if step else ""
    return (f"Workflow {name} did not finish{where}: {answer.error_code}"
            + (f" ({str(error)[:500]})" if error else "") + ".")

"""Edits of what people sent (Slack ``message_changed``, Telegram ``edited_message``).

The message an edit names is found through its dedupe marker, which holds the id of the
task it became (``queue_scripts.INGEST``). Then, by that task's state:

- still queued: the queued item's text is replaced by the edit (one script, which refuses
  once a worker holds the item at the head of the queue);
- being worked on: the edit comes in as a new message, as HERMES_BUSY_MODE says (queued
  behind the task, steered into it, or interrupting it);
- already answered: a short notice that edits do not run a message again, with a button
  that runs the edited text as a new message (the edit is kept a day for it).
"""

from __future__ import annotations

import logging
from typing import Any

from redis.asyncio import Redis

from adapters.base import InboundMessage, Ingest, Interaction, InteractionReply, Routed
from agent_core.ids import new_id
from agent_core.store import ConversationStore, Keys, store_boundary
from agent_core.task import ACTIVE

from .delivery import Deliverer
from .queue import WorkItem, WorkQueue

log = logging.getLogger(__name__)

NOTICE = ("Edits don't run a message again: this one was already answered. Run the edited "
          "text as a new message?")
EDITED = "(I edited my previous message; it now reads:)"
GONE = "That edit is no longer kept; send it as a new message."
KEEP_EDITS = 86400

# Replace a queued item that no worker holds. KEYS: queue, lock   ARGV: index, old, new
# Returns 1 if replaced, 0 if the item moved or is being worked on.
REPLACE = """
local index = tonumber(ARGV[1])
if redis.call('LINDEX', KEYS[1], index) ~= ARGV[2] then
  return 0
end
if index == 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call('LSET', KEYS[1], index, ARGV[3])
return 1
"""


def identity(msg: InboundMessage) -> str:
    """The key of the marker that names the task a message became (what an edit of it
    looks up): its channel and its own identity."""
    return f"{msg.channel}:{msg.message_key or msg.platform_message_id}"


@store_boundary
class Edits:
    """Routes the edits of messages (``InboundMessage.edit_of``)."""

    def __init__(self, *, redis: Redis, prefix: str, queue: WorkQueue,
                 store: ConversationStore, deliverer: Deliverer) -> None:
        self.redis = redis
        self.keys = Keys.of(redis, prefix)
        self.queue = queue
        self.store = store
        self.deliverer = deliverer
        self._replace = redis.register_script(REPLACE)
        #: Routes a message as if it had just been sent (``Router.ingest``), set by the router.
        self.ingest: Ingest = _unset

    async def route(self, msg: InboundMessage, dedupe_key: str | None) -> Routed:
        """One edit, by what became of the message it edits."""
        assert msg.edit_of is not None
        raw = await self.redis.get(self.keys.dedupe(f"{msg.channel}:{msg.edit_of}",
                                                    msg.conversation_id))
        task_id = raw.decode() if isinstance(raw, bytes) else raw
        if not task_id or task_id == "1":
            return Routed("ignored", reason="an edit of a message not taken")
        if dedupe_key is not None and not await self.queue.first_time(dedupe_key,
                                                                      msg.conversation_id):
            return Routed("duplicate")
        state = await self.store.load_task(task_id)
        if state is not None and (state.conversation_id != msg.conversation_id or state.user_id
                                  not in (msg.user_id, f"{msg.channel}:{msg.user_id}")):
            return Routed("ignored", reason="an edit of someone else's message")
        if state is not None and state.status == "queued" and \
                await self._replace_queued(msg, task_id):
            return Routed("edited", task_id)
        if state is None or state.status == "queued" or state.status in ACTIVE:
            fresh = msg.model_copy(update={"edit_of": None, "platform_message_id": None,
                                           "text": f"{EDITED}\n{msg.text}", "id": new_id()})
            return await self.ingest(fresh)
        return await self._answered(msg, task_id)

    async def _replace_queued(self, msg: InboundMessage, task_id: str) -> bool:
        """The queued item of ``task_id`` with the edited text; False once a worker holds
        it (or it is gone)."""
        queue = self.queue.keys.queue(msg.conversation_id)
        lock = self.queue.keys.lock(msg.conversation_id)
        for _ in range(3):  # the queue may move under us: look again
            raws: list[Any] = await self.redis.lrange(queue, 0, -1)
            for index, raw in enumerate(raws):
                item = WorkItem.model_validate_json(raw)
                if item.task_id != task_id:
                    continue
                edited = item.model_copy(update={"inbound": item.inbound.model_copy(
                    update={"text": msg.text})})
                if await self._replace(keys=[queue, lock],
                                       args=[index, raw, edited.model_dump_json()]):
                    return True
                break
            else:
                return False
        return False

    async def _answered(self, msg: InboundMessage, task_id: str) -> Routed:
        edit_id = new_id()
        await self.redis.set(self.keys.edit(edit_id), msg.model_dump_json(), ex=KEEP_EDITS)
        notice = msg.reply(NOTICE, "notice", task_id=task_id, rerun=edit_id)
        await self.deliverer.deliver(notice)
        return Routed("edited", task_id, reason="answered", reply=NOTICE)

    async def rerun(self, press: Interaction) -> InteractionReply:
        """The "run the edited message" button: the kept edit, routed as a new message
        (once: its platform identity is the edit's)."""
        raw = await self.redis.get(self.keys.edit(press.target)) if press.target else None
        if not raw:
            return InteractionReply(GONE, refused=True)
        edit = InboundMessage.model_validate_json(raw)
        if edit.user_id != press.user_id or edit.channel != press.channel or (
                press.conversation_id and press.conversation_id != edit.conversation_id):
            return InteractionReply("Only the person who edited the message can run it.",
                                    refused=True)
        fresh = edit.model_copy(update={"edit_of": None, "id": new_id(),
                                        "platform_message_id": f"rerun:{press.target}"})
        routed = await self.ingest(fresh)
        if routed.status not in ("queued", "steered"):
            return InteractionReply("It is already running.", refused=True)
        return InteractionReply("Running the edited message.",
                                chosen="run the edited message")


async def _unset(message: InboundMessage, /) -> Routed:
    raise RuntimeError("Edits.ingest is set by Router.follow_edits")

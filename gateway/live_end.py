"""The end of a live reply (``gateway/live.py``): the answer delivered exactly once.

Where the reply has a live message (a stream, or a message edited in place), the answer's
first part is the end of it: a stream is stopped with the rest of the text when what it
holds is known to be the beginning of the answer, and edited to the answer otherwise (an
append or a stop went unanswered, the model started over, another process streamed into
it); a message edited in place gets its last edit. The other parts, or all of them where
there is no live message (a draft, nothing shown yet), are posted through the deliverer,
which looks for a part whose post went unanswered before posting it again. An answer with
buttons (an approval, choices) is posted anew and the live message put away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from adapters.base import OutboundMessage
from adapters.errors import DeliveryError
from adapters.live import LIVE_PART, Display, LiveChannel, Primitive, Step, Tag

from .delivery import GaveUp, Posting, Sent
from .live_record import ReplyRecord

if TYPE_CHECKING:
    from .live import LiveReplies

log = logging.getLogger(__name__)


class ReplyEnd:
    """How a ``LiveReply`` ends: delivered (``finish``) or put away (``close``)."""

    owner: LiveReplies
    channel: LiveChannel
    record: ReplyRecord
    lock: asyncio.Lock
    streamed: str
    frozen: bool
    line: str | None
    #: What the live message shows, and the steps changed since its last update (they and
    #: a new plan go with its stop).
    display: Display
    changed: dict[str, Step]

    async def save(self) -> None:
        raise NotImplementedError

    def safe(self, step: Primitive) -> bool:
        raise NotImplementedError

    async def _status(self) -> None:
        raise NotImplementedError

    @property
    def _live_tag(self) -> Tag:
        return Tag(self.record.delivery, LIVE_PART)

    async def finish(self, message: OutboundMessage) -> Sent | None:
        record = self.record
        deliverer = self.owner.deliverer
        if record.phase == "final":
            last = max(record.parts) if record.parts else None
            return Sent(record.parts[last] if last is not None else record.ref)
        posting = Posting(record.delivery, record.parts, record.unsure)

        async def keep() -> None:
            record.unsure = posting.unsure
            await self.save()

        posting.save = keep
        try:
            async with self.lock:
                if message.choices or message.rerun is not None or message.kind == "approval":
                    await self._put_away()
                    start = 0
                else:
                    start = await self._finish_live(message, posting)
                ref = await deliverer.post_all(self.channel, message, posting, start=start)
        except GaveUp as exc:
            await deliverer.dead(message, str(exc))
            return None
        finally:
            await self._clear_status()
        record.phase = "final"
        await self.save()
        return Sent(ref or record.parts.get(0))

    async def _finish_live(self, message: OutboundMessage, posting: Posting) -> int:
        """The answer's first part as the end of the live message, where there is one: the
        parts still to post from (0: none was shown in it)."""
        record = self.record
        ref = record.ref
        if ref is None or record.mode in ("draft", "final"):
            return 0
        first = self.channel.split(message)[0]
        tag = Tag(record.delivery, 0)
        rest = _rest(first, self.streamed)
        clean = record.mode == "stream" and not record.dirty and not self.frozen and \
            rest is not None
        if record.mode == "stream":
            try:
                self.display.steps_new = list(self.changed.values())
                await self.channel.stop_stream(ref, message, rest=rest, tag=tag,
                                               display=self.display)
            except DeliveryError as exc:
                log.info("stopping the stream of %s: %s", record.delivery, exc)
                clean = await self._stop_again(message, ref, rest, exc)
        if not clean and not self.safe("edit"):
            return 0  # an edit that may not be repeated: the answer is posted instead
        if not clean:
            try:
                await self.owner.deliverer.attempt(
                    message, lambda: self.channel.edit(ref, message, 0, tag=tag))
            except GaveUp as exc:  # the message is gone (deleted): the answer is posted
                log.info("live message of %s not editable (%s): posting the answer",
                         record.delivery, exc)
                return 0
        posting.parts[0] = ref
        await self.save()
        return 1

    async def _stop_again(self, message: OutboundMessage, ref: dict[str, Any],
                          rest: str | None, exc: DeliveryError) -> bool:
        """After a failed stop: whether the stream now holds the answer as it should (the
        stop was refused, then made); otherwise it is stopped without the rest (which may
        be in already: a stream that ended answers so) and the edit sets its text."""
        tag = Tag(self.record.delivery, 0)
        if not exc.retryable:
            return False
        again = exc.applied == "no" or self.safe("stop")  # the same stop, with its rest
        try:
            await self.owner.deliverer.attempt(message, lambda: self.channel.stop_stream(
                ref, message, rest=rest if again else None, tag=tag))
        except GaveUp:
            return False
        return again

    async def _put_away(self, *, delete: bool = False) -> None:
        """Before an answer with buttons (an approval, choices): the live message goes (a
        stream is ended as it is, what the agent wrote before asking staying; an edited
        "working" message is deleted). ``delete``: a stream is deleted too."""
        record = self.record
        if record.ref is None or record.mode in ("draft", "final"):
            return
        try:
            if record.mode == "stream":
                with contextlib.suppress(DeliveryError):
                    await self.channel.stop_stream(record.ref, self._empty(), rest=None,
                                                   tag=self._live_tag)
            if record.mode != "stream" or delete:
                await self.channel.discard(record.ref)
        except (DeliveryError, NotImplementedError) as exc:
            log.info("live message of %s not put away: %s", record.delivery, exc)

    async def close(self) -> None:
        """No answer will come (the task was interrupted by the next message, which answers
        instead): the live message is deleted, so no cut-off answer stays."""
        async with self.lock:
            await self._put_away(delete=True)
        await self._clear_status()
        self.record.phase = "closed"
        await self.save()

    async def _clear_status(self) -> None:
        self.line = None
        with contextlib.suppress(Exception):
            await self._status()

    def _empty(self) -> OutboundMessage:
        """A message with nothing to add (ending a stream as it is)."""
        record = self.record
        return OutboundMessage(channel=record.channel,
                               conversation_id=record.conversation_id,
                               reply_target=record.target, text="", kind="notice")



def _rest(answer: str, streamed: str) -> str | None:
    """What is still to add to a stream holding ``streamed`` for it to show ``answer``
    (the answer's parts are trimmed; the stream may end in whitespace), or None when
    ``streamed`` is not its beginning."""
    lead = streamed.lstrip()
    if answer.startswith(lead):
        return answer[len(lead):]
    core = lead.rstrip()
    if answer.startswith(core):
        return answer[len(core):].lstrip()
    return None

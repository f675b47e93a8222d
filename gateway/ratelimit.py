"""RateLimit: how many messages a person may send in a group chat (HERMES_RATE_LIMIT).

Counted per person and group (channel, space, room), in fixed windows on the clock shared
by every replica (``"20/min"``: each minute). The message past the limit gets one polite
notice saying when the person will be heard again; the ones after it, until the window
ends, get nothing. One script, one round trip, per group message; direct messages are not
counted.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Literal
from zoneinfo import ZoneInfo

from redis.asyncio import Redis

from adapters.base import InboundMessage
from agent_core.store import Keys, store_boundary

Verdict = Literal["ok", "notice", "silent"]

# KEYS: counter   ARGV: seconds it lives   Returns the count, this message included.
_COUNT = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
"""

_UNIT = {1: "a second", 60: "a minute", 3600: "an hour", 86400: "a day"}


@store_boundary
class RateLimit:
    """At most ``count`` messages per ``seconds`` from one person in one group."""

    def __init__(self, redis: Redis, prefix: str, *, count: int, seconds: int,
                 timezone: str = "UTC", clock: Callable[[], float] = time.time) -> None:
        self.keys = Keys(prefix)
        self.count = count
        self.seconds = seconds
        self.timezone = timezone
        self.clock = clock
        self._script = redis.register_script(_COUNT)

    async def admit(self, msg: InboundMessage) -> tuple[Verdict, float]:
        """Whether the message is heard ("ok"), gets the one notice of its window, or
        nothing; and when the window ends."""
        if msg.is_direct:
            return "ok", 0.0
        window = int(self.clock() // self.seconds)
        who = f"{msg.channel}:{msg.space_id}:{msg.room_id}:{msg.user_id}"
        n = int(await self._script(keys=[self.keys.rate(who, window)],
                                   args=[self.seconds + 1]))
        ends = float((window + 1) * self.seconds)
        if n <= self.count:
            return "ok", ends
        return ("notice" if n == self.count + 1 else "silent"), ends

    def notice(self, ends: float) -> str:
        """The one reply to the message past the limit."""
        at = dt.datetime.fromtimestamp(ends, ZoneInfo(self.timezone))
        per = _UNIT.get(self.seconds, f"every {self.seconds} seconds")
        clock = "%H:%M" if self.seconds % 60 == 0 else "%H:%M:%S"
        return (f"Please slow down: I take up to {self.count} messages {per} from each "
                f"person here. I'll read your messages again from {at:{clock}} "
                f"({self.timezone}); until then I won't answer them.")

"""Leases in Redis: a key holding a random token, renewed and released only by its holder.

The conversation locks of the work queue and the leadership of singleton jobs both use
them; the compare-and-act steps are Lua scripts so that a holder whose lease expired (and
was taken by someone else) can neither extend nor delete the new holder's key.
"""

from __future__ import annotations

from redis.asyncio import Redis

from agent_core.ids import new_id
from agent_core.store import store_boundary

# KEYS: lease   ARGV: token, lease_ms
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lease   ARGV: token
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@store_boundary
class Leases:
    """Take, renew and release leases on keys of one Redis."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)

    async def take(self, key: str, lease_ms: int) -> str | None:
        """A token if the key was free (now ours for ``lease_ms``), else None."""
        token = new_id()
        return token if await self.redis.set(key, token, nx=True, px=lease_ms) else None

    async def renew(self, key: str, token: str, lease_ms: int) -> bool:
        """Extend our lease; False if it is no longer ours."""
        return bool(await self._renew(keys=[key], args=[token, lease_ms]))

    async def release(self, key: str, token: str) -> bool:
        """Give the lease back; False if it was no longer ours."""
        return bool(await self._release(keys=[key], args=[token]))

"""Shared context on the hub: the newest version of each context, until it expires.

``context_update`` messages are kept in a JetStream key-value bucket (``HMP_CONTEXT``, one
entry per context id). A version older than (or equal to) the stored one never overwrites
it; concurrent writers are ordered by the bucket's revision check (compare and set, tried
again on a race). A context past its ``expires_at`` is gone: reading it deletes it.
"""

from __future__ import annotations

import logging
import time

from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from .bus import Bus
from .messages import ContextUpdate, Violation, parse
from .server import MAX_PAYLOAD

log = logging.getLogger(__name__)

BUCKET = "HMP_CONTEXT"
_RACES = 5


class Contexts:
    """The hub's context store."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._kv: KeyValue | None = None

    async def kv(self) -> KeyValue:
        """The bucket, created on first use."""
        if self._kv is None:
            self._kv = await self.bus.js.create_key_value(KeyValueConfig(
                bucket=BUCKET, history=1, max_value_size=MAX_PAYLOAD,
                storage=StorageType.FILE, replicas=self.bus.settings.hub_replicas))
        return self._kv

    async def put(self, update: ContextUpdate) -> bool:
        """Keep ``update`` unless a newer (or the same) version of it is stored; whether it
        was kept."""
        kept, _ = await self.offer(update)
        return kept

    async def offer(self, update: ContextUpdate) -> tuple[bool, int | None]:
        """``put``, and the version stored afterwards, from the read ``put`` makes anyway
        (None when that is not known: other writers kept winning the race, or the update
        had expired when it came; read it with ``get``)."""
        kv = await self.kv()
        for _ in range(_RACES):
            stored, revision = await self._read(update.context_id)
            if stored is not None and stored.version >= update.version:
                log.info("context %s: version %d ignored, %d is stored", update.context_id,
                         update.version, stored.version)
                return False, stored.version
            try:
                if revision is None:
                    await kv.create(update.context_id, update.to_json())
                else:
                    await kv.update(update.context_id, update.to_json(), last=revision)
                return True, update.version if update.expires_at > time.time() else None
            except KeyWrongLastSequenceError:
                continue  # another writer won the race: look again
        return False, None

    async def get(self, context_id: str) -> ContextUpdate | None:
        """The newest unexpired version of a context, or None."""
        stored, _ = await self._read(context_id)
        return stored

    async def _read(self, context_id: str) -> tuple[ContextUpdate | None, int | None]:
        kv = await self.kv()
        try:
            entry = await kv.get(context_id)
        except KeyNotFoundError:
            return None, None
        if not entry.value:
            return None, entry.revision
        try:
            stored = parse(entry.value)
        except Violation:
            return None, entry.revision
        if not isinstance(stored, ContextUpdate):
            return None, entry.revision
        if stored.expires_at <= time.time():
            await kv.delete(context_id)
            return None, None
        return stored, entry.revision

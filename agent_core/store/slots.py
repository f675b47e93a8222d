"""Where keys live on a Redis Cluster: its hash slots, and the store's shards over them.

A Redis Cluster splits the key space into 16,384 slots (CRC16 of the key, or of its hash
tag: the text between the first ``{`` and the next ``}``), and a script or a transaction
may only touch keys of one slot. The gateway's atomic steps touch a conversation's keys
together with the global indexes that find work (the conversations with queued work, the
wake list, the start counts, the conversations by activity) and with its tasks' and
dedupe markers' keys, so on a cluster all of them carry one hash tag: their **shard**'s.

- A conversation's shard is ``CRC16(conversation id) % shards``.
- Shard ``k``'s tag is a short string chosen so that its slot lies in the ``k``-th of
  ``shards`` equal ranges of the slot space, so that the shards spread evenly over the
  primaries, whatever contiguous ranges of slots each serves.
- A task id minted for a conversation (``mint_task_id``) carries its shard in its first
  four hex digits (``int(id[:4], 16) % shards``): the task's keys are found from its id
  alone, and live in its conversation's slot. Ids stay 32 hex digits (W3C trace ids).

The number of shards is fixed for a deployment (``HERMES_STORE_SHARDS``): it decides every
key's name, so the store records it and a process configured otherwise refuses to start.
"""

from __future__ import annotations

import binascii
import functools
import os
from dataclasses import dataclass

from ..ids import new_id

#: Slots in a Redis Cluster.
SLOTS = 16384
#: The most shards a store may have (each shard's tag is searched for in a slot range of
#: SLOTS / shards slots: 16 at this bound).
MAX_SHARDS = 1024


def crc16(data: bytes) -> int:
    """Redis Cluster's CRC16 (XMODEM: binascii's CRC-CCITT with a zero start)."""
    return binascii.crc_hqx(data, 0)


def key_slot(key: str | bytes) -> int:
    """The cluster slot of a key (of its hash tag, when it has a non-empty one)."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1:end]
    return crc16(raw) % SLOTS


@functools.cache
def shard_tags(shards: int) -> tuple[str, ...]:
    """Each shard's hash tag (without braces): the first of ``h<k>``, ``h<k>.1``, ...
    whose slot falls in the shard's range of the slot space."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards={shards!r}: use 1 to {MAX_SHARDS}")
    tags = []
    for shard in range(shards):
        low, high = shard * SLOTS // shards, (shard + 1) * SLOTS // shards
        attempt = 0
        while True:
            tag = f"h{shard}" if attempt == 0 else f"h{shard}.{attempt}"
            if low <= crc16(tag.encode()) % SLOTS < high:
                tags.append(tag)
                break
            attempt += 1
    return tuple(tags)


def shard_of(name: str, shards: int) -> int:
    """The shard of a conversation (or of any other name grouped by itself)."""
    return crc16(name.encode()) % shards


def task_shard(task_id: str, shards: int) -> int:
    """The shard a task id names: its first four hex digits for a minted id, otherwise
    (an id made elsewhere) the CRC16 of the whole id."""
    head = task_id[:4]
    if len(head) == 4:
        try:
            return int(head, 16) % shards
        except ValueError:
            pass
    return shard_of(task_id, shards)


def mint_task_id(shard: int, shards: int) -> str:
    """A new random 32-hex-digit id whose first four digits name ``shard``."""
    rest = new_id()
    value = int.from_bytes(os.urandom(2), "big")
    value = value - value % shards + shard
    if value > 0xFFFF:
        value -= shards
    return f"{value:04x}{rest[4:]}"


@dataclass(frozen=True, slots=True)
class Layout:
    """How keys map to slots: one node (``shards`` None: the historical names) or a
    cluster of ``shards`` shards."""

    shards: int | None = None

    def tag(self, shard: int) -> str:
        """Shard ``shard``'s hash tag, braces included."""
        assert self.shards is not None
        return f"{{{shard_tags(self.shards)[shard]}}}"

    def of(self, name: str) -> str:
        """The hash tag of the shard of ``name`` (a conversation id), braces included."""
        assert self.shards is not None
        return self.tag(shard_of(name, self.shards))

    def conv(self, cid: str) -> str:
        """The part of a conversation's keys that names it: ``{cid}`` on one node,
        ``{<shard tag>}{cid}`` on a cluster (the first braces are the hash tag)."""
        return f"{{{cid}}}" if self.shards is None else f"{self.of(cid)}{{{cid}}}"

    def index(self, base: str, cid: str) -> str:
        """A global index's key for a conversation: ``base`` itself on one node, its
        shard's ``base:{tag}`` on a cluster."""
        return base if self.shards is None else f"{base}:{self.of(cid)}"

    def indexes(self, base: str) -> list[str]:
        """Every shard's key of a global index (one on one node)."""
        if self.shards is None:
            return [base]
        return [f"{base}:{self.tag(shard)}" for shard in range(self.shards)]

    def grouped(self, tag: str) -> str:
        """The prefix part that puts a section's keys in one slot on a cluster."""
        return "" if self.shards is None else f"{{{tag}}}:"


#: The layout of one Redis (the historical key names).
ONE_NODE = Layout()

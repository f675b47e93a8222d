"""A BPE table in 2 MB instead of a 17 MB dict: token bytes -> rank, by open addressing.

The tokens, in rank order, are one byte string with an offset per token; a slot array
twice the table's size holds ``rank + 1`` at the position of the token's CRC-32 (probing
linearly on collisions; 0 is empty). A lookup is a CRC, a few array reads and one slice
compared, ~0.5 µs against a dict's ~50 ns, which the counter's cache of pieces it has
seen hides (a message's pieces are mostly the same few thousand). For cl100k: 100,256
tokens, 262,144 slots, 2.1 MB, written to the token cache as it is and mapped from it
(``CompactRanks.open``): no parse and no copy; its pages are read as lookups first touch
them, and every process that maps the file shares them.
"""

from __future__ import annotations

import array
import mmap
import struct
import sys
import zlib
from collections.abc import Mapping
from pathlib import Path

_MAGIC = b"HGRANKS2"
#: magic, byte order (b"l" or b"b"), token count, slot count, pattern length
_HEADER = struct.Struct("<8scxxxIII")


class CompactRanks:
    """Read-only ``bytes -> rank`` lookups over one buffer (``get``, ``in``, ``len``)."""

    __slots__ = ("_blob", "_mask", "_offsets", "_slots", "pattern")
    _slots: memoryview
    _offsets: memoryview
    _blob: bytes | mmap.mmap
    _mask: int
    #: The table's pre-tokenizer pattern.
    pattern: str

    def __init__(self, buffer: bytes | mmap.mmap) -> None:
        """A table written by ``to_bytes`` on a machine of this byte order, kept as it is
        (no copy); ValueError if ``buffer`` is not one (truncated, another format, another
        byte order)."""
        if len(buffer) < _HEADER.size:
            raise ValueError("not a rank table: too short")
        magic, order, n, size, pattern_len = _HEADER.unpack_from(buffer)
        if magic != _MAGIC or order != sys.byteorder[:1].encode():
            raise ValueError("not a rank table of this format and byte order")
        if size & (size - 1) or size < 2 * n:
            raise ValueError("not a rank table: bad slot count")
        view = memoryview(buffer)
        start = _HEADER.size
        pattern_end = start + pattern_len
        slots_end = pattern_end + 4 * size
        offsets_end = slots_end + 4 * (n + 1)
        if len(buffer) < offsets_end:
            raise ValueError("not a rank table: truncated")
        self.pattern = bytes(view[start:pattern_end]).decode()
        self._slots = view[pattern_end:slots_end].cast("I")  # 4 bytes wherever CPython runs
        self._offsets = view[slots_end:offsets_end].cast("I")
        if self._offsets[0] != offsets_end or self._offsets[n] != len(buffer):
            raise ValueError("not a rank table: truncated")
        self._blob = buffer
        self._mask = size - 1

    @classmethod
    def open(cls, path: Path) -> CompactRanks:
        """The table in a file ``to_bytes`` wrote, mapped read-only. The file must not be
        changed in place while mapped (the token cache replaces its files whole)."""
        with path.open("rb") as file:
            return cls(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ))

    @staticmethod
    def to_bytes(ranks: Mapping[bytes, int], pattern: str) -> bytes:
        """The table of ``ranks`` (whose ranks must be 0..n-1, as tiktoken's are) and its
        pre-tokenizer pattern."""
        n = len(ranks)
        tokens: list[bytes | None] = [None] * n
        for token, rank in ranks.items():
            if not 0 <= rank < n or tokens[rank] is not None:
                raise ValueError("ranks are not 0..n-1")
            tokens[rank] = token
        ordered = [t for t in tokens if t is not None]
        size = 1 << max(1, (2 * n - 1).bit_length())
        mask = size - 1
        encoded = pattern.encode()
        offsets = _uint32(b"")  # where each token starts in the whole table, then its end
        offsets.append(_HEADER.size + len(encoded) + 4 * size + 4 * (n + 1))
        for token in ordered:
            offsets.append(offsets[-1] + len(token))
        slots = _uint32(bytes(4 * size))
        for rank, token in enumerate(ordered):
            at = zlib.crc32(token) & mask
            while slots[at]:
                at = (at + 1) & mask
            slots[at] = rank + 1
        header = _HEADER.pack(_MAGIC, sys.byteorder[:1].encode(), n, size, len(encoded))
        return b"".join((header, encoded, slots.tobytes(), offsets.tobytes(), *ordered))

    def get(self, token: bytes, default: int | None = None) -> int | None:
        """The token's rank, or ``default`` if it is not a token."""
        slots, offsets, blob, mask = self._slots, self._offsets, self._blob, self._mask
        at = zlib.crc32(token) & mask
        while rank := slots[at]:
            rank -= 1
            if blob[offsets[rank]:offsets[rank + 1]] == token:
                return rank
            at = (at + 1) & mask
        return default

    def __contains__(self, token: object) -> bool:
        return isinstance(token, bytes) and self.get(token) is not None

    def __len__(self) -> int:
        return len(self._offsets) - 1


def _uint32(data: bytes | memoryview) -> array.array[int]:
    values = array.array("I")  # 4 bytes wherever CPython runs
    values.frombytes(data)
    return values

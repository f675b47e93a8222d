"""Random ids: task, message, item and lease ids, tokens.

Hex of random bytes from the operating system. ``uuid.uuid4().hex`` gave the same kind of
string through a UUID object (~1.6 us against ~0.3 here); several are made per answer,
and nothing reads them as UUIDs.
"""

from __future__ import annotations

import os


def new_id(length: int = 32) -> str:
    """``length`` random hex digits (128 random bits at the default)."""
    return os.urandom((length + 1) // 2).hex()[:length]

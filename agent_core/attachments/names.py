"""Names of files people send, made safe to keep: no path, no leading dots or dashes,
unicode normalised (NFKC), only letters, digits and a few marks, length-capped in bytes
(the extension kept), never a device name, and unique within the inbox."""

from __future__ import annotations

import re
import unicodedata

#: Bytes a kept name may take (file systems allow 255; room is left for ``.txt`` and a
#: de-duplicating ``-2``).
MAX_NAME_BYTES = 120
_UNSAFE = re.compile(r"[^\w.\-+()\[\] ]+")
_RUNS = re.compile(r"([ _.\-])\1+")
_DEVICES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)),
            *(f"lpt{i}" for i in range(10))}


def safe_name(raw: str, *, fallback: str = "file") -> str:
    """``raw`` (a name a platform or a person gave) as a name safe to keep in the inbox."""
    name = unicodedata.normalize("NFKC", raw or "")
    name = re.split(r"[/\\]", name)[-1]  # the last component of any path
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C")  # controls
    name = _UNSAFE.sub("_", name)
    name = _RUNS.sub(r"\1", name).strip(" ._-")
    if not name or name.split(".")[0].lower() in _DEVICES:
        name = f"{fallback}{'.' + name if name else ''}" if name else fallback
    return _cap(name)


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``stem-2.ext``, ``stem-3.ext``... when it is already taken."""
    if name not in taken:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    for n in range(2, 10_000):
        candidate = _cap(f"{stem}-{n}") + (f".{ext}" if ext else "")
        if candidate not in taken:
            return candidate
    raise ValueError("too many files of the same name")


def _cap(name: str) -> str:
    """``name`` within MAX_NAME_BYTES, cutting the stem and keeping a short extension."""
    if len(name.encode()) <= MAX_NAME_BYTES:
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or len(ext) > 10 or not stem:
        stem, ext = name, ""
    room = MAX_NAME_BYTES - (len(ext.encode()) + 1 if ext else 0)
    cut = stem.encode()[:room].decode("utf-8", errors="ignore").rstrip(" ._-") or "file"
    return f"{cut}.{ext}" if ext else cut

"""The images of a model call: each image part's resized copy read from the gateway's disk
for that call only (the store keeps the part, never the bytes), or a note saying why the
model is not shown it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

from ..messages import Message, Part

log = logging.getLogger(__name__)

#: What an image part says when the model is not shown its pixels.
CANNOT_SEE = ("this model cannot see images (LLM_VISION): the image is not shown to you; "
              "say so if the person expects you to see it")
GONE = "the image is no longer kept on this gateway: it is not shown to you"


async def with_images(messages: list[Message]) -> list[Message]:
    """``messages`` with the bytes of their images loaded (changed copies; the originals,
    which snapshots share, are left alone)."""
    if not any(p.kind == "image" and p.rendition for m in messages for p in m.parts):
        return messages
    return await asyncio.to_thread(_load_all, messages)


def without_images(messages: list[Message]) -> list[Message]:
    """``messages`` with every image part marked as not shown (a model that cannot see)."""
    return [dataclasses.replace(m, parts=[_unseen(p, CANNOT_SEE) if p.kind == "image"
                                          else p for p in m.parts])
            if any(p.kind == "image" for p in m.parts) else m for m in messages]


def shows_images(messages: list[Message]) -> bool:
    """Whether any image's bytes are loaded."""
    return any(p.data is not None for m in messages for p in m.parts)


def _load_all(messages: list[Message]) -> list[Message]:
    return [dataclasses.replace(m, parts=[_load(p) for p in m.parts])
            if any(p.kind == "image" and p.rendition for p in m.parts) else m
            for m in messages]


def _load(part: Part) -> Part:
    if part.kind != "image" or not part.rendition:
        return part
    try:
        data = Path(part.rendition).read_bytes()
    except OSError as exc:
        log.info("image %s not shown: %s", part.name, type(exc).__name__)
        return _unseen(part, GONE)
    kind = "image/png" if data.startswith(b"\x89PNG") else "image/jpeg"
    return dataclasses.replace(part, data=data, data_type=kind)


def _unseen(part: Part, why: str) -> Part:
    note = f"{part.note}; {why}" if part.note and why not in part.note else (part.note or why)
    return dataclasses.replace(part, data=None, note=note)

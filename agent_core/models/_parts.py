"""The files a person sent, as each provider takes them: the text the model reads of a
message (its documents' text included) and the images it is shown, base64 in the body."""

from __future__ import annotations

import base64
from typing import Any

from ..messages import Message


def images_of(m: Message) -> list[tuple[str, str]]:
    """(media type, base64 data) of each image of ``m`` loaded for this call."""
    return [(p.data_type or p.mime_type, base64.b64encode(p.data).decode("ascii"))
            for p in m.parts if p.kind == "image" and p.data is not None]


def openai_content(m: Message) -> str | list[dict[str, Any]]:
    """A user message's content for chat/completions: text, or text and image_url parts
    (data URLs) when it shows images."""
    images = images_of(m)
    if not images:
        return m.text
    return [{"type": "text", "text": m.text}, *(
        {"type": "image_url", "image_url": {"url": f"data:{kind};base64,{data}"}}
        for kind, data in images)]


def anthropic_blocks(m: Message) -> list[dict[str, Any]]:
    """A user message's content blocks for the Messages API: text, then image blocks."""
    return [{"type": "text", "text": m.text or "(empty)"}, *(
        {"type": "image", "source": {"type": "base64", "media_type": kind, "data": data}}
        for kind, data in images_of(m))]


def ollama_message(m: Message) -> dict[str, Any]:
    """A user message for Ollama's /api/chat: text, and its images as base64 ``images``."""
    body: dict[str, Any] = {"role": m.role, "content": m.text}
    images = images_of(m)
    if images:
        body["images"] = [data for _, data in images]
    return body

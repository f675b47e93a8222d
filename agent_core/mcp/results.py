"""An MCP tool result in the runtime's terms: what the model reads, what the chat shows.

Text blocks become the observation's text; ``structuredContent``, when the server sends it,
is what the model gets as JSON; images and audio are described to the model in one short
line and handed to the chat as attachments (saved into the task's sandbox when it has one);
embedded resources give their text, or a line for binary ones; links are listed. An
``isError`` result raises ToolError with the server's text, so the model reads it as a tool
error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import mimetypes
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from ..errors import ToolError
from ..tools.context import ToolContext
from ..tools.sandbox import Sandbox

#: Longest text of a binary block's description, and of an error the model reads.
_ERROR_LIMIT = 2000


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file a tool produced for the person, not only for the model."""

    name: str
    mime_type: str
    data: bytes


@dataclass(slots=True)
class Converted:
    """The output the model reads, and the attachments the chat may show."""

    output: Any
    attachments: list[Attachment] = field(default_factory=list)


def convert(result: types.CallToolResult, *, tool: str) -> Converted:
    """``result`` as output and attachments; raises ToolError for ``isError`` results."""
    texts: list[str] = []
    attachments: list[Attachment] = []
    for block in result.content:
        text, attachment = _block(block, tool=tool, index=len(attachments))
        if text:
            texts.append(text)
        if attachment is not None:
            attachments.append(attachment)
    if result.is_error:
        message = "\n".join(texts).strip() or f"{tool} reported an error without a message"
        raise ToolError(message[:_ERROR_LIMIT])
    text = "\n".join(texts)
    structured = result.structured_content
    if isinstance(structured, dict) and len(structured) == 1 and \
            next(iter(structured.values())) == text:
        return Converted(text, attachments)  # {"result": text}: the text says it all
    if structured is not None:
        extra = [t for t in texts if not _same_json(t, structured)]
        if not extra:
            return Converted(structured, attachments)
        return Converted({"structured": structured, "text": "\n".join(extra)}, attachments)
    return Converted(text, attachments)


def _block(block: Any, *, tool: str, index: int) -> tuple[str, Attachment | None]:
    match block:
        case types.TextContent():
            return block.text, None
        case types.ImageContent() | types.AudioContent():
            data = _decode(block.data)
            if data is None:
                return f"[{block.type} {block.mime_type}: not valid base64, dropped]", None
            name = _name(tool, index, block.mime_type, data)
            return (f"[{block.type} {block.mime_type}, {len(data)} bytes, shown to the user "
                    f"as {name}]", Attachment(name, block.mime_type, data))
        case types.EmbeddedResource():
            return _resource(block.resource), None
        case types.ResourceLink():
            label = block.title or block.name
            what = f" ({block.mime_type})" if block.mime_type else ""
            return f"[link: {label}{what} {block.uri}]", None
        case _:
            return f"[{getattr(block, 'type', type(block).__name__)} content not shown]", None


def _resource(resource: types.TextResourceContents | types.BlobResourceContents) -> str:
    if isinstance(resource, types.TextResourceContents):
        return f"[resource {resource.uri}]\n{resource.text}"
    data = _decode(resource.blob)
    size = f"{len(data)} bytes" if data is not None else "not valid base64"
    return f"[resource {resource.uri}: {resource.mime_type or 'binary'}, {size}]"


def _decode(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _name(tool: str, index: int, mime_type: str, data: bytes) -> str:
    suffix = mimetypes.guess_extension(mime_type.split(";", 1)[0].strip()) or ".bin"
    return f"{tool}-{index + 1}-{hashlib.sha256(data).hexdigest()[:8]}{suffix}"


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def deliver(converted: Converted, ctx: ToolContext) -> Any:
    """Save the attachments where the person can be shown them (the task's sandbox, under
    ``attachments/``, within its quotas) and tell whoever watches; returns the model's
    output."""
    sandbox = ctx.sandbox
    for attachment in converted.attachments:
        saved: str | None = None
        if sandbox is not None and _fits(sandbox, len(attachment.data)):
            path = sandbox.resolve(f"attachments/{attachment.name}")
            path.parent.mkdir(parents=True, exist_ok=True)
            with sandbox.open_write(path, append=False) as handle:
                handle.write(attachment.data)
            saved = sandbox.relative(path)
        ctx.attach(attachment.name, attachment.mime_type, len(attachment.data), path=saved)
    return converted.output


def _fits(sandbox: Sandbox, size: int) -> bool:
    limits = sandbox.limits
    return size <= limits.max_file_bytes and sandbox.usage() + size <= limits.max_total_bytes

"""The file parts of A2A messages: checked before the message is accepted (the limits of a
message's files, and the SSRF guard on a URL; a JSON-RPC error says what is refused), then
handed to the inbox like any message's files: bytes kept in the store until the worker
takes them, a URL fetched by the worker under the SSRF guard (every hop vetted again, the
connection pinned to the vetted addresses). Only the gateway's own agent takes files: a hub
agent's HMP request carries text and data."""

from __future__ import annotations

from adapters import a2a
from adapters.base import Attachment
from agent_core import AddressRefused, vet_url
from agent_core.attachments import safe_name

from .fetching import FileLimits, Stash
from .settings import GatewaySettings

#: What the gateway's own agent reads: text, JSON, and files (documents, images, audio).
INPUT_MODES = ("text/plain", "application/json", "application/pdf", "text/csv", "text/html",
               "text/markdown", "image/png", "image/jpeg", "image/gif", "image/webp",
               "audio/ogg", "audio/mpeg", "audio/wav", "application/octet-stream")


async def check(inbound: a2a.Inbound, settings: GatewaySettings, *, to_gateway: bool
                ) -> None:
    """RpcError unless the message's file parts may be taken."""
    parts = inbound.files
    if not to_gateway:
        raise a2a.RpcError(a2a.UNSUPPORTED, "a file part is not accepted here: a hub agent "
                           "takes text and data parts; send files to the gateway's own "
                           "agent (/a2a/gateway)")
    limits = FileLimits(settings)
    sizes = [(p.name, len(p.data)) for p in parts if p.data is not None]
    reason = limits.too_many(len(parts)) or next(
        (r for r in (limits.too_big(name or "file", size) for name, size in sizes) if r),
        None) or limits.too_much(sum(size for _, size in sizes))
    if reason:
        raise a2a.RpcError(a2a.INVALID_PARAMS, f"file parts refused: {reason}")
    for part in parts:
        if part.url is None:
            continue
        try:
            await vet_url(part.url, internal_ok=settings.hermes_file_url_internal_hosts)
        except AddressRefused as exc:
            raise a2a.RpcError(a2a.INVALID_PARAMS, f"file part {part.name[:100]!r}: its URL "
                               f"is not allowed ({exc}; HERMES_FILE_URL_INTERNAL_HOSTS "
                               "names internal hosts a file may come from)") from None


async def attachments(inbound: a2a.Inbound, stash: Stash, conversation_id: str
                      ) -> list[Attachment]:
    """The message's file parts as the attachments of its message (bytes kept in the
    store for the worker)."""
    found = []
    for part in inbound.files:
        name = safe_name(part.name, fallback="file")
        if part.data is not None:
            found.append(Attachment(source="stash", name=name, mime_type=part.media_type,
                                    ref=await stash.put(conversation_id, part.data),
                                    size=len(part.data)))
        elif part.url is not None:
            found.append(Attachment(source="url", ref=part.url, name=name,
                                    mime_type=part.media_type))
    return found

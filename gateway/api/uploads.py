"""Files sent with a message to ``/agent/run*``: base64 parts of a JSON body, or the file
fields of a multipart/form-data body, read under the limits (each file, how many, all of
them together; a file stops being read past its limit) and kept in the store until the
worker moves them into the conversation's inbox (``gateway.fetching.Stash``)."""

from __future__ import annotations

import binascii
from dataclasses import dataclass
from typing import Any

import pybase64
from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from adapters.base import Attachment

from ..fetching import Stash
from ..settings import GatewaySettings
from ._http import bad, too_large

MB = 1024 * 1024
#: Fields of a multipart body besides its files, and the most each may hold.
FIELDS = {"text": 80_000, "conversation_id": 1_000, "user_id": 1_000}


@dataclass(frozen=True, slots=True)
class Upload:
    """One file of a request, read."""

    name: str
    content_type: str
    data: bytes


class Limits:
    """The deployment's limits on the files of one message."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.file = int(settings.hermes_max_file_mb * MB)
        self.count = settings.hermes_max_files_per_message
        self.total = int(settings.hermes_max_files_mb_per_task * MB)

    def json_body(self) -> int:
        """The largest JSON body: 1 MB of text and one file's worth of base64."""
        return MB + self.file * 4 // 3 + 4

    def check(self, uploads: list[Upload], adding: int = 0) -> None:
        """413 naming the limit the files pass, if any."""
        if len(uploads) + adding > self.count:
            raise too_large(f"at most {self.count} files a message "
                            "(HERMES_MAX_FILES_PER_MESSAGE)")
        if sum(len(u.data) for u in uploads) > self.total:
            raise too_large(f"the files of a message may be {self.total // MB} MB together "
                            "(HERMES_MAX_FILES_MB_PER_TASK)")

    def one(self, name: str, size: int) -> None:
        if size > self.file:
            raise too_large(f"{name[:100]!r} is over {self.file / MB:g} MB, the limit of a "
                            "file (HERMES_MAX_FILE_MB)")


def decoded(parts: list[Any], limits: Limits) -> list[Upload]:
    """The base64 file parts of a JSON body (already validated), decoded."""
    limits.check([], adding=len(parts))
    uploads = []
    for part in parts:
        limits.one(part.name, len(part.data) * 3 // 4)
        try:
            data = pybase64.b64decode(part.data, validate=True)
        except (binascii.Error, ValueError):
            raise bad(400, f"file {part.name[:100]!r}: data is not base64") from None
        limits.one(part.name, len(data))
        uploads.append(Upload(part.name, part.content_type or "", data))
    limits.check(uploads)
    return uploads


async def multipart(request: web.Request, limits: Limits) -> tuple[dict[str, str],
                                                                    list[Upload]]:
    """The fields and files of a multipart/form-data body; each read only up to its limit."""
    try:
        reader = await request.multipart()
    except (ValueError, AssertionError, KeyError) as exc:
        raise bad(400, f"unreadable multipart body: {exc}") from None
    fields: dict[str, str] = {}
    uploads: list[Upload] = []
    while True:
        try:
            part = await reader.next()
        except (ValueError, AssertionError, KeyError, HttpProcessingError) as exc:
            raise bad(400, f"unreadable multipart body: {exc}") from None
        if part is None:
            break
        if not isinstance(part, BodyPartReader):
            raise bad(400, "nested multipart bodies are not accepted")
        if part.filename is not None:
            limits.check(uploads, adding=1)
            data = await _read(part, limits.file, part.filename)
            uploads.append(Upload(part.filename, part.headers.get("Content-Type", ""), data))
            limits.check(uploads)
        elif part.name in FIELDS:
            raw = await _read(part, FIELDS[part.name], part.name)
            try:
                fields[part.name] = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise bad(400, f"field {part.name!r} is not UTF-8") from None
        else:
            raise bad(400, f"unknown field {str(part.name)[:50]!r}: send text, "
                           "conversation_id, user_id and files")
    return fields, uploads


async def _read(part: BodyPartReader, limit: int, name: str) -> bytes:
    chunks, total = [], 0
    while chunk := await _chunk(part):
        total += len(chunk)
        if total > limit:
            raise too_large(f"{name[:100]!r} is over {limit / MB:g} MB, the limit of a "
                            "file (HERMES_MAX_FILE_MB)" if part.filename is not None else
                            f"field {name!r} is too long")
        chunks.append(chunk)
    return b"".join(chunks)


async def _chunk(part: BodyPartReader) -> bytes:
    try:
        return await part.read_chunk(64 * 1024)
    except (ValueError, AssertionError, HttpProcessingError) as exc:
        raise bad(400, f"unreadable multipart body: {exc}") from None


async def stashed(stash: Stash, conversation_id: str, uploads: list[Upload]
                  ) -> list[Attachment]:
    """The uploads kept in the store, as the message's attachments."""
    return [Attachment(source="stash", ref=await stash.put(conversation_id, u.data),
                       name=u.name, mime_type=u.content_type, size=len(u.data))
            for u in uploads]

"""Where the bytes of a file that came with a message come from, read under a limit.

A platform's file comes through its channel (``Channel.download``); an A2A file part's URL
is fetched under the SSRF guard (every hop vetted, connections pinned to the vetted
addresses); a file the API received waits in the store (``Stash``) until the worker moves
it into the inbox. Whatever the source, the bytes go to disk as they arrive, 64 KB at a
time, and reading stops once the limit is passed: the gateway never holds more than the
limit and one chunk.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import aiohttp

from adapters.base import Attachment, Channel
from adapters.errors import DownloadError
from agent_core import AddressRefused, PinnedResolver, vet_url
from agent_core.ids import new_id
from agent_core.store.keys import Keys

CHUNK = 64 * 1024
DOWNLOAD_SECONDS = 120.0
#: How long a file the API received waits in the store for its task to start.
STASH_SECONDS = 3600


class TooLarge(Exception):
    """A file grew past its limit while being read (``limit`` bytes)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"over {limit} bytes")
        self.limit = limit


async def save(chunks: AsyncIterator[bytes], path: Path, limit: int) -> int:
    """Write ``chunks`` to a new file at ``path``; its size, or TooLarge (the file is
    removed) as soon as it passes ``limit``. DownloadError passes through (the file is
    removed too)."""
    total = 0
    try:
        async with contextlib.aclosing(chunks):  # type: ignore[type-var]
            with open(path, "xb") as out:  # noqa: PTH123, ASYNC230 - 64 KB local writes
                async for chunk in chunks:
                    total += len(chunk)
                    if total > limit:
                        raise TooLarge(limit)
                    out.write(chunk)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # noqa: PTH108
        raise
    return total


class Stash:
    """Files the API received with a message, kept in the store (one key each, in the
    conversation's slot) until the worker takes them, or an hour passes."""

    def __init__(self, redis: Any, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def put(self, conversation_id: str, data: bytes) -> str:
        """Keep ``data``; the id the worker takes it by."""
        upload_id = new_id()
        await self.redis.set(self.keys.upload(conversation_id, upload_id), data,
                             ex=STASH_SECONDS)
        return upload_id

    async def take(self, conversation_id: str, upload_id: str) -> AsyncIterator[bytes]:
        """The file's bytes (in chunks), removed from the store."""
        key = self.keys.upload(conversation_id, upload_id)
        data = await self.redis.get(key)
        if data is None:
            raise DownloadError("the file was not kept long enough to be read (it waits "
                                "an hour for its task)")
        await self.redis.delete(key)
        for start in range(0, len(data), CHUNK):
            yield bytes(data[start:start + CHUNK])


async def from_url(url: str, *, internal_ok: Collection[str]) -> AsyncIterator[bytes]:
    """The body of a file URL someone else chose, in chunks: each hop (at most 3
    redirects) vetted by the SSRF guard, the connection pinned to the vetted addresses."""
    current = url
    for _ in range(4):
        try:
            vetted = await vet_url(current, internal_ok=internal_ok)
        except AddressRefused as exc:
            raise DownloadError(f"the file's URL is not allowed: {exc}") from None
        connector = aiohttp.TCPConnector(resolver=PinnedResolver(vetted.host, vetted.addresses),
                                         use_dns_cache=False)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(
                total=DOWNLOAD_SECONDS, sock_read=30)) as session:
            try:
                async with session.get(current, allow_redirects=False,
                                       auto_decompress=False) as response:
                    if response.status in (301, 302, 303, 307, 308) and \
                            response.headers.get("Location"):
                        current = urljoin(current, response.headers["Location"])
                        continue
                    if response.status != 200:
                        raise DownloadError(f"the file's URL answered HTTP {response.status}")
                    async for chunk in response.content.iter_chunked(CHUNK):
                        yield chunk
                    return
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise DownloadError(f"fetching the file's URL failed ({type(exc).__name__})"
                                    ) from None
    raise DownloadError("the file's URL redirected too many times")


def chunks_of(attachment: Attachment, *, conversation_id: str, channel: Channel | None,
              stash: Stash, internal_ok: Collection[str]) -> AsyncIterator[bytes]:
    """Where the bytes of ``attachment`` come from."""
    match attachment.source:
        case "stash":
            return stash.take(conversation_id, attachment.ref)
        case "url":
            return from_url(attachment.ref, internal_ok=internal_ok)
        case "slack" | "telegram":
            if channel is None or channel.name != attachment.source:
                raise DownloadError(f"the {attachment.source} channel is not configured here")
            try:
                return channel.download(attachment)
            except NotImplementedError:
                raise DownloadError(f"{attachment.source} files cannot be fetched") from None

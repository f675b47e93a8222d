"""Files that come with messages: how Slack and Telegram describe them (as ``Attachment``),
and fetching them from the platform that hosts them: one streamed GET, read in chunks for
the caller to stop at its limit. A credential is sent only to the hosts the channel names
(its own file host), and a redirect is followed only to one of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp

from .base import Attachment
from .errors import DownloadError

CHUNK = 64 * 1024
#: The longest a download may take.
DOWNLOAD_SECONDS = 120.0
#: The largest file a bot may fetch from Telegram's cloud Bot API (getFile).
TELEGRAM_DOWNLOAD_LIMIT = 20 * 1024 * 1024
#: Where Slack keeps the files shared in a workspace: the bot token goes there only.
SLACK_FILE_HOSTS = frozenset({"files.slack.com"})
_REDIRECTS = (301, 302, 303, 307, 308)


def host_of(url: str) -> str:
    """The lower-case host of ``url`` ("" for none)."""
    return (urlsplit(url).hostname or "").lower().rstrip(".")


async def stream(url: str, *, hosts: Collection[str], headers: dict[str, str] | None = None,
                 what: str = "the platform") -> AsyncIterator[bytes]:
    """The body of ``url`` in chunks of at most 64 KB; DownloadError when the host is not
    one of ``hosts``, the answer is an error, or the connection drops before the end."""
    current = url
    client_timeout = aiohttp.ClientTimeout(total=DOWNLOAD_SECONDS, sock_read=30)
    async with aiohttp.ClientSession(timeout=client_timeout) as session:
        for _ in range(3):
            if host_of(current) not in hosts or urlsplit(current).scheme not in ("http",
                                                                                  "https"):
                raise DownloadError(f"the file is not on {what}'s own file host; not fetched")
            try:
                async with session.get(current, headers=headers, allow_redirects=False,
                                       auto_decompress=False) as response:
                    if response.status in _REDIRECTS and response.headers.get("Location"):
                        current = urljoin(current, response.headers["Location"])
                        continue
                    if response.status != 200:
                        raise DownloadError(f"{what} answered HTTP {response.status} for "
                                            "the file")
                    if "text/html" in response.headers.get("Content-Type", "") \
                            and what == "Slack":
                        # Slack's sign-in page: the token may not read files.
                        raise DownloadError("Slack did not hand the file over: the app needs "
                                            "the files:read scope")
                    expected = response.content_length
                    got = 0
                    async for chunk in response.content.iter_chunked(CHUNK):
                        got += len(chunk)
                        yield chunk
                    if expected is not None and got < expected:
                        raise DownloadError(f"the download from {what} stopped after {got} "
                                            f"of {expected} bytes")
                    return
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise DownloadError(f"the download from {what} failed "
                                    f"({type(exc).__name__})") from None
        raise DownloadError(f"{what} redirected the download too many times")


def slack_attachments(files: Any) -> list[Attachment]:
    """The files shared with a message (file_share), as Slack describes them."""
    found = []
    for file in files if isinstance(files, list) else ():
        if not isinstance(file, dict) or file.get("mode") in ("tombstone", "hidden_by_limit"):
            continue
        url = file.get("url_private_download") or file.get("url_private")
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
            continue
        mime = str(file.get("mimetype") or "")
        size = file.get("size")
        found.append(Attachment(
            source="slack", ref=url, name=str(file.get("name") or file.get("title") or ""),
            mime_type=mime, size=size if isinstance(size, int) else None,
            hint="image" if mime.startswith("image/") else
            "audio" if mime.startswith("audio/") else "file"))
    return found


def telegram_attachments(message: Any) -> list[Attachment]:
    """The file a Telegram message carries (a document, a photo in the largest size a bot
    may fetch, a voice note, audio, a video note), as Telegram describes it."""
    found: list[Attachment] = []
    if message.document is not None:
        doc = message.document
        found.append(Attachment(source="telegram", ref=doc.file_id, name=doc.file_name or "",
                                mime_type=doc.mime_type or "", size=doc.file_size))
    if message.photo:
        fits = [p for p in message.photo if (p.file_size or 0) <= TELEGRAM_DOWNLOAD_LIMIT]
        best = max(fits or message.photo, key=lambda p: (p.width * p.height, p.file_size or 0))
        found.append(Attachment(source="telegram", ref=best.file_id,
                                name=f"photo-{best.file_unique_id}.jpg",
                                mime_type="image/jpeg", size=best.file_size, hint="image"))
    for field, hint in (("voice", "voice"), ("audio", "audio"), ("video_note", "video_note")):
        media = getattr(message, field, None)
        if media is not None:
            default = {"voice": "voice.ogg", "audio": "audio", "video_note": "video-note.mp4"}
            found.append(Attachment(
                source="telegram", ref=media.file_id,
                name=getattr(media, "file_name", None) or default[field],
                mime_type=getattr(media, "mime_type", None) or "", size=media.file_size,
                hint=hint))
    return found

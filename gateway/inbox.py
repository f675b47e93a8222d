"""The inbox: the files that came with a message, received by the worker before its task
starts.

Each file is checked against the limits (HERMES_MAX_FILE_MB, files per message, the bytes
of one message and of the conversation's day), fetched (``fetching``: reading stops at the
limit), kept in the conversation's inbox under a safe, unique name, typed from its content,
and turned into what the model is shown (``agent_core.attachments``: a document's text, an
image resized, in a capped child process; a voice note transcribed, ``speech``). What a
refusal or a failure leaves is a plain sentence naming the limit or the reason, for the
model (the part's note) and for the person (a notice), never a traceback. A message's
files are received once: a task started again finds them as they were received.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.base import Attachment, Channel, InboundMessage
from adapters.errors import DownloadError
from agent_core.attachments import ConvertLimits, Sniffed, convert, safe_name, sniff, unique_name
from agent_core.attachments.view import CANNOT_SEE
from agent_core.context.tokens import TokenCounter
from agent_core.ids import new_id
from agent_core.messages import Part
from agent_core.store.keys import Keys
from agent_core.tools.sandbox import INBOX, inbox_dir

from .fetching import Stash, TooLarge, chunks_of, save
from .settings import GatewaySettings
from .speech import Transcriber, TranscriptionError

log = logging.getLogger(__name__)

MB = 1024 * 1024
_PLAIN = ("text", "markdown", "csv")


@dataclass(slots=True)
class Received:
    """A message's files as the task gets them: the parts of its instruction, what the
    person is told, and the speech of its voice notes (the person's words)."""

    parts: list[Part] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    transcript: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"parts": [p.to_dict() for p in self.parts], "notices": self.notices,
                "transcript": self.transcript}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Received:
        return cls([Part.from_dict(p) for p in data.get("parts", ())],
                   list(data.get("notices", ())), str(data.get("transcript", "")))


class Inbox:
    """Receives the files of messages into their conversations' inboxes."""

    def __init__(self, *, settings: GatewaySettings, redis: Any, keys: Keys,
                 channels: dict[str, Channel], counter: TokenCounter, budget_tokens: int
                 ) -> None:
        self.settings = settings
        self.redis = redis
        self.keys = keys
        self.stash = Stash(redis, keys)
        self.channels = channels
        self.counter = counter
        #: Tokens the documents of one message may take in the window.
        self.budget_tokens = max(256, int(budget_tokens * settings.hermes_file_context_share))
        self.limits = ConvertLimits(seconds=settings.hermes_file_convert_seconds,
                                    memory_mb=settings.hermes_file_convert_mb)
        key = settings.stt_api_key or (settings.llm_api_key if not settings.stt_base_url
                                       else None)
        self.transcriber = Transcriber(settings.stt_endpoint, settings.stt_model_name,
                                       key.get_secret_value() if key else None)

    async def receive(self, msg: InboundMessage, task_id: str) -> Received:
        """The files of ``msg`` (the message of task ``task_id``), received."""
        if not msg.attachments:
            return Received()
        inbox = inbox_dir(self.settings.hermes_data_dir, msg.conversation_id)
        manifest = inbox.parent / ".received" / f"{task_id}.json"
        if manifest.is_file():  # received before this task was started again
            return Received.from_dict(json.loads(manifest.read_text("utf-8")))
        inbox.mkdir(parents=True, exist_ok=True)
        (inbox.parent / ".incoming").mkdir(exist_ok=True)
        (inbox.parent / ".renditions").mkdir(exist_ok=True)
        manifest.parent.mkdir(exist_ok=True)
        received = Received()
        per_message = self.settings.hermes_max_files_per_message
        taken, skipped = msg.attachments[:per_message], msg.attachments[per_message:]
        if skipped:
            names = ", ".join(safe_name(a.name) for a in skipped)
            self._refuse(received, skipped, f"only the first {per_message} files of a "
                         f"message are read (HERMES_MAX_FILES_PER_MESSAGE); not read: {names}")
        used = 0
        texts = sum(1 for a in taken if a.hint not in ("image", "voice", "audio",
                                                        "video_note")) or 1
        for attachment in taken:
            part = await self._one(msg, task_id, attachment, inbox=inbox, received=received,
                                   used=used, text_tokens=max(256, self.budget_tokens // texts))
            used += part.size if part.path else 0
            received.parts.append(part)
        manifest.write_text(json.dumps(received.to_dict(), ensure_ascii=False), "utf-8")
        return received

    # --- one file ------------------------------------------------------------------------
    async def _one(self, msg: InboundMessage, task_id: str, attachment: Attachment, *,
                   inbox: Path, received: Received, used: int, text_tokens: int) -> Part:
        settings = self.settings
        name = safe_name(attachment.name, fallback="file")
        file_limit = int(settings.hermes_max_file_mb * MB)
        task_room = int(settings.hermes_max_files_mb_per_task * MB) - used
        day = time.strftime("%Y%m%d", time.gmtime())
        day_key = self.keys.files_day(msg.conversation_id, day)
        day_room = int(settings.hermes_max_files_mb_per_day * MB) - int(
            await self.redis.get(day_key) or 0)
        limit, which = min((file_limit, f"{_mb(file_limit)} a file (HERMES_MAX_FILE_MB)"),
                           (task_room, f"{_mb(settings.hermes_max_files_mb_per_task * MB)} "
                            "for the files of one message (HERMES_MAX_FILES_MB_PER_TASK)"),
                           (day_room, f"{_mb(settings.hermes_max_files_mb_per_day * MB)} a "
                            "day in this conversation (HERMES_MAX_FILES_MB_PER_DAY)"))
        if limit <= 0:
            return self._refused(received, name, attachment, f"{name} was not read: the "
                                 f"limit of {which} is used up")
        if attachment.size is not None and attachment.size > limit:
            return self._refused(received, name, attachment, f"{name} was not read: it is "
                                 f"{_mb(attachment.size)}, over the limit of {which}")
        incoming = inbox.parent / ".incoming" / f"{task_id}-{new_id(8)}"
        channel = self.channels.get(attachment.source)
        try:
            size = await save(chunks_of(attachment, conversation_id=msg.conversation_id,
                                        channel=channel, stash=self.stash,
                                        internal_ok=settings.hermes_file_url_internal_hosts),
                              incoming, limit)
        except TooLarge:
            return self._refused(received, name, attachment, f"{name} was not read: it is "
                                 f"over the limit of {which}")
        except DownloadError as exc:
            return self._refused(received, name, attachment,
                                 f"{name} could not be fetched: {exc.reason}")
        await self.redis.incrby(day_key, size)
        await self.redis.expire(day_key, 2 * 86400)
        sniffed = sniff(incoming, name)
        name = unique_name(name, _names(inbox))
        target = inbox / name
        incoming.rename(target)
        kind = "audio" if sniffed.kind == "audio" or (
            attachment.hint in ("voice", "video_note") and sniffed.mime_type.startswith(
                ("audio/", "video/"))) else sniffed.kind
        part = Part(kind=kind, name=name, mime_type=sniffed.mime_type, size=size,
                    path=f"{INBOX}/{name}")
        if kind == "document":
            await self._document(part, target, sniffed, received, text_tokens)
        elif kind == "image":
            await self._image(part, target, msg, task_id, received)
        elif kind == "audio":
            await self._audio(part, target, received)
        else:
            part.note = (f"not converted ({sniffed.mime_type}): kept as it is, nothing in it "
                         "was opened or run")
        return part

    async def _document(self, part: Part, path: Path, sniffed: Sniffed, received: Received,
                        text_tokens: int) -> None:
        assert sniffed.converter is not None
        plain = sniffed.converter in _PLAIN
        text_path = path.parent.parent / ".incoming" / f"{new_id(8)}.txt" if plain else \
            path.with_name(unique_name(f"{path.name}.txt", _names(path.parent)))
        done = await convert(path, sniffed.converter, text_out=text_path,
                             image_out=text_path.with_suffix(".img"), limits=self.limits)
        if done.error:
            text_path.unlink(missing_ok=True)
            part.note = f"{part.name} could not be read: {done.error}"
            received.notices.append(part.note)
            return
        part.pages = done.pages
        head = _head(text_path, text_tokens * 6)
        part.text = _within(head, text_tokens, self.counter)
        part.truncated = done.cut or len(part.text) < done.chars
        if plain:
            text_path.unlink(missing_ok=True)
            part.text_path = part.path
        else:
            part.text_path = f"{INBOX}/{text_path.name}"
        if done.cut:
            part.note = (f"its text was cut at {self.limits.max_chars} characters; the rest "
                         "is in the original file only")

    async def _image(self, part: Part, path: Path, msg: InboundMessage, task_id: str,
                     received: Received) -> None:
        rendition = path.parent.parent / ".renditions" / f"{task_id}-{new_id(8)}.img"
        done = await convert(path, "image", text_out=rendition.with_suffix(".txt"),
                             image_out=rendition, limits=self.limits)
        if done.error:
            part.note = f"{part.name} could not be read as an image: {done.error}"
            received.notices.append(part.note)
            return
        part.rendition, part.width, part.height = str(rendition), done.width, done.height
        if self.settings.llm_vision == "false":
            part.note = CANNOT_SEE
            if await self.redis.set(self.keys.told(msg.conversation_id, "vision"), "1",
                                    nx=True):
                received.notices.append(
                    "The model here cannot see images (LLM_VISION=false): it knows an image "
                    "was sent but not what it shows; describe it in words if it matters.")

    async def _audio(self, part: Part, path: Path, received: Received) -> None:
        try:
            spoken = await self.transcriber.transcribe(path, part.mime_type)
        except TranscriptionError as exc:
            part.note = f"a voice note or audio the person sent could not be transcribed: {exc}"
            received.notices.append(str(exc) if exc.unavailable
                                    else f"{part.name} could not be transcribed: {exc}")
            return
        part.note = "transcribed: its transcript is the person's message"
        received.transcript = "\n".join(t for t in (received.transcript, spoken) if t)
        shown = spoken if len(spoken) <= 200 else spoken[:199] + "…"
        received.notices.append(f"heard: {shown}" if spoken else "heard nothing in the audio")

    # --- refusals ------------------------------------------------------------------------
    def _refused(self, received: Received, name: str, attachment: Attachment, why: str
                 ) -> Part:
        received.notices.append(why)
        return Part(kind="file", name=name, mime_type=attachment.mime_type or "unknown",
                    size=attachment.size or 0, note=why)

    def _refuse(self, received: Received, skipped: list[Attachment], why: str) -> None:
        received.notices.append(why[0].upper() + why[1:] + ".")
        for attachment in skipped:
            received.parts.append(Part(kind="file", name=safe_name(attachment.name),
                                       mime_type=attachment.mime_type or "unknown",
                                       size=attachment.size or 0, note=why))


def _names(folder: Path) -> set[str]:
    return {entry.name for entry in folder.iterdir()}


def _head(path: Path, chars: int) -> str:
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.read(chars)


def _within(text: str, tokens: int, counter: TokenCounter) -> str:
    """The start of ``text`` within about ``tokens`` tokens."""
    while text and counter.count(text) > tokens:
        text = text[:int(len(text) * 0.8)]
    return text


def _mb(size: float) -> str:
    return f"{size / MB:.1f} MB" if size >= MB / 10 else f"{int(size)} bytes"

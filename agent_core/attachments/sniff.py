"""What a file is, decided from its content, never from its name or a platform's claim.

Binary formats by their signatures (``puremagic``'s table, pure Python: no libmagic to
install), the Office formats by the parts their ZIP container lists (its central directory
is read; nothing is extracted), text by whether it decodes. The name only tells a text's
flavour apart (CSV, Markdown, HTML, plain). What is not recognised is kept for the files
tool and not converted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

from ..messages import PartKind

#: The converters of ``_convert``: one per format it turns into text (or a resized image).
Converter = Literal["pdf", "docx", "xlsx", "pptx", "csv", "html", "markdown", "text",
                    "image"]
#: Bytes of a file's start that sniffing reads.
HEAD_BYTES = 8192

_OOXML = {"word/document.xml": ("application/vnd.openxmlformats-officedocument."
                                "wordprocessingml.document", "docx"),
          "xl/workbook.xml": ("application/vnd.openxmlformats-officedocument."
                              "spreadsheetml.sheet", "xlsx"),
          "ppt/presentation.xml": ("application/vnd.openxmlformats-officedocument."
                                   "presentationml.presentation", "pptx")}
_IMAGES = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg",
           b"GIF87a": "image/gif", b"GIF89a": "image/gif"}
_TEXT_FLAVOURS: dict[str, tuple[str, Converter]] = {
    "csv": ("text/csv", "csv"), "tsv": ("text/tab-separated-values", "csv"),
    "md": ("text/markdown", "markdown"), "markdown": ("text/markdown", "markdown"),
    "html": ("text/html", "html"), "htm": ("text/html", "html")}


@dataclass(frozen=True, slots=True)
class Sniffed:
    """What a file is: its type, how the model is shown it, and its converter (None: kept
    as it is, not converted)."""

    mime_type: str
    kind: PartKind
    converter: Converter | None


def sniff(path: Path, name: str) -> Sniffed:
    """What the file at ``path`` (sent as ``name``) is."""
    with path.open("rb") as handle:
        return sniff_file(handle, name)


def sniff_file(handle: BinaryIO, name: str) -> Sniffed:
    """What the file open for reading in ``handle`` (seekable, at its start) is."""
    head = handle.read(HEAD_BYTES)
    if b"%PDF-" in head[:1024]:
        return Sniffed("application/pdf", "document", "pdf")
    for magic, mime in _IMAGES.items():
        if head.startswith(magic):
            return Sniffed(mime, "image", "image")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return Sniffed("image/webp", "image", "image")
    if _utf16(head):  # before audio: a little-endian mark reads as an MPEG frame's sync
        return _text(head, name)
    audio = _audio(head)
    if audio is not None:
        return Sniffed(audio, "audio", None)
    if head.startswith(b"PK\x03\x04"):
        handle.seek(0)
        return _zip(handle)
    if _is_text(head):
        return _text(head, name)
    return Sniffed(_other(head), "file", None)


def _text(head: bytes, name: str) -> Sniffed:
    """A text's flavour: by its name's extension, or HTML by how it starts."""
    ext = name.rpartition(".")[2].lower() if "." in name else ""
    mime, converter = _TEXT_FLAVOURS.get(ext, ("text/plain", "text"))
    if converter == "text" and head.lstrip()[:15].lower().startswith(
            (b"<!doctype html", b"<html")):
        mime, converter = "text/html", "html"
    return Sniffed(mime, "document", converter)


def _utf16(head: bytes) -> bool:
    """Text in UTF-16 with its byte-order mark (what Windows tools save as "Unicode")."""
    if not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    body = head[: len(head) - len(head) % 2]
    try:
        text = body.decode("utf-16")
    except UnicodeDecodeError as exc:
        if exc.start < len(body) - 4:  # not just a pair cut at the end of the head
            return False
        text = body[:exc.start].decode("utf-16")
    return all(ch.isprintable() or ch in "\t\n\r\f" for ch in text)


def _audio(head: bytes) -> str | None:
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF
                                   and head[1] & 0xE0 == 0xE0 and head[1] & 0x06):
        return "audio/mpeg"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "audio/webm"
    if head[4:8] == b"ftyp":  # MP4 / M4A (a Telegram video note is an MP4)
        return "audio/mp4" if head[8:11] == b"M4A" else "video/mp4"
    return None


def _zip(handle: BinaryIO) -> Sniffed:
    """An Office document by the part its container lists, else a ZIP kept as it is
    (never extracted)."""
    import zipfile  # here: with shutil, bz2 and lzma, ~4 ms of every `import agent_core`

    try:
        with zipfile.ZipFile(handle) as archive:
            names = set(archive.namelist()[:10_000])
    except (zipfile.BadZipFile, OSError, ValueError):
        return Sniffed("application/zip", "file", None)
    for part, (mime, converter) in _OOXML.items():
        if part in names:
            return Sniffed(mime, "document", converter)  # type: ignore[arg-type]
    return Sniffed("application/zip", "file", None)


def _is_text(head: bytes) -> bool:
    """Whether the start of a file reads as text (UTF-8, or a legacy 8-bit encoding)."""
    if not head:
        return True
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the end of the head
            return _mostly_printable(head)
    return True


def _mostly_printable(head: bytes) -> bool:
    """A legacy 8-bit text (Latin-1, Windows-1252): printable but for line ends."""
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13))
    return controls * 100 < len(head)


def _other(head: bytes) -> str:
    """The type of a file that is not converted, for the model to be told."""
    import puremagic

    if head.startswith(b"\x7fELF"):
        return "application/x-executable"
    if head.startswith(b"MZ"):
        return "application/x-msdownload"
    try:
        found = puremagic.magic_string(head)
    except (puremagic.PureError, ValueError):
        return "application/octet-stream"
    best = next((f for f in found if f.mime_type), None)
    return best.mime_type if best is not None else "application/octet-stream"

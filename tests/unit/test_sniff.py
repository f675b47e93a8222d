"""What a file is, from its content: a corpus of real files built here (documents, images,
audio, text in several flavours and encodings, archives and programs), each with the type,
kind and converter it gets, whatever its name or a platform claims; what is not a
document, an image or audio is kept as it is and never converted."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_core.attachments import sniff, sniff_file
from tests.integration import fixture_files as files

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


def image(kind: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 200, 10)).save(out, kind)
    return out.getvalue()


def pptx() -> bytes:
    from pptx import Presentation

    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = "Quarter"  # type: ignore[union-attr]
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def archive(**members: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as packed:
        for name, data in members.items():
            packed.writestr(name.replace("__", "/"), data)
    return out.getvalue()


MP3_FRAME = b"\xff\xfb\x90\x64" + bytes(413)
ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(120)
EXE = b"MZ\x90\x00\x03\x00\x00\x00\x04\x00" + bytes(54) + b"PE\x00\x00" + bytes(200)

# (name sent, content, the type sniffed, the kind, the converter)
CORPUS: list[tuple[str, Callable[[], bytes], str, str, str | None]] = [
    ("contract.pdf", lambda: files.pdf(["The term is 24 months"]), "application/pdf",
     "document", "pdf"),
    ("letter.docx", lambda: files.docx(["Dear Sir"]), DOCX, "document", "docx"),
    ("stock.xlsx", lambda: files.xlsx([["fruit", "qty"], ["apples", 3]]), XLSX, "document",
     "xlsx"),
    ("deck.pptx", pptx, PPTX, "document", "pptx"),
    ("screen.png", files.png, "image/png", "image", "image"),
    ("photo.jpg", lambda: image("JPEG"), "image/jpeg", "image", "image"),
    ("anim.gif", lambda: image("GIF"), "image/gif", "image", "image"),
    ("sticker.webp", lambda: image("WEBP"), "image/webp", "image", "image"),
    ("voice.ogg", files.ogg_voice, "audio/ogg", "audio", None),
    ("memo.wav", files.wav, "audio/wav", "audio", None),
    ("song.mp3", lambda: b"ID3\x04\x00\x00\x00\x00\x00\x00" + MP3_FRAME, "audio/mpeg",
     "audio", None),
    ("frames.mp3", lambda: MP3_FRAME * 3, "audio/mpeg", "audio", None),
    ("page.html", lambda: b"<p>Hello <b>there</b></p>", "text/html", "document", "html"),
    ("download", lambda: b"<!DOCTYPE html><html><body>hi</body></html>", "text/html",
     "document", "html"),
    ("data.csv", lambda: b"fruit,qty\napples,3\n", "text/csv", "document", "csv"),
    ("data.tsv", lambda: b"fruit\tqty\n", "text/tab-separated-values", "document", "csv"),
    ("notes.md", lambda: b"# Title\n\n- item\n", "text/markdown", "document", "markdown"),
    ("notes.txt", "héllo wörld\n".encode(), "text/plain", "document", "text"),
    ("latin1.txt", lambda: "café au lait, déjà vu\n".encode("latin-1"), "text/plain",
     "document", "text"),
    ("utf16.txt", lambda: "hello".encode("utf-16"), "text/plain", "document", "text"),
    ("empty.txt", lambda: b"", "text/plain", "document", "text"),
    # archives and programs: kept as they are, never converted
    ("photos.zip", lambda: archive(**{"a.txt": b"x", "b__c.txt": b"y"}), "application/zip",
     "file", None),
    ("broken.zip", lambda: b"PK\x03\x04" + bytes(100), "application/zip", "file", None),
    ("tool", lambda: ELF, "application/x-executable", "file", None),
    ("setup.exe", lambda: EXE, "application/x-msdownload", "file", None),
]
# Names and claims that lie: the content decides.
LIARS: list[tuple[str, Callable[[], bytes], str, str, str | None]] = [
    ("invoice.pdf", lambda: ELF, "application/x-executable", "file", None),
    ("report.pdf", files.png, "image/png", "image", "image"),
    ("photo.jpg", lambda: files.pdf(["x"]), "application/pdf", "document", "pdf"),
    ("evil.docx", lambda: archive(**{"word__other.xml": b"<x/>"}), "application/zip",
     "file", None),
    ("notes.exe", lambda: b"just some text\n", "text/plain", "document", "text"),
    ("song.mp3", lambda: b"\x00\x01\x02\x03" * 64, "application/octet-stream", "file", None),
]


@pytest.mark.parametrize(("name", "content", "mime", "kind", "converter"), CORPUS + LIARS,
                         ids=[f"{n}-{m}" for n, _, m, _, _ in CORPUS + LIARS])
def test_the_content_decides(name: str, content: Callable[[], bytes], mime: str, kind: str,
                             converter: str | None, tmp_path: Path) -> None:
    data = content() if callable(content) else content
    path = tmp_path / "incoming"
    path.write_bytes(data)
    found = sniff(path, name)
    assert (found.mime_type, found.kind, found.converter) == (mime, kind, converter)
    assert sniff_file(io.BytesIO(data), name) == found, "an open file is read the same"


def test_what_is_not_a_document_image_or_audio_is_never_converted(tmp_path: Path) -> None:
    for name, content, _, kind, converter in CORPUS + LIARS:
        if kind == "file":
            path = tmp_path / name
            path.write_bytes(content())
            assert sniff(path, name).converter is None and converter is None


def test_an_archive_is_read_for_its_list_of_parts_only(tmp_path: Path) -> None:
    """An Office file is told apart by the names its container lists: nothing in it is
    unpacked, so a member that would take gigabytes is never read."""
    path = tmp_path / "bomb.docx"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as packed, \
            packed.open("huge.bin", "w") as member:
        for _ in range(64):
            member.write(bytes(1024 * 1024))
    assert path.stat().st_size < 1024 * 1024
    assert sniff(path, "bomb.docx").mime_type == "application/zip"

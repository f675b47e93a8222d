"""The converter's child process: one file in, its text (or a resized image) out.

Run as ``python -m agent_core.attachments._convert`` by ``convert.convert`` under a memory
and time limit: it reads the job as JSON on stdin, writes the text to ``text_out`` (at most
``max_chars`` characters, page or slide markers kept) or the image to ``image_out``, and
answers JSON on stdout. Nothing is executed, no archive is extracted, no network is used.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class _Full(Exception):
    """The text reached its limit."""


class _Text:
    """Text written to the output, up to a number of characters."""

    def __init__(self, path: Path, limit: int) -> None:
        self.out = path.open("w", encoding="utf-8")
        self.limit = limit
        self.chars = 0
        self.cut = False

    def add(self, text: str) -> None:
        room = self.limit - self.chars
        if len(text) > room:
            self.out.write(text[:room])
            self.chars, self.cut = self.limit, True
            raise _Full
        self.out.write(text)
        self.chars += len(text)


def _pdf(path: Path, text: _Text) -> dict[str, Any]:
    from pypdf import PdfReader

    reader = PdfReader(path)
    if reader.is_encrypted and not reader.decrypt(""):
        raise ValueError("the PDF is protected by a password")
    pages = len(reader.pages)
    for number, page in enumerate(reader.pages, start=1):
        text.add(f"\n--- page {number} of {pages} ---\n")
        text.add((page.extract_text() or "").strip() + "\n")
    return {"pages": pages}


def _docx(path: Path, text: _Text) -> dict[str, Any]:
    import docx

    document = docx.Document(str(path))
    for block in document.element.body.iterchildren():
        tag = block.tag.rpartition("}")[2]
        if tag == "p":
            text.add("".join(node.text or "" for node in block.iter()
                             if node.tag.endswith("}t")) + "\n")
        elif tag == "tbl":
            for row in block.iter():
                if row.tag.endswith("}tr"):
                    cells = ["".join(t.text or "" for t in cell.iter() if t.tag.endswith("}t"))
                             for cell in row if cell.tag.endswith("}tc")]
                    text.add("| " + " | ".join(cells) + " |\n")
    return {}


def _xlsx(path: Path, text: _Text) -> dict[str, Any]:
    import openpyxl

    # read_only streams the rows: a 100 000-row sheet is read only as far as the text goes.
    book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        for sheet in book.worksheets:
            text.add(f"\n--- sheet {sheet.title} ---\n")
            for row in sheet.iter_rows(values_only=True):
                if any(v is not None for v in row):
                    text.add(",".join("" if v is None else str(v) for v in row) + "\n")
    finally:
        book.close()
    return {}


def _pptx(path: Path, text: _Text) -> dict[str, Any]:
    from pptx import Presentation

    deck = Presentation(str(path))
    slides = len(deck.slides)
    for number, slide in enumerate(deck.slides, start=1):
        text.add(f"\n--- slide {number} of {slides} ---\n")
        for shape in slide.shapes:
            if shape.has_text_frame:
                text.add(shape.text_frame.text + "\n")
        if slide.has_notes_slide:
            text.add("Notes: " + slide.notes_slide.notes_text_frame.text + "\n")
    return {"pages": slides}


def _decoded(path: Path) -> str:
    from charset_normalizer import from_bytes

    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        best = from_bytes(raw).best()
        return str(best) if best is not None else raw.decode("latin-1")


def _plain(path: Path, text: _Text) -> dict[str, Any]:
    text.add(_decoded(path))
    return {}


def _html(path: Path, text: _Text) -> dict[str, Any]:
    import lxml.html

    root = lxml.html.document_fromstring(_decoded(path) or "<html></html>")
    for element in root.xpath("//script|//style|//template|//noscript"):
        element.drop_tree()
    for element in root.iter(*_BLOCKS):
        element.tail = "\n" + (element.tail or "")  # a block ends its line
    for line in _lines(root.text_content()):
        text.add(line + "\n")
    return {}


_BLOCKS = ("p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "table",
           "section", "article", "blockquote", "ul", "ol", "td", "th")


def _lines(raw: str) -> Iterator[str]:
    for raw_line in raw.splitlines():
        line = " ".join(raw_line.split())
        if line:
            yield line


def _image(path: Path, job: dict[str, Any]) -> dict[str, Any]:
    from PIL import Image, ImageOps

    edge, max_bytes = int(job["max_edge"]), int(job["max_image_bytes"])
    with Image.open(path) as image:
        image.draft("RGB", (edge, edge))  # JPEG: decode at the smallest scale that fits
        picture = ImageOps.exif_transpose(image)
        picture.thumbnail((edge, edge))
        alpha = (picture.mode in ("RGBA", "LA", "P") and "transparency" in picture.info) \
            or picture.mode in ("RGBA", "LA")
        picture = picture.convert("RGBA" if alpha else "RGB")
        for quality in (85, 70, 55, 40):
            buffer = io.BytesIO()
            if alpha:
                picture.save(buffer, "PNG", optimize=True)
            else:
                picture.save(buffer, "JPEG", quality=quality)
            if buffer.tell() <= max_bytes or alpha:
                break
        if buffer.tell() > max_bytes:
            picture = picture.convert("RGB")
            picture.thumbnail((edge // 2, edge // 2))
            buffer = io.BytesIO()
            picture.save(buffer, "JPEG", quality=70)
        Path(job["image_out"]).write_bytes(buffer.getvalue())
        return {"width": picture.width, "height": picture.height}


_TEXT = {"pdf": _pdf, "docx": _docx, "xlsx": _xlsx, "pptx": _pptx, "csv": _plain,
         "markdown": _plain, "text": _plain, "html": _html}


def main() -> int:
    job = json.loads(sys.stdin.buffer.read())
    path = Path(job["path"])
    try:
        if job["converter"] == "image":
            facts = _image(path, job)
        else:
            text = _Text(Path(job["text_out"]), int(job["max_chars"]))
            try:
                facts = _TEXT[job["converter"]](path, text)
            except _Full:
                facts = {}
            finally:
                text.out.close()
            facts.update(chars=text.chars, cut=text.cut)
    except MemoryError:
        print(json.dumps({"ok": False, "error": "out of memory"}))
        return 1
    except Exception as exc:  # a damaged or hostile file: said in one line, no traceback
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}))
        return 1
    print(json.dumps({"ok": True, **facts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

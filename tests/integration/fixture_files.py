"""Real files built in the tests: a PDF written by hand (pages of text, or one whose text
takes a converter minutes), DOCX (python-docx), XLSX (openpyxl), PNG (Pillow), WAV (the
standard library's wave) and an Ogg Opus voice note (its pages and CRCs by hand)."""

from __future__ import annotations

import io
import struct
import wave
import zlib


def pdf(pages: list[str], *, compress: bool = False) -> bytes:
    """A PDF with one line of text per page (Helvetica), its cross-reference table exact."""
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"}
    page_ids, next_id = [], 4
    for text in pages:
        content = text.encode("latin-1") if text.startswith("BT") else \
            f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
        if compress:
            packed = zlib.compress(content, 9)
            objects[next_id] = (b"<< /Length %d /Filter /FlateDecode >>\nstream\n" %
                                len(packed) + packed + b"\nendstream")
        else:
            objects[next_id] = (b"<< /Length %d >>\nstream\n" % len(content) + content
                                + b"\nendstream")
        objects[next_id + 1] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                                b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>"
                                % next_id)
        page_ids.append(next_id + 1)
        next_id += 2
    objects[2] = (b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % p for p in page_ids)
                  + b"] /Count %d >>" % len(page_ids))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = out.tell()
        out.write(b"%d 0 obj\n" % number + objects[number] + b"\nendobj\n")
    start = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for number in sorted(objects):
        out.write(b"%010d 00000 n \n" % offsets[number])
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
              % (len(objects) + 1, start))
    return out.getvalue()


def slow_pdf(operators: int = 3_000_000) -> bytes:
    """A small PDF (its page compressed) whose one page holds millions of text operators:
    extracting its text takes a converter far longer than a test waits."""
    body = "BT /F1 12 Tf " + "(a) Tj " * operators + "ET"
    return pdf([body], compress=True)


def docx(paragraphs: list[str]) -> bytes:
    import docx as python_docx

    document = python_docx.Document()
    for text in paragraphs:
        document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx(rows: list[list[object]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Sales"
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def png(width: int = 64, height: int = 48, colour: tuple[int, int, int] = (200, 30, 30)
        ) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "PNG")
    return out.getvalue()


def wav(seconds: float = 0.2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(8000)
        audio.writeframes(b"\x00\x01" * int(8000 * seconds))
    return out.getvalue()


def _crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else \
                (crc << 1) & 0xFFFFFFFF
    return crc


def _page(packet: bytes, sequence: int, flags: int) -> bytes:
    header = struct.pack("<4sBBqIII", b"OggS", 0, flags, 0, 0x1234, sequence, 0)
    segments = bytes([255] * (len(packet) // 255) + [len(packet) % 255])
    page = header + bytes([len(segments)]) + segments + packet
    return page[:22] + struct.pack("<I", _crc(page)) + page[26:]


def ogg_voice() -> bytes:
    """An Ogg Opus stream's header pages (OpusHead, OpusTags), as a voice note starts."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, 312, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 6) + b"hermes" + struct.pack("<I", 0)
    return _page(head, 0, 0x02) + _page(tags, 1, 0x00)

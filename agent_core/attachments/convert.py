"""Turning a file people sent into what the model is shown, in a child process.

A document becomes text (its pages or slides marked), an image a copy resized to what
every provider takes; both run in ``python -m agent_core.attachments._convert`` with its
address space capped (``memory_mb``) and killed at ``seconds``, so that a PDF bomb or a
100 000-row sheet costs the gateway nothing but the wait. What goes wrong is one plain
sentence naming the limit, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ..tools.isolation import run_child
from .sniff import Converter

log = logging.getLogger(__name__)

#: Longest edge and size of an image as models are shown it: Anthropic's recommended
#: 1568 px (it resizes anything larger) and 5 MB limit; within OpenAI's and Ollama's.
IMAGE_EDGE = 1568
IMAGE_BYTES = 3_750_000  # 5 MB once in base64


@dataclass(frozen=True, slots=True)
class ConvertLimits:
    """What one conversion may take."""

    seconds: float = 30.0
    memory_mb: int = 1024
    #: Characters of text kept from one document (the file the files tool reads).
    max_chars: int = 2_000_000


@dataclass(frozen=True, slots=True)
class Converted:
    """What a conversion gave: the text's length (written to the text file), the pages or
    slides, whether the text stops before the document does, an image's size, or the
    sentence saying why it failed."""

    chars: int = 0
    pages: int = 0
    cut: bool = False
    width: int = 0
    height: int = 0
    error: str = ""


async def convert(path: Path, converter: Converter, *, text_out: Path, image_out: Path,
                  limits: ConvertLimits) -> Converted:
    """Convert the file at ``path`` (text into ``text_out``, an image into ``image_out``)."""
    job = json.dumps({"path": str(path), "converter": converter, "text_out": str(text_out),
                      "image_out": str(image_out), "max_chars": limits.max_chars,
                      "max_edge": IMAGE_EDGE, "max_image_bytes": IMAGE_BYTES}).encode()
    try:
        async with asyncio.timeout(limits.seconds):
            done = await run_child("agent_core.attachments._convert", job,
                                   memory_mb=limits.memory_mb)
    except TimeoutError:
        return Converted(error=f"its conversion was stopped after {limits.seconds:g} s "
                               "(HERMES_FILE_CONVERT_SECONDS)")
    if done.signal_name is not None:
        return Converted(error=f"its conversion was killed ({done.signal_name}): it needed "
                               f"more than {limits.memory_mb} MB (HERMES_FILE_CONVERT_MB)")
    try:
        answer = json.loads(done.stdout.decode("utf-8", errors="replace") or "{}")
    except ValueError:
        answer = {}
    if done.returncode != 0 or not answer.get("ok"):
        error = str(answer.get("error") or "the converter failed")
        if error == "out of memory":
            error = f"it needed more than {limits.memory_mb} MB to convert " \
                    "(HERMES_FILE_CONVERT_MB)"
        else:
            log.info("conversion of %s failed: %s", path.name, error)
            error = f"it could not be read as {converter.upper()}: {error}"
        return Converted(error=error)
    return Converted(chars=int(answer.get("chars", 0)), pages=int(answer.get("pages", 0)),
                     cut=bool(answer.get("cut")), width=int(answer.get("width", 0)),
                     height=int(answer.get("height", 0)))

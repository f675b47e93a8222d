"""Text for chat platforms: splitting under length limits, Markdown to Slack mrkdwn and to
Telegram HTML."""

from __future__ import annotations

import html
import re

_FENCE = "```"


def split_text(text: str, limit: int) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters on safe boundaries.

    Prefers paragraph breaks, then line breaks, then spaces; never cuts inside a word when
    a space is near. A code fence cut across chunks is closed and reopened, so each chunk
    renders on its own.
    """
    if limit < 20:
        raise ValueError("limit too small to split safely")
    chunks: list[str] = []
    rest = text.strip()
    reopen = ""
    while rest:
        budget = limit - len(reopen) - (len(_FENCE) + 1)
        if len(reopen) + len(rest) <= limit:
            chunks.append(reopen + rest)
            break
        window = rest[:budget]
        cut = _best_cut(window)
        piece, rest = window[:cut].rstrip(), rest[cut:].lstrip("\n")
        if not piece:
            piece, rest = window, rest[len(window):]
        body = reopen + piece
        if body.count(_FENCE) % 2 == 1:  # we are inside a code block: close it here
            lang = _open_fence_lang(body)
            chunks.append(body + "\n" + _FENCE)
            reopen = f"{_FENCE}{lang}\n"
        else:
            chunks.append(body)
            reopen = ""
    return [c for c in chunks if c.strip()]


def _best_cut(window: str) -> int:
    for sep in ("\n\n", "\n", ". ", "。", " "):
        at = window.rfind(sep)
        if at >= len(window) // 2:
            return at + len(sep)
    return len(window)


def _open_fence_lang(body: str) -> str:
    last = body.rfind(_FENCE)
    match = re.match(r"```([\w+-]*)", body[last:])
    return match.group(1) if match else ""


# --- Slack mrkdwn -------------------------------------------------------------------------

_CODE_SPLIT = re.compile(r"(```.*?```|`[^`\n]+`)", re.DOTALL)
# Each pattern is linear in the text: a match attempt may only scan up to the next
# character that could start another attempt (a '[' for links, a '*' for italics), and
# nothing crosses a line, so no stretch of text is rescanned from every position. The
# earlier forms (``[^\]]+`` in links, ``.+?`` in italics, ``^(\s*)`` in bullets) rescanned
# the rest of the text from each '[', '*' or line: a 67 000-character answer of them held
# the event loop for seconds.
_LINK = re.compile(r"\[([^\[\]]+)\]\((https?://[^()\[\]\s]+)\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+)$", re.MULTILINE)
_BOLD = re.compile(r"\*\*(.+?)\*\*|__(.+?)__")
_ITALIC = re.compile(r"(?<![\w*])\*(?!\s)([^*\n]+?)(?<!\s)\*(?![\w*])")
_STRIKE = re.compile(r"~~(.+?)~~")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.MULTILINE)


def to_mrkdwn(markdown: str) -> str:
    """Markdown as Slack mrkdwn: bold, italics, strike, links, headings, bullets; code kept
    verbatim; &, < and > escaped as Slack requires."""
    parts = _CODE_SPLIT.split(markdown)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 1:
            out.append(slack_escape(part))
            continue
        text = slack_escape(part)
        text = _LINK.sub(r"<\2|\1>", text)
        text = _HEADING.sub("\x00B\\1\x00B", text)  # bold, and not italics' '*' below
        text = _BOLD.sub(lambda m: f"\x00B{m.group(1) or m.group(2)}\x00B", text)
        text = _ITALIC.sub(r"_\1_", text)
        text = text.replace("\x00B", "*")
        text = _STRIKE.sub(r"~\1~", text)
        text = _BULLET.sub(r"\1• ", text)
        out.append(text)
    return "".join(out)


def slack_escape(text: str) -> str:
    """&, < and > as the entities Slack requires: nothing in the text is read as a mention
    (``<!channel>``), a user or a link (``<https://x|click>``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --- Telegram HTML ------------------------------------------------------------------------


def to_telegram_html(markdown: str) -> str:
    """Markdown as Telegram's HTML parse mode; everything else is escaped."""
    parts = _CODE_SPLIT.split(markdown)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 1:
            if part.startswith(_FENCE):
                body = re.sub(r"^```[\w+-]*\n?", "", part)[:-3]
                out.append(f"<pre>{html.escape(body, quote=False)}</pre>")
            else:
                out.append(f"<code>{html.escape(part[1:-1], quote=False)}</code>")
            continue
        text = html.escape(part, quote=False)
        text = _LINK.sub(lambda m: f'<a href="{html.escape(m.group(2))}">{m.group(1)}</a>',
                         text)
        text = _HEADING.sub(r"<b>\1</b>", text)
        text = _BOLD.sub(lambda m: f"<b>{m.group(1) or m.group(2)}</b>", text)
        text = _ITALIC.sub(r"<i>\1</i>", text)
        text = _STRIKE.sub(r"<s>\1</s>", text)
        text = _BULLET.sub(r"\1• ", text)
        out.append(text)
    return "".join(out)

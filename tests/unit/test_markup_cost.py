"""Markdown to Slack mrkdwn and Telegram HTML costs time linear in the answer: a model's
answer shaped to make the patterns rescan the text from every position (an open '[' on
every character, a '*' after every space, a text of blank lines) converts in milliseconds,
where the quadratic patterns held the event loop for tens of seconds."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from adapters.markup import to_mrkdwn, to_telegram_html

SIZE = 100_000

#: Each made the old patterns rescan the rest of the text from every position.
PATHOLOGICAL = {
    "open brackets": "[" * SIZE,
    "link texts never closed": "[a" * (SIZE // 2),
    "link urls never closed": "[a](http://x" * (SIZE // 12),
    "italics never closed": "*a " * (SIZE // 3),
    "blank lines": "\n" * SIZE,
    "indented blank lines": " \n" * (SIZE // 2),
    "bold never closed": "**a " * (SIZE // 4),
    "strike never closed": "~~a " * (SIZE // 4),
    "backticks": "`a" * (SIZE // 2),
}


@pytest.mark.parametrize("convert", [to_mrkdwn, to_telegram_html])
@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_a_pathological_answer_converts_in_well_under_a_second(
        name: str, convert: Callable[[str], str]) -> None:
    text = PATHOLOGICAL[name]
    started = time.perf_counter()
    convert(text)
    # Linear work is ~10 ms here; the quadratic patterns took 30-60 s on these inputs.
    assert time.perf_counter() - started < 0.5, name


def test_markdown_still_becomes_mrkdwn() -> None:
    text = ("# Title\n**Sales doubled.** See [the report](https://example.com/r), *really*.\n"
            "- one\n  * two\n~~old~~ `a*b*c` and a < b")
    assert to_mrkdwn(text) == (
        "*Title*\n*Sales doubled.* See <https://example.com/r|the report>, _really_.\n"
        "• one\n  • two\n~old~ `a*b*c` and a &lt; b")


def test_markdown_still_becomes_telegram_html() -> None:
    text = ("## Title\n__bold__ and *italic* with [a link](https://example.com/?q=1&r=2)\n"
            "+ item\n```py\nx = 1 < 2\n```")
    assert to_telegram_html(text) == (
        "<b>Title</b>\n<b>bold</b> and <i>italic</i> with "
        '<a href="https://example.com/?q=1&amp;amp;r=2">a link</a>\n'
        "• item\n<pre>x = 1 &lt; 2\n</pre>")

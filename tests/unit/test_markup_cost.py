"""Markdown to Slack mrkdwn and Telegram HTML costs time linear in the answer: a model's
answer shaped to make the patterns rescan the text from every position (an open '[' on
every character, a '*' after every space, a text of blank lines) converts in milliseconds,
where the quadratic patterns held the event loop for tens of seconds."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from adapters.markup import to_mrkdwn, to_telegram_html

SIZE = 20_000

#: Each made the old patterns rescan the rest of the text from every position: a text of
#: ``SIZE`` characters in that shape.
PATHOLOGICAL: dict[str, Callable[[int], str]] = {
    "open brackets": lambda n: "[" * n,
    "link texts never closed": lambda n: "[a" * (n // 2),
    "link urls never closed": lambda n: "[a](http://x" * (n // 12),
    "italics never closed": lambda n: "*a " * (n // 3),
    "blank lines": lambda n: "\n" * n,
    "indented blank lines": lambda n: " \n" * (n // 2),
    "bold never closed": lambda n: "**a " * (n // 4),
    "strike never closed": lambda n: "~~a " * (n // 4),
    "backticks": lambda n: "`a" * (n // 2),
}


def _seconds(convert: Callable[[str], str], text: str) -> float:
    """The fastest of three conversions (the least disturbed by a busy machine)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        convert(text)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("convert", [to_mrkdwn, to_telegram_html])
@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_a_pathological_answer_converts_in_time_linear_in_its_length(
        name: str, convert: Callable[[str], str]) -> None:
    """Four times the text takes about four times as long (a quadratic pattern: sixteen).
    A ratio of two timings of the same run, not a bound in seconds: a loaded machine slows
    both alike."""
    shape = PATHOLOGICAL[name]
    small, large = _seconds(convert, shape(SIZE)), _seconds(convert, shape(4 * SIZE))
    assert large < 9 * max(small, 1e-4), (name, small, large)


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

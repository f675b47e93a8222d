"""The arguments as an approver sees them: the same JSON, nothing hidden, never a silent
cut, within the platform's budget."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.arguments import display_json, show_arguments
from adapters.markup import slack_escape

HOSTILE = ["```", "`", "\u202e", "\u200b", "\u2028", "\x7f", "\U000e0001", "<!channel>",
           "<https://evil.example|click>", "\\", '"', "\n", "&amp;"]
texts = st.lists(st.sampled_from([*HOSTILE, "a", "é", "😀", " "]), max_size=120).map("".join)
values: Any = st.recursive(st.none() | st.booleans() | st.integers() | texts,
                           lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(texts, inner, max_size=4), max_leaves=12)


def _slack(text: str) -> int:
    return len(slack_escape(text))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=30), values, min_size=1, max_size=8))
def test_what_is_shown_is_the_same_json_with_nothing_hidden(arguments: dict[str, Any]) -> None:
    shown = display_json(arguments)
    assert json.loads(shown) == arguments
    assert "`" not in shown
    assert not any(c in shown for c in "\u202e\u200b\u2028\x7f\U000e0001")


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(alphabet="abcdefgh_", min_size=1, max_size=30), values,
                       min_size=1, max_size=10),
       st.integers(min_value=1500, max_value=3000))
def test_a_summary_fits_and_shows_every_key(arguments: dict[str, Any], budget: int) -> None:
    """Keys a tool's signature names (identifiers): every one is shown."""
    shown = show_arguments(arguments, budget=budget, measure=_slack)
    assert _slack(shown.text) <= budget
    assert "`" not in shown.text
    if shown.complete:
        assert json.loads(shown.text) == arguments
    for key in arguments:
        assert f'"{key}": ' in shown.text


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(texts, values, min_size=1, max_size=12),
       st.integers(min_value=300, max_value=3000))
def test_keys_of_any_kind_are_shown_or_counted(arguments: dict[str, Any], budget: int) -> None:
    """Keys a model chose (a tool with an open schema): each is shown, or the text says how
    many are not."""
    shown = show_arguments(arguments, budget=budget, measure=_slack)
    assert _slack(shown.text) <= budget and "`" not in shown.text
    if shown.complete:
        assert json.loads(shown.text) == arguments
        return
    listed = shown.text.count("\n  ") - shown.text.count("more keys not shown here")
    missing = len(arguments) - listed
    assert missing == 0 or f"… and {missing} more keys not shown here" in shown.text


def test_long_values_are_cut_visibly_and_the_last_key_stays() -> None:
    shown = show_arguments({"payload": "x" * 5000, "rows": list(range(400)),
                            "command": "rm -rf /"}, budget=600)
    assert not shown.complete
    assert "[cut: 5000 characters in all]" in shown.text
    assert "[cut: 400 items," in shown.text
    assert '"command": "rm -rf /"' in shown.text


def test_too_many_keys_say_how_many_are_not_shown() -> None:
    shown = show_arguments({f"key{i}": i for i in range(300)}, budget=500)
    assert "more keys not shown here" in shown.text and len(shown.text) <= 500
    listed = shown.text.count('"key')
    assert f"… and {300 - listed} more keys not shown here" in shown.text


def test_a_cut_never_splits_an_escape() -> None:
    shown = show_arguments({"a": "`" * 300, "b": "\n" * 300}, budget=200)
    for line in shown.text.splitlines()[1:-1]:
        value = line.split(": ", 1)[1].split("…", 1)[0]
        assert value.count("\\") % 2 == 0 or value.endswith(("0060", "n")), line
        assert not value.endswith(("\\", "\\u", "\\u0", "\\u00", "\\u006"))

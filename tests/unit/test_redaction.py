"""Secrets and credential-shaped tokens out of texts (agent_core.redaction)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_core.redaction import _SHAPES, MARKER, SHAPE_MIN_LEN, redact, register

SECRET = "s3cr3t-value-registered"
register([SECRET])

#: The shapes as they were first written (the reference): a word boundary and a
#: case-insensitive group at the start of two branches.
ONE_PATTERN = re.compile(
    r"(?:sk-[A-Za-z0-9_-]{16,}|xox[abprs]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"
    r"|\b\d{6,12}:[A-Za-z0-9_-]{30,}\b|(?i:bearer)\s+[A-Za-z0-9._~+/-]{12,}=*)")

TOKENS = ["sk-" + "a1_-" * 5, "xoxb-1234567890-abc", "xapp-1-A0123456789",
          "123456789:" + "A" * 35, "Bearer abcdef.ghijkl", "BEARER abcdefghijkl==", SECRET]
NEAR = ["sk-short", "xoxz-1234567890", "bearer short", "12345:" + "A" * 35,
        "x123456789:" + "A" * 35, "1234567890123:" + "B" * 30, "123456789:" + "A" * 29,
        "é123456:" + "C" * 31, "٣٤٥٦٧٨:" + "D" * 30]
WORDS = ["the", "sales", "grew", "20%", "Q3:", "answer to:", "a:b", "12", "1.2M", "\n", "—", "ö"]


def reference(text: str) -> str:
    return ONE_PATTERN.sub(MARKER, text.replace(SECRET, MARKER))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS + NEAR + WORDS), max_size=14).map(" ".join))
def test_the_rewritten_shapes_redact_what_the_first_pattern_did(text: str) -> None:
    assert redact(text) == reference(text)


def test_every_token_shape_and_registered_secret_is_removed_wherever_it_stands() -> None:
    for token in TOKENS:
        for text in (token, f"x {token}.", f"({token})", f"line\n{token}\nend"):
            assert token not in redact(text) and MARKER in redact(text), text
    for near in NEAR[:6]:
        assert redact(f"say {near}") == f"say {near}"


def test_no_shape_is_shorter_than_the_length_redact_looks_for_shapes_from() -> None:
    from re import _parser  # the compiler's own reading: the pattern's shortest match

    assert _parser.parse(_SHAPES.pattern).getwidth()[0] >= SHAPE_MIN_LEN
    shortest = "xoxb-" + "1" * 10
    assert len(shortest) == SHAPE_MIN_LEN and redact(shortest) == MARKER
    assert redact(SECRET[:SHAPE_MIN_LEN]) == SECRET[:SHAPE_MIN_LEN]
    register(["k9Q#x2"])  # six characters: registered secrets are looked for at any length
    assert redact("a k9Q#x2!") == f"a {MARKER}!"

"""The cl100k pre-tokenizer on ``re`` splits every text as tiktoken's pattern on ``regex``."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import regex

from agent_core.context import pretokenize
from agent_core.context.pretokenize import CL100K, ODD, odd_is_current, odd_ranges, splitter

ROOT = Path(__file__).resolve().parents[2]
#: Characters of every kind the pattern tells apart, the ODD ones among them.
POOL = ("abcXYZ sdmtlverSDMTLVER'''  \t\r\n\r\n\x0b\x0c\x1c\x1f\x85\xa0\u2028\u3000"
        "0123456789_-+=*/.,;:!?()[]{}<>\"#$%&@\\|~^`"
        "éÉßſıİǅ\u0301\u0308ΩωЖж中文字日本語한국어عربي\u0663\u0967\u06f5"
        "²³¹½¾ⅫⅩ①⑳\u3007\U0001f600\U0001f44d\ufeff\u200d\U00031350\U0002ebf0")


def test_odd_holds_for_the_engines_it_names() -> None:
    import unicodedata

    if odd_is_current() and unicodedata.unidata_version == pretokenize.FOR[0]:
        assert odd_ranges() == list(ODD), "ODD is out of date: python -m " \
            "agent_core.context.pretokenize prints it anew"
    elif odd_is_current():  # a later Unicode (ALSO): every differing code point is in ODD
        covered = {cp for a, b in ODD for cp in range(a, b + 1)}
        differing = {cp for a, b in odd_ranges() for cp in range(a, b + 1)}
        assert differing <= covered, f"ODD misses {sorted(differing - covered)[:10]}"
    else:  # another Python or regex than ODD was computed with: regex splits everything
        assert isinstance(getattr(splitter(CL100K), "__self__", None), regex.Pattern)


def test_other_engines_or_patterns_split_with_regex(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(getattr(splitter(r"\p{L}+"), "__self__", None), regex.Pattern)
    monkeypatch.setattr(pretokenize, "_regex_version", lambda: "2000.1.1")
    assert isinstance(getattr(splitter(CL100K), "__self__", None), regex.Pattern)


@pytest.mark.skipif(not odd_is_current(), reason="regex splits everything with these versions")
def test_any_text_splits_as_with_regex() -> None:
    split, reference = splitter(CL100K), regex.compile(CL100K).findall
    assert not isinstance(getattr(split, "__self__", None), regex.Pattern)
    rng = random.Random(18)
    texts = ["".join(rng.choices(POOL, k=rng.randrange(0, 48))) for _ in range(5000)]
    texts += [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    texts += ["", " ", "\n", "x", "'s", "'S", "'ll", "'LL", "'ſ", "a  \n\n b  ", "   ", "1234567"]
    wrong = [t for t in texts if split(t) != reference(t)]
    assert wrong == []


def test_plain_text_is_counted_without_regex_and_odd_text_with_it() -> None:
    script = (
        "import sys\n"
        "from agent_core.context.bpe import BPECounter\n"
        "from agent_core.context.pretokenize import CL100K\n"
        "counter = BPECounter({b'a': 0}, CL100K)\n"
        "counter.count('plain text, 123 and words')\n"
        "print('regex' in sys.modules)\n"
        "counter.count('x² y')\n"
        "print('regex' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout.split()
    assert out == (["False", "True"] if odd_is_current() else ["True", "True"])

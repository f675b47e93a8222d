"""cl100k's pre-tokenizer on the standard library's ``re``, wherever it splits the same.

tiktoken's pattern needs the ``regex`` module for ``\\p{L}`` and ``\\p{N}``. Python 3.11's
``re`` has possessive quantifiers but no Unicode properties; on a text whose characters
both engines class alike (letters as ``[^\\W\\d_]``, numbers as ``\\d``, white space as
``\\s``, and the contractions' letters case-insensitively), ``STDLIB_CL100K`` below splits
exactly as the original. ``ODD`` lists the code points where the classes differ: numerals
that are not decimal digits (superscripts, fractions, circled and Roman numerals), letters
newer than this Python's Unicode, and the four C0 separators Python counts as space. A
text holding one of them is split by ``regex``, imported then.

A gateway counting tokens then carries no ``regex`` (its library and the compiled
pattern, ~1.3 MB resident), and the split itself is quicker (~4.0 against ~7.4 ms for 24 KB
of prose here).

``ODD`` holds for the Unicode version of the Python and the ``regex`` release in ``FOR``,
and covers the later Unicode versions in ``ALSO`` (Python 3.12's and 3.13's): their new
letters are in it as letters newer than 3.11's Unicode, so a text holding one goes to
``regex`` without need, and every other text splits the same. With other versions every
split goes through ``regex``. ``python -m
agent_core.context.pretokenize`` prints the ranges for the installed ones, and
``tests/unit/test_pretokenize.py`` checks them against what both engines say.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from importlib import metadata

#: tiktoken's ``pat_str`` for cl100k_base.
CL100K = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
          r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
#: The same on ``re``, for text without ODD characters: ``[^\r\n\p{L}\p{N}]`` is "not CR,
#: LF or a word character, or the underscore" (``\w`` is letters, digits and ``_``).
STDLIB_CL100K = (r"""'(?i:[sdmt]|ll|ve|re)|(?:_|[^\r\n\w])?+[^\W\d_]++|\d{1,3}+|"""
                 r""" ?(?:_|[^\s\w])++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")

#: The character classes compared: (regex's, re's).
CLASSES = ((r"\p{L}", r"[^\W\d_]"), (r"\p{N}", r"\d"), (r"\s", r"\s"),
           (r"(?i:[sdmtlver])", r"(?i:[sdmtlver])"))

#: (Python's Unicode version, regex's release) that ODD was computed with.
FOR = ("14.0.0", "2026.11.19")
#: Later Unicode versions (Python 3.12: 15.0.0, 3.13: 15.1.0) whose differing code points,
#: with FOR's regex, are all in ODD (tests/unit/test_pretokenize.py checks it on each).
ALSO = ("15.0.0", "15.1.0")
#: Inclusive code point ranges classed differently by the two engines.
ODD = (
    (0x1c, 0x1f), (0xb2, 0xb3), (0xb9, 0xb9), (0xbc, 0xbe), (0x558, 0x558), (0x58b, 0x58c),
    (0x88f, 0x88f), (0x9f4, 0x9f9), (0xb72, 0xb77), (0xbf0, 0xbf2), (0xc5c, 0xc5c),
    (0xc78, 0xc7e), (0xcdc, 0xcdc), (0xd58, 0xd5e), (0xd70, 0xd78), (0xf2a, 0xf33),
    (0x1369, 0x137c), (0x16ee, 0x16f0), (0x17f0, 0x17f9), (0x19da, 0x19da), (0x1c89, 0x1c8a),
    (0x2070, 0x2070), (0x2074, 0x2079), (0x2080, 0x2089), (0x208f, 0x208f), (0x209d, 0x209f),
    (0x2150, 0x2182), (0x2185, 0x2189), (0x2460, 0x249b), (0x24ea, 0x24ff), (0x2776, 0x2793),
    (0x2cfd, 0x2cfd), (0x3007, 0x3007), (0x3021, 0x3029), (0x3038, 0x303a), (0x3192, 0x3195),
    (0x3220, 0x3229), (0x3248, 0x324f), (0x3251, 0x325f), (0x3280, 0x3289), (0x32b1, 0x32bf),
    (0xa6e6, 0xa6ef), (0xa7cb, 0xa7cf), (0xa7d2, 0xa7d2), (0xa7d4, 0xa7d4), (0xa7da, 0xa7dd),
    (0xa7e2, 0xa7e2), (0xa7f1, 0xa7f1), (0xa830, 0xa835), (0xab6c, 0xab6d), (0x10107, 0x10133),
    (0x10140, 0x10178), (0x1018a, 0x1018b), (0x102e1, 0x102fb), (0x10320, 0x10323),
    (0x10341, 0x10341), (0x1034a, 0x1034a), (0x103d1, 0x103d5), (0x105c0, 0x105f3),
    (0x107bb, 0x107bf), (0x10858, 0x1085f), (0x10879, 0x1087f), (0x108a7, 0x108af),
    (0x108fb, 0x108ff), (0x10916, 0x1091b), (0x10940, 0x10959), (0x109bc, 0x109bd),
    (0x109c0, 0x109cf), (0x109d2, 0x109ff), (0x10a40, 0x10a48), (0x10a7d, 0x10a7e),
    (0x10a9d, 0x10a9f), (0x10aeb, 0x10aef), (0x10b58, 0x10b5f), (0x10b78, 0x10b7f),
    (0x10ba9, 0x10baf), (0x10cfa, 0x10cff), (0x10d40, 0x10d65), (0x10d6f, 0x10d85),
    (0x10e60, 0x10e7e), (0x10ec2, 0x10ec7), (0x10ed9, 0x10eee), (0x10f1d, 0x10f26),
    (0x10f51, 0x10f54), (0x10fc5, 0x10fcb), (0x11052, 0x11065), (0x111e1, 0x111f4),
    (0x1123f, 0x11240), (0x11380, 0x11389), (0x1138b, 0x1138b), (0x1138e, 0x1138e),
    (0x11390, 0x113b5), (0x113b7, 0x113b7), (0x113d1, 0x113d1), (0x113d3, 0x113d3),
    (0x116d0, 0x116e3), (0x1173a, 0x1173b), (0x118ea, 0x118f2), (0x11b0a, 0x11b0a),
    (0x11bc0, 0x11be0), (0x11bf0, 0x11bf9), (0x11c5a, 0x11c6c), (0x11db0, 0x11ddb),
    (0x11de0, 0x11de9), (0x11df1, 0x11df1), (0x11f02, 0x11f02), (0x11f04, 0x11f10),
    (0x11f12, 0x11f33), (0x11f50, 0x11f59), (0x11fc0, 0x11fd4), (0x12400, 0x1246f),
    (0x12475, 0x1247f), (0x12550, 0x12686), (0x1342f, 0x1342f), (0x13441, 0x13446),
    (0x13460, 0x143fa), (0x16100, 0x1611d), (0x16130, 0x16139), (0x16b5b, 0x16b61),
    (0x16d40, 0x16d6c), (0x16d70, 0x16d79), (0x16e80, 0x16e96), (0x16ea0, 0x16eb8),
    (0x16ebb, 0x16ed3), (0x16ff2, 0x16ff6), (0x187f8, 0x187ff), (0x18cd6, 0x18cda),
    (0x18cff, 0x18cff), (0x18d09, 0x18d20), (0x18d80, 0x18df2), (0x18e00, 0x19191),
    (0x191a0, 0x191d2), (0x1b123, 0x1b128), (0x1b132, 0x1b132), (0x1b155, 0x1b155),
    (0x1b168, 0x1b168), (0x1ccf0, 0x1ccf9), (0x1d2c0, 0x1d2d3), (0x1d2e0, 0x1d2f3),
    (0x1d360, 0x1d378), (0x1d6a6, 0x1d6a6), (0x1df1f, 0x1df81), (0x1df90, 0x1df96),
    (0x1dfcd, 0x1dfff), (0x1e030, 0x1e06d), (0x1e4d0, 0x1e4eb), (0x1e4f0, 0x1e4f9),
    (0x1e5d0, 0x1e5ed), (0x1e5f0, 0x1e5fa), (0x1e6c0, 0x1e6de), (0x1e6e0, 0x1e6e2),
    (0x1e6e4, 0x1e6e5), (0x1e6e7, 0x1e6ed), (0x1e6f0, 0x1e6f4), (0x1e6fe, 0x1e6ff),
    (0x1e8c7, 0x1e8cf), (0x1ec71, 0x1ecab), (0x1ecad, 0x1ecaf), (0x1ecb1, 0x1ecb4),
    (0x1ed01, 0x1ed2d), (0x1ed2f, 0x1ed3d), (0x1f100, 0x1f10c), (0x2b739, 0x2b73f),
    (0x2b81e, 0x2b81e), (0x2cea2, 0x2cead), (0x2ebf0, 0x2ee5d), (0x31350, 0x33479),
    (0x3d000, 0x3fc3f),
)

Split = Callable[[str], list[str]]


def odd_is_current() -> bool:
    """Whether ODD holds for this Python's Unicode and the installed regex (computed for
    them, or covering them: ``ALSO``)."""
    return unicodedata.unidata_version in (FOR[0], *ALSO) and _regex_version() == FOR[1]


def splitter(pattern: str) -> Split:
    """``findall`` of ``pattern``: on ``re`` where that splits the same, else ``regex``."""
    if pattern != CL100K or not odd_is_current():
        return _regex_findall(pattern)
    fast = re.compile(STDLIB_CL100K).findall
    odd = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ODD) + "]").search

    def split(text: str) -> list[str]:
        return fast(text) if odd(text) is None else _regex_findall(pattern)(text)

    return split


def odd_ranges() -> list[tuple[int, int]]:
    """The ranges of code points the two engines class differently (imports ``regex``)."""
    import regex

    every = "".join(map(chr, range(0x110000)))
    odd: set[int] = set()
    for theirs, ours in CLASSES:
        odd |= set(map(ord, regex.findall(theirs, every))) ^ set(map(ord, re.findall(ours, every)))
    ranges: list[tuple[int, int]] = []
    for cp in sorted(odd):
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    return ranges


@functools.cache
def _regex_findall(pattern: str) -> Split:
    """``pattern`` compiled by ``regex``, once (imported at the first call)."""
    import regex  # tiktoken's own dependency

    return regex.compile(pattern).findall  # type: ignore[no-any-return]


def _regex_version() -> str:
    try:
        return metadata.version("regex")
    except metadata.PackageNotFoundError:
        return ""


if __name__ == "__main__":
    import sys

    print(f"FOR = ({unicodedata.unidata_version!r}, {_regex_version()!r})")
    line = "    "
    for a, b in odd_ranges():
        item = f"({a:#x}, {b:#x}), "
        if len(line) + len(item) > 96:
            sys.stdout.write(line.rstrip() + "\n")
            line = "    "
        line += item
    print(line.rstrip())

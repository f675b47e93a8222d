"""Reasoning is not an action: what a model thinks before it answers or calls a tool is
cut from the text the readers see, and never shown as the answer.

Blocks: ``<think>…</think>`` (Qwen3, DeepSeek-R1, GLM, MiniMax, Kimi), ``<seed:think>…
</seed:think>`` (Seed-OSS), ``<thinking>`` and ``<reasoning>`` (fine-tunes),
``<|begin_of_thought|>…<|end_of_thought|>``, Command A's ``<|START_THINKING|>``, Mistral 3 /
Magistral's ``[THINK]…[/THINK]``, Gemma 4's ``<|channel>thought…<channel|>``, Apertus'
``<|inner_prefix|>…<|inner_suffix|>``, Kimi K3's ``<|open|>think<|sep|>…``, Hunyuan's
``<think:SUFFIX>…`` and harmony's ``analysis`` channel (gpt-oss).

One pass over the tags: the outermost block decides, so tags of other kinds inside it (a
model quoting a format while thinking) are part of the thought, and pairs of its own kind
nest. A closing tag without its opening one (the chat template opened the block in the
prompt) makes everything before it reasoning, however many pairs came before; one more at
the very end, after a block, is dropped. A block never closed (the output was cut while
thinking) is reasoning to the end, except that Kimi K2-Thinking's tool-call section ends
it (the model writes its calls there without closing its reasoning first).
"""

from __future__ import annotations

import re
from bisect import bisect_right

from .._lazyre import lazy

#: The reasoning tags, each an (opening, closing) pair.
BLOCKS = (("<think>", "</think>"), ("<seed:think>", "</seed:think>"),
          ("<thinking>", "</thinking>"), ("<reasoning>", "</reasoning>"),
          ("<|begin_of_thought|>", "<|end_of_thought|>"),
          ("<|START_THINKING|>", "<|END_THINKING|>"), ("[THINK]", "[/THINK]"),
          ("<|channel>", "<channel|>"), ("<|inner_prefix|>", "<|inner_suffix|>"),
          ("<|open|>think<|sep|>", "<|close|>think<|sep|>"))
#: Text that begins a reasoning tag (the suffixed ``<think:…>`` included).
MARKS = tuple(dict.fromkeys([t for pair in BLOCKS for t in pair] + ["<think:", "</think:"]))
_KIND = {tag: (opening, tag == closing) for opening, closing in BLOCKS
         for tag in (opening, closing)}
_TAGS = lazy("|".join([re.escape(t) for pair in BLOCKS for t in pair]
                            + [r"</?think:\w{1,40}>"]))
#: Kimi K2-Thinking's calls, which end a reasoning block never closed.
_KIMI_CALLS = lazy(r"<\|tool_calls_section_begin\|>|<\|tool_call_begin\|>")
_HARMONY_ANALYSIS = lazy(
    r"(?:<\|start\|>assistant)?<\|channel\|>analysis<\|message\|>.*?"
    r"(?:<\|end\|>|(?=<\|start\|>)|\Z)", re.DOTALL)
_HARMONY_BOUNDS = lazy(r"<\|(?:start|end|call|return)\|>")
_RECIPIENT = lazy(r"to=(?!assistant\b)")


def split_reasoning(text: str) -> tuple[str, str]:
    """(the reasoning, the rest) of a model's text."""
    thoughts: list[str] = []
    if _TAGS.search(text):
        text = _cut(text, thoughts)
    if "<|channel|>analysis" in text:
        text = _cut_analysis(text, thoughts)
    return "\n".join(t.strip() for t in thoughts if t.strip()), text


def _kind(tag: str) -> tuple[str, bool]:
    """(the block's opening tag, whether ``tag`` closes it)."""
    if tag.startswith(("<think:", "</think:")):
        return "<" + tag.lstrip("</"), tag.startswith("</")
    return _KIND[tag]


def _cut(text: str, thoughts: list[str]) -> str:
    """``text`` without its reasoning blocks (each kept in ``thoughts``), in one pass."""
    kept: list[str] = []
    at = 0  # where the text not yet kept or cut begins
    kind, depth, body, seen = "", 0, 0, False
    blank_from = len(text.rstrip())  # only whitespace from here on
    for m in _TAGS.finditer(text):
        opening, closing = _kind(m.group())
        if not kind:
            if not closing:
                kept.append(text[at:m.start()])
                kind, depth, body = opening, 1, m.end()
            elif seen and m.end() >= blank_from:
                kept.append(text[at:m.start()])  # a stray closer at the very end
                at = m.end()
            else:  # the prompt opened the reasoning: all so far was thought
                thoughts.append("".join(kept) + text[at:m.start()])
                kept, at, seen = [], m.end(), True
        elif opening == kind:
            if not closing:
                if depth > 1 or text[body:m.start()].strip():
                    depth += 1
                else:
                    body = m.end()  # the same opener twice: one block
            else:
                depth -= 1
                if depth == 0:
                    thoughts.append(text[body:m.start()])
                    kind, at, seen = "", m.end(), True
    if not kind:
        kept.append(text[at:])
        return "".join(kept)
    rest = text[body:]  # opened and never closed: the output was cut while thinking
    calls = _KIMI_CALLS.search(rest) if kind == "<think>" else None
    if calls is None:
        thoughts.append(rest)
        return "".join(kept)
    thoughts.append(rest[:calls.start()])
    kept.append(rest[calls.start():])
    return "".join(kept)


def _cut_analysis(text: str, thoughts: list[str]) -> str:
    """``text`` without harmony's analysis messages, but for one with a recipient (a call
    gpt-oss wrote on the analysis channel)."""
    kept: list[str] = []
    at = 0
    bounds = [b.end() for b in _HARMONY_BOUNDS.finditer(text)]
    for m in _HARMONY_ANALYSIS.finditer(text):
        before = bisect_right(bounds, m.start())  # the message's header begins at a bound
        header = text[bounds[before - 1] if before else 0:m.start()]
        if _RECIPIENT.search(header):
            continue
        kept.append(text[at:m.start()])
        thoughts.append(m.group())
        at = m.end()
    kept.append(text[at:])
    return "".join(kept)

"""Reasoning is not an action: what a model thinks before it answers or calls a tool is
cut from the text the readers see, and never shown as the answer.

Blocks: ``<think>…</think>`` (Qwen3, DeepSeek-R1, GLM, MiniMax, Kimi), ``<seed:think>…
</seed:think>`` (Seed-OSS), ``<thinking>`` and ``<reasoning>`` (fine-tunes),
``<|begin_of_thought|>…<|end_of_thought|>``, Command A's ``<|START_THINKING|>``, and harmony's
``analysis`` channel (gpt-oss). A closing tag without its opening one (the chat template
opened the block in the prompt) cuts everything before it; a block never closed (the
output was cut while thinking) cuts everything after its opening.
"""

from __future__ import annotations

import re

#: The reasoning tags, each an (opening, closing) pair.
BLOCKS = (("<think>", "</think>"), ("<seed:think>", "</seed:think>"),
          ("<thinking>", "</thinking>"), ("<reasoning>", "</reasoning>"),
          ("<|begin_of_thought|>", "<|end_of_thought|>"),
          ("<|START_THINKING|>", "<|END_THINKING|>"))
_HARMONY_ANALYSIS = re.compile(
    r"(?:<\|start\|>assistant)?<\|channel\|>analysis<\|message\|>.*?"
    r"(?:<\|end\|>|(?=<\|start\|>)|\Z)", re.DOTALL)


def split_reasoning(text: str) -> tuple[str, str]:
    """(the reasoning, the rest) of a model's text."""
    thoughts: list[str] = []
    for opening, closing in BLOCKS:
        if closing in text or opening in text:
            text = _cut(text, opening, closing, thoughts)
    if "<|channel|>analysis" in text:
        thoughts += _HARMONY_ANALYSIS.findall(text)
        text = _HARMONY_ANALYSIS.sub("", text)
    return "\n".join(t.strip() for t in thoughts if t.strip()), text


def _cut(text: str, opening: str, closing: str, thoughts: list[str]) -> str:
    """``text`` without its ``opening``…``closing`` blocks (each kept in ``thoughts``), in
    one pass."""
    first_open, first_close = text.find(opening), text.find(closing)
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        thoughts.append(text[:first_close])  # closed but never opened: the prompt opened it
        text = text[first_close + len(closing):]
    kept: list[str] = []
    at = 0
    while True:
        start = text.find(opening, at)
        if start < 0:
            kept.append(text[at:])
            break
        kept.append(text[at:start])
        end = text.find(closing, start + len(opening))
        if end < 0:  # opened and never closed: the output was cut while thinking
            thoughts.append(text[start + len(opening):])
            break
        thoughts.append(text[start + len(opening):end])
        at = end + len(closing)
    return "".join(kept).replace(closing, "")

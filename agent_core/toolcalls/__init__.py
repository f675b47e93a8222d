"""Readers of the tool-call formats open models write as text, when the server in front of
them does not parse tool calls itself (llama.cpp without a chat template, a raw Ollama model,
vLLM without ``--tool-call-parser``, a fine-tune).

Each format is one small reader (``Reader``: ``markers``, ``read``); ``READERS`` is the
order they are tried in, the most specific first, so one format is never mistaken for
another (several share ``<tool_call>``: Qwen3-Coder's XML, GLM's keys and values, and
Hermes' JSON). Reasoning is cut first (``split_reasoning``); ``VisibleStream`` is what of a
streamed reply may be shown while it comes.
"""

from __future__ import annotations

from .base import Call, Found, Reader
from .json_tags import (
    AnswerTag,
    CommandA,
    Functools,
    Granite,
    GraniteFunctionCall,
    HermesTags,
    InternLM,
    LlamaTag,
    LongCat,
    Mistral,
    Nemotron,
    TaggedList,
)
from .pythonic import Lfm, Pythonic, PythonTags, ToolCode
from .reasoning import split_reasoning
from .stream import VisibleStream
from .tokens import DeepSeek, Harmony, Kimi
from .xml_params import Glm, MiniMax, QwenXml, SeedOss, Step3

READERS: tuple[Reader, ...] = (
    Harmony(), Kimi(), DeepSeek(), Step3(), MiniMax(), SeedOss(), LongCat(), InternLM(),
    Lfm(), Nemotron(), CommandA(), Granite(), GraniteFunctionCall(), Functools(),
    TaggedList(), PythonTags(), ToolCode(), Mistral(), LlamaTag(),
    # <tool_call> is shared: the XML style and GLM's keys before Hermes' JSON.
    QwenXml(), Glm(), HermesTags(),
    Pythonic(), AnswerTag(),
)

__all__ = ["READERS", "Call", "Found", "Reader", "VisibleStream", "split_reasoning"]

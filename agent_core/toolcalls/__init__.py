"""Readers of the tool-call formats open models write as text, when the server in front of
them does not parse tool calls itself (llama.cpp without a chat template, a raw Ollama model,
vLLM without ``--tool-call-parser``, a fine-tune).

Each format is one small reader (``Reader``: ``markers``, ``read``); ``READERS`` is the
order they are tried in, the most specific first, so one format is never mistaken for
another (several share ``<tool_call>``: Qwen3-Coder's XML, GLM's keys and values, and
Hermes' JSON; MiniMax-M3's namespaced tags hold it too). Reasoning is cut first
(``split_reasoning``); ``VisibleStream`` is what of a streamed reply may be shown while it
comes.
"""

from __future__ import annotations

from .base import Call, Found, Reader
from .gemma import FunctionGemma, Gemma4
from .json_tags import (
    AnswerTag,
    Apertus,
    CommandA,
    Functools,
    GigaChat,
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
from .nested import KimiK3, MiniMaxM3
from .pythonic import Lfm, Olmo3, Pythonic, PythonTags, ToolCode
from .reasoning import split_reasoning
from .recipients import FunctionaryV32, FunctionsPrefix
from .stream import VisibleStream
from .tokens import DeepSeek, Harmony, Kimi
from .xml_params import DeepSeekDsml, Glm, Hunyuan, MiniMax, NamedFunction, QwenXml, SeedOss, Step3

READERS: tuple[Reader, ...] = (
    Harmony(), KimiK3(), Kimi(), DeepSeekDsml(), DeepSeek(), Step3(),
    # MiniMax-M3's namespaced tags hold <tool_call> and <invoke>: before the formats of those.
    MiniMaxM3(), MiniMax(), SeedOss(), Hunyuan(), Gemma4(), FunctionGemma(), Apertus(),
    LongCat(), InternLM(), Lfm(), Nemotron(), CommandA(), Granite(), GraniteFunctionCall(),
    GigaChat(), Functools(), TaggedList(), PythonTags(), ToolCode(), Olmo3(), Mistral(),
    LlamaTag(),
    # <tool_call> is shared: the XML style and GLM's keys before Hermes' JSON.
    QwenXml(), NamedFunction(), Glm(), HermesTags(),
    FunctionaryV32(), FunctionsPrefix(), Pythonic(), AnswerTag(),
)

__all__ = ["READERS", "Call", "Found", "Reader", "VisibleStream", "split_reasoning"]

"""Model adapters behind one interface; switching provider is configuration only.

The adapters and their HTTP stack (aiohttp's client) are imported when first
used, so that importing the runtime does not load them: a process that builds no model
(the hub's services, a tool module) never pays for them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..exports import lazy_exports
from .base import ModelAdapter, ModelRequest, ModelResponse, RawToolCall, Usage
from .fallback import FallbackModel

if TYPE_CHECKING:
    from .anthropic import AnthropicModel
    from .factory import build_adapter, build_model
    from .ollama import OllamaModel
    from .openai_compat import OpenAICompatModel

__getattr__ = lazy_exports(__name__, {
    "AnthropicModel": "anthropic", "OllamaModel": "ollama",
    "OpenAICompatModel": "openai_compat", "build_adapter": "factory",
    "build_model": "factory",
})

__all__ = [
    "AnthropicModel",
    "FallbackModel",
    "ModelAdapter",
    "ModelRequest",
    "ModelResponse",
    "OllamaModel",
    "OpenAICompatModel",
    "RawToolCall",
    "Usage",
    "build_adapter",
    "build_model",
]

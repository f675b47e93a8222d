"""Model adapters behind one interface; switching provider is configuration only."""

from .anthropic import AnthropicModel
from .base import ModelAdapter, ModelRequest, ModelResponse, RawToolCall, Usage
from .factory import build_adapter, build_model
from .fallback import FallbackModel
from .ollama import OllamaModel
from .openai_compat import OpenAICompatModel

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

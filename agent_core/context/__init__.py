"""The context window: token counting, eviction rules, compression."""

from .tokens import EstimateCounter, TiktokenCounter, TokenCounter, counter_for, message_tokens
from .window import Eviction, WindowPolicy, fit, is_stub, protected_ids

__all__ = [
    "EstimateCounter",
    "Eviction",
    "TiktokenCounter",
    "TokenCounter",
    "WindowPolicy",
    "counter_for",
    "fit",
    "is_stub",
    "message_tokens",
    "protected_ids",
]

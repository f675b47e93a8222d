"""Prices: what a model call costs, from HERMES_MODEL_PRICES.

Costs are counted in nano-dollars (10^-9 USD), whole numbers, so that the store adds them
exactly (a price per million tokens is that many thousand nano-dollars per token). A model
is found by the name the provider reported, the adapter's name (``openai:gpt-4o``) or the
model's own (``gpt-4o``); one without a price costs nothing in dollars: its calls count
tokens only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from ..models.base import Usage
from .base import ModelPrice

#: Nano-dollars in a dollar.
NANO = 1_000_000_000


class Prices:
    """The price list of a deployment."""

    def __init__(self, prices: Mapping[str, ModelPrice] | None = None) -> None:
        self.prices = dict(prices or {})
        self._found: dict[tuple[str, ...], ModelPrice | None] = {}

    def __bool__(self) -> bool:
        return bool(self.prices)

    def of(self, *names: str) -> ModelPrice | None:
        """The price of the first of ``names`` that has one (each also without its
        provider prefix)."""
        if names in self._found:
            return self._found[names]
        if len(self._found) > 1000:
            self._found.clear()
        self._found[names] = found = self._look_up(names)
        return found

    def _look_up(self, names: tuple[str, ...]) -> ModelPrice | None:
        for name in names:
            if not name:
                continue
            price = self.prices.get(name) or self.prices.get(name.partition(":")[2])
            if price is not None:
                return price
        return None

    def unpriced(self, names: Iterable[str]) -> list[str]:
        """The models among ``names`` that have no price."""
        return [n for n in names if self.of(n) is None]


def worst_case(price: ModelPrice | None, prompt_tokens: int, max_tokens: int) -> int:
    """The most a call can cost, in nano-dollars (its whole prompt uncached)."""
    if price is None:
        return 0
    return math.ceil((prompt_tokens * price.input_per_mtok
                      + max_tokens * price.output_per_mtok) * 1000)


def cost(price: ModelPrice | None, usage: Usage) -> int:
    """What a call cost, in nano-dollars, from the usage the provider reported."""
    if price is None:
        return 0
    cached = min(usage.cached_prompt_tokens, usage.prompt_tokens)
    cached_price = price.input_per_mtok if price.cached_input_per_mtok is None \
        else price.cached_input_per_mtok
    return math.ceil(((usage.prompt_tokens - cached) * price.input_per_mtok
                      + cached * cached_price
                      + usage.completion_tokens * price.output_per_mtok) * 1000)

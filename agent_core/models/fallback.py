"""FallbackModel: a chain of models tried in order when one is rate-limited, down or out of
credit. Each switch is reported as a MODEL_FALLBACK event."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from ..errors import ModelError
from .base import ModelAdapter, ModelRequest, ModelResponse

log = logging.getLogger(__name__)


class FallbackModel(ModelAdapter):
    """Tries each model in turn; a model that just failed is skipped for ``cooldown`` seconds
    so every call does not wait on a primary that is known to be down."""

    def __init__(self, models: Sequence[ModelAdapter], *, cooldown: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not models:
            raise ValueError("FallbackModel needs at least one model")
        self.models = list(models)
        self.cooldown = cooldown
        self._clock = clock
        self._failed_at: dict[int, float] = {}
        self.name = self.models[0].name
        self.native_tools = all(getattr(m, "native_tools", True) for m in self.models)

    async def aclose(self) -> None:
        for model in self.models:
            await model.aclose()

    @property
    def calls_waiting(self) -> int:
        return sum(model.calls_waiting for model in self.models)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        now = self._clock()
        fresh = [i for i in range(len(self.models))
                 if now - self._failed_at.get(i, -1e18) >= self.cooldown]
        order = fresh + [i for i in range(len(self.models)) if i not in fresh]
        last_error: ModelError | None = None
        for position, index in enumerate(order):
            model = self.models[index]
            if position > 0 and last_error is not None:
                log.warning("model %s failed (%s); falling back to %s",
                            self.models[order[position - 1]].name, last_error, model.name)
                request.emit("MODEL_FALLBACK", {
                    "from": self.models[order[position - 1]].name, "to": model.name,
                    "reason": type(last_error).__name__, "detail": str(last_error)[:300]})
            try:
                response = await model.complete(request)
            except ModelError as exc:
                if not exc.fallback_worthy:
                    raise
                self._failed_at[index] = self._clock()
                last_error = exc
                continue
            self._failed_at.pop(index, None)
            return response
        assert last_error is not None
        raise last_error

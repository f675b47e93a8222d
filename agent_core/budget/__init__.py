"""Budgets of model use: rules, prices, windows, and ``StoreBudget``, the Budget the
gateway and the hub's agents keep in the store (imported when first used: it needs the
store's client)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..exports import lazy_exports
from .base import (
    SCOPES,
    Budget,
    BudgetListener,
    BudgetMatch,
    BudgetRule,
    BudgetUse,
    Charge,
    Hold,
    ModelPrice,
    Overrun,
    Period,
    Scope,
    Unit,
)
from .periods import Calendar, Span
from .prices import NANO, Prices

if TYPE_CHECKING:
    from .ledger import StoreBudget, announce

__getattr__ = lazy_exports(__name__, {"StoreBudget": "ledger", "announce": "ledger"})

__all__ = [
    "NANO",
    "SCOPES",
    "Budget",
    "BudgetListener",
    "BudgetMatch",
    "BudgetRule",
    "BudgetUse",
    "Calendar",
    "Charge",
    "Hold",
    "ModelPrice",
    "Overrun",
    "Period",
    "Prices",
    "Scope",
    "Span",
    "StoreBudget",
    "Unit",
    "announce",
]

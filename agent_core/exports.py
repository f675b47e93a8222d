"""Lazy public names for a package's ``__init__``: each is imported from its module when
first used, so that importing a package does not import every backend it offers."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``names`` maps a public name to the module
    (relative to the package) that defines it."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__

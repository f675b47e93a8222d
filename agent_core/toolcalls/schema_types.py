"""Typing the arguments the XML-style formats write as text, by the tool's JSON Schema:
``<parameter=days>7</parameter>`` is 7 when ``days`` is an integer, "7" when a string; in
nested objects and lists too (the tags of MiniMax-M3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import _jsonscan


def type_arguments(arguments: dict[str, Any], schema: Mapping[str, Any] | None
                   ) -> dict[str, Any]:
    """``arguments`` (values as written) typed by ``schema``'s properties; a value that
    does not read as its type stays text (the tool's own validation then names it)."""
    properties = (schema or {}).get("properties") or {}
    return {key: _typed_value(value, properties.get(key) or {})
            for key, value in arguments.items()}


def _typed_value(value: Any, prop: Mapping[str, Any]) -> Any:
    """``value`` typed by its property's schema, nested objects and lists (MiniMax-M3's
    tags) included."""
    if isinstance(value, str):
        return _typed(value, _types(prop))
    kinds = _types(prop)
    if isinstance(value, dict) and len(value) == 1 and "array" in kinds \
            and "object" not in kinds:
        [inner] = value.values()  # <items><item>…</item><item>…</item></items>
        value = inner if isinstance(inner, list) else [inner]
    items = prop.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return [_typed_value(item, items) for item in value]
    if isinstance(value, dict) and isinstance(prop.get("properties"), Mapping):
        return type_arguments(value, prop)
    return value


def _types(prop: Mapping[str, Any]) -> list[str]:
    kind = prop.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind) if isinstance(kind, list) else []
    for alternative in (*prop.get("anyOf", ()), *prop.get("oneOf", ())):
        if isinstance(alternative, Mapping):
            kinds += _types(alternative)
    if not kinds and ("properties" in prop):
        kinds = ["object"]
    if not kinds and ("items" in prop):
        kinds = ["array"]
    return kinds


def _typed(value: str, kinds: list[str]) -> Any:
    text = value.strip()
    for kind in kinds:
        if kind == "string":
            return value
        if kind == "integer":
            try:
                return int(text)
            except ValueError:
                continue
        if kind == "number":
            try:
                number = float(text)
            except ValueError:
                continue
            return int(number) if number.is_integer() and "." not in text else number
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind == "null" and text.lower() in ("null", "none", ""):
            return None
        if kind in ("object", "array"):
            loaded = _jsonscan.loads_arguments(text)
            if loaded is not None and isinstance(loaded[0], dict if kind == "object" else list):
                return loaded[0]
    if not kinds:  # no schema for it: JSON it is when it reads as an object or a list
        loaded = _jsonscan.loads_arguments(text) if text[:1] in "{[" else None
        if loaded is not None and isinstance(loaded[0], dict | list):
            return loaded[0]
    return value

"""A run's document: what its steps read (JSONPath queries) and what their conditions test."""

from __future__ import annotations

from typing import Any

from .definition import compiled


class MissingInput(LookupError):
    """A step's input query matched nothing in the document."""

    def __init__(self, name: str, query: str) -> None:
        super().__init__(f"input {name!r}: {query} matched nothing")
        self.name = name
        self.query = query


def resolve(template: Any, document: dict[str, Any], where: str = "") -> Any:
    """``template`` with each query replaced by what it finds: one match is the value,
    several are a list; a query that matches nothing raises MissingInput."""
    if isinstance(template, str) and template.startswith("$"):
        found = compiled(template).findall(document)
        if not found:
            raise MissingInput(where or "input", template)
        return found[0] if len(found) == 1 and not _many(template) else found
    if isinstance(template, dict):
        return {key: resolve(item, document, f"{where}.{key}" if where else str(key))
                for key, item in template.items()}
    if isinstance(template, list):
        return [resolve(item, document, f"{where}[{i}]") for i, item in enumerate(template)]
    return template


def holds(condition: str, document: dict[str, Any]) -> bool:
    """Whether the filter expression ``condition`` holds over ``document`` (evaluated by
    the JSONPath library as the filter of ``$[?...]``: the document's members are the
    candidates, and each is kept when the condition, which reads ``$``, holds)."""
    return bool(compiled(f"$[?{condition}]").findall(document))


def _many(query: str) -> bool:
    """Whether a query selects a list of nodes by its form (a wildcard, a slice, a filter,
    a descendant): its result stays a list even when one node matches."""
    return any(token in query for token in ("[*]", ".*", "..", "[?", ":"))

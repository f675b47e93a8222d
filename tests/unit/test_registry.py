"""The @tool decorator: schemas from signatures, validation, coercion, formats."""

from __future__ import annotations

import datetime as dt
from typing import Literal

import pytest

from agent_core import ToolContext, ToolRegistry, tool
from agent_core.errors import ConfigError, ToolDefinitionError
from agent_core.tools import ArgumentError


@tool
def search_orders(query: str, limit: int = 10, status: Literal["open", "closed"] | None = None,
                  since: dt.date | None = None, ctx: ToolContext | None = None) -> str:
    """Search orders by keyword.

    Longer explanation that is part of the description.

    Args:
        query: Words to look for.
        limit: How many results to return,
            at most 100.
        status: Only orders in this state.
        since: Only orders created on or after this day.
    """
    return f"{query}:{limit}:{status}:{since}:{ctx.user_id if ctx else None}"


def test_schema_comes_from_type_hints_and_docstring() -> None:
    schema = search_orders.parameters
    assert search_orders.description.startswith("Search orders by keyword.")
    assert "Longer explanation" in search_orders.description
    assert schema["required"] == ["query"]
    props = schema["properties"]
    assert props["query"] == {"type": "string", "description": "Words to look for."}
    assert props["limit"]["type"] == "integer" and props["limit"]["default"] == 10
    assert props["limit"]["description"] == "How many results to return, at most 100."
    assert props["status"]["enum"] == ["open", "closed"]
    assert props["since"]["format"] == "date"
    assert "ctx" not in props, "the context is injected, never shown to the model"
    assert schema["additionalProperties"] is False
    assert "title" not in str(schema)


def test_obvious_coercions_are_applied() -> None:
    args = search_orders.validate({"query": 42, "limit": "3", "since": "2024-05-01"})
    assert args["query"] == "42"
    assert args["limit"] == 3
    assert args["since"] == dt.date(2024, 5, 1)


@pytest.mark.parametrize(("arguments", "expected"), [
    ({}, "query: is required"),
    ({"query": "x", "limit": "many"}, "limit: "),
    ({"query": "x", "status": "pending"}, "status: "),
    ({"query": "x", "sincee": "2024-01-01"}, "sincee: is not a parameter"),
    ({"query": "x", "since": "yesterday"}, "since: "),
])
def test_validation_errors_name_the_field(arguments: dict[str, object], expected: str) -> None:
    with pytest.raises(ArgumentError) as err:
        search_orders.validate(arguments)
    assert expected in str(err.value)


async def test_context_is_injected_by_annotation() -> None:
    ctx = ToolContext(user_id="u1", conversation_id="c", trace_id="t")
    out = await search_orders.invoke(search_orders.validate({"query": "q"}), ctx)
    assert out == "q:10:None:None:u1"


def test_explicit_schema_is_used_and_validated() -> None:
    @tool(schema={"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
                  "required": ["n"]})
    def square(**kwargs: int) -> int:
        """Square a number."""
        return kwargs["n"] ** 2

    assert square.parameters["properties"]["n"]["minimum"] == 1
    assert square.validate({"n": "4"}) == {"n": 4}
    with pytest.raises(ArgumentError, match="n: 0 is less than the minimum"):
        square.validate({"n": 0})
    with pytest.raises(ArgumentError, match="'n' is a required property"):
        square.validate({})


def test_metadata_and_defaults() -> None:
    @tool(side_effect="write", requires_confirmation=True, timeout=3, tags=["money"],
          context_policy="summarise")
    def pay(amount: float) -> str:
        """Pay."""
        return "ok"

    assert pay.side_effect == "write" and pay.requires_confirmation
    assert pay.required_permission == "write"
    assert pay.retries == 0, "writes are never retried automatically"
    assert search_orders.retries == 1 and search_orders.required_permission == "read"
    assert pay.tags == frozenset({"money"}) and pay.context_policy == "summarise"


@pytest.mark.parametrize("bad", [
    {"name": "has space"}, {"name": "final_answer"}, {"side_effect": "delete"},
    {"context_policy": "forget"},
])
def test_bad_definitions_fail_fast(bad: dict[str, str]) -> None:
    def f(x: int) -> int:
        """Doc."""
        return x

    with pytest.raises(ToolDefinitionError):
        tool(**bad)(f)  # type: ignore[call-overload]


def test_missing_description_and_varargs_are_refused() -> None:
    def nodoc(x: int) -> int:
        return x

    def varargs(*items: int) -> int:
        """Doc."""
        return 0

    with pytest.raises(ToolDefinitionError, match="needs a description"):
        tool(nodoc)
    with pytest.raises(ToolDefinitionError, match="explicit schema"):
        tool(varargs)


def test_registry_exports_openai_and_anthropic_formats() -> None:
    registry = ToolRegistry([search_orders])
    [openai] = registry.to_openai()
    assert openai["type"] == "function"
    assert openai["function"]["name"] == "search_orders"
    assert openai["function"]["parameters"] == search_orders.parameters
    [anthropic] = registry.to_anthropic()
    assert anthropic["input_schema"] == search_orders.parameters
    assert anthropic["name"] == "search_orders"


def test_registry_refuses_two_tools_with_one_name() -> None:
    @tool(name="search_orders")
    def other(q: str) -> str:
        """Other."""
        return q

    registry = ToolRegistry([search_orders])
    registry.add(search_orders)  # the same tool twice is harmless
    with pytest.raises(ToolDefinitionError, match="two different tools"):
        registry.add(other)


def test_registry_from_modules_uses_the_same_path_as_user_tools() -> None:
    registry = ToolRegistry.from_modules(["tools.sales"])
    assert registry.names() == ["query_sales_data", "calc_growth_rate", "save_daily_report"]
    with pytest.raises(ConfigError, match="cannot be imported"):
        ToolRegistry.from_modules(["no_such_module_xyz"])
    with pytest.raises(ConfigError, match="defines no @tool"):
        ToolRegistry.from_modules(["json"])

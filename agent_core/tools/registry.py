"""The @tool decorator, Tool and ToolRegistry.

A tool is an ordinary function, sync or async. The decorator derives its JSON Schema from
the type hints, its description from the docstring and each parameter's description from the
docstring's ``Args:`` section, unless an explicit ``schema=`` is given::

    @tool(side_effect="write", requires_confirmation=True)
    async def save_report(content: str, ctx: ToolContext) -> str:
        '''Append text to today's report.

        Args:
            content: Markdown to append.
        '''

Built-in tools and a deployment's own tools register the same way: a registry is built from
a list of tools or from the modules that define them.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from ..errors import ConfigError, ToolDefinitionError
from ._schema import ExplicitArguments, SignatureArguments, context_parameter, parse_docstring
from .context import ToolContext

SideEffect = Literal["read", "write"]
ContextPolicy = Literal["keep", "summarise", "drop"]
Isolation = Literal["inline", "subprocess"]

RESERVED_NAMES = frozenset({"final_answer", "ask_user"})
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable the model may use, with everything the executor needs to run it safely."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    side_effect: SideEffect = "read"
    requires_confirmation: bool = False
    #: Permission a caller needs; defaults to the side effect ("read" or "write").
    permission: str | None = None
    #: Seconds before the call is abandoned; None uses the executor's default.
    timeout: float | None = None
    context_policy: ContextPolicy = "keep"
    #: Labels policies act on, e.g. "money" or "personal_data" (always need approval).
    tags: frozenset[str] = frozenset()
    #: Automatic retries after a transient failure (timeout, ToolTransientError).
    retries: int = 0
    isolation: Isolation = "inline"
    #: Memory limit in MiB for subprocess isolation.
    memory_mb: int | None = None
    _arguments: SignatureArguments | ExplicitArguments | None = field(default=None, repr=False)
    _ctx_param: str | None = field(default=None, repr=False)

    @property
    def required_permission(self) -> str:
        """The permission a caller must hold."""
        return self.permission or self.side_effect

    def spec(self) -> dict[str, Any]:
        """The neutral description sent to model adapters."""
        return {"name": self.name, "description": self.description,
                "parameters": self.parameters}

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validated, coerced arguments; raises ArgumentError with a model-readable reason."""
        assert self._arguments is not None
        return self._arguments.validate(arguments)

    def bind(self, arguments: dict[str, Any], ctx: ToolContext | None) -> dict[str, Any]:
        """Keyword arguments for the function: validated arguments plus the context."""
        kwargs = dict(arguments)
        if self._ctx_param is not None:
            kwargs[self._ctx_param] = ctx
        return kwargs

    async def invoke(self, arguments: dict[str, Any], ctx: ToolContext | None) -> Any:
        """Run the function with already-validated arguments; sync functions run in a thread."""
        kwargs = self.bind(arguments, ctx)
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        return await asyncio.to_thread(self.fn, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly, bypassing every policy."""
        return self.fn(*args, **kwargs)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    schema: dict[str, Any] | None = None,
    side_effect: SideEffect = "read",
    requires_confirmation: bool = False,
    permission: str | None = None,
    timeout: float | None = None,
    context_policy: ContextPolicy = "keep",
    tags: Iterable[str] = (),
    retries: int | None = None,
    isolation: Isolation = "inline",
    memory_mb: int | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    schema: dict[str, Any] | None = None,
    side_effect: SideEffect = "read",
    requires_confirmation: bool = False,
    permission: str | None = None,
    timeout: float | None = None,
    context_policy: ContextPolicy = "keep",
    tags: Iterable[str] = (),
    retries: int | None = None,
    isolation: Isolation = "inline",
    memory_mb: int | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a function into a Tool. Usable bare (``@tool``) or with options."""

    def build(func: Callable[..., Any]) -> Tool:
        tool_name = name or func.__name__
        if not _NAME.match(tool_name):
            raise ToolDefinitionError(
                f"tool name {tool_name!r} must be 1-64 letters, digits, '_' or '-'")
        if tool_name in RESERVED_NAMES:
            raise ToolDefinitionError(f"tool name {tool_name!r} is reserved by the agent loop")
        if side_effect not in ("read", "write"):
            raise ToolDefinitionError(f"side_effect must be 'read' or 'write', not {side_effect!r}")
        if context_policy not in ("keep", "summarise", "drop"):
            raise ToolDefinitionError(
                f"context_policy must be keep, summarise or drop, not {context_policy!r}")
        if isolation == "subprocess" and inspect.iscoroutinefunction(func):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: subprocess isolation needs a plain (sync) function")
        doc_text, param_docs = parse_docstring(func.__doc__)
        text = description or doc_text
        if not text:
            raise ToolDefinitionError(
                f"tool {tool_name!r} needs a description: add a docstring or description=")
        arguments = (ExplicitArguments(schema, tool_name) if schema is not None
                     else SignatureArguments(func, param_docs))
        return Tool(
            name=tool_name,
            description=text,
            parameters=arguments.schema,
            fn=func,
            side_effect=side_effect,
            requires_confirmation=requires_confirmation,
            permission=permission,
            timeout=timeout,
            context_policy=context_policy,
            tags=frozenset(tags),
            # Writes are never retried automatically: a retry could do the write twice.
            retries=retries if retries is not None else (1 if side_effect == "read" else 0),
            isolation=isolation,
            memory_mb=memory_mb,
            _arguments=arguments,
            _ctx_param=context_parameter(func),
        )

    return build(fn) if fn is not None else build


class ToolRegistry:
    """The set of tools one deployment offers. Registries are plain objects; compose freely."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        #: Grows with every change, so that a loop notices tools added or removed while it
        #: runs (an MCP server's list changed).
        self.version = 0
        for t in tools:
            self.add(t)

    @classmethod
    def from_modules(cls, modules: Iterable[str]) -> ToolRegistry:
        """A registry of every Tool defined at the top level of the named modules."""
        registry = cls()
        for module_name in modules:
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise ConfigError(f"HERMES_TOOLS names {module_name!r}, which cannot be "
                                  f"imported: {exc}") from exc
            found = [v for v in vars(module).values() if isinstance(v, Tool)]
            if not found:
                raise ConfigError(f"module {module_name!r} defines no @tool functions")
            for t in found:
                registry.add(t)
        return registry

    def add(self, item: Tool | Callable[..., Any]) -> Tool:
        """Register a Tool (a plain function is wrapped with @tool's defaults)."""
        t = item if isinstance(item, Tool) else tool(item)
        existing = self._tools.get(t.name)
        if existing is not None and existing.fn is not t.fn:
            raise ToolDefinitionError(f"two different tools are named {t.name!r}")
        if existing is not t:
            self._tools[t.name] = t
            self.version += 1
        return t

    def remove(self, name: str) -> Tool | None:
        """Unregister the tool called ``name``; the tool, or None when there was none."""
        removed = self._tools.pop(name, None)
        if removed is not None:
            self.version += 1
        return removed

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """Neutral specs {"name", "description", "parameters"} of every tool."""
        return [t.spec() for t in self._tools.values()]

    def to_openai(self) -> list[dict[str, Any]]:
        """OpenAI ``tools`` entries."""
        from .._toolformats import to_openai

        return to_openai(self.specs())

    def to_anthropic(self) -> list[dict[str, Any]]:
        """Anthropic ``tools`` entries."""
        from .._toolformats import to_anthropic

        return to_anthropic(self.specs())

"""Arguments of a tool: JSON Schema from a signature, validation and obvious coercions."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ..errors import ToolDefinitionError
from .context import ToolContext

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|"
                      r"Notes?)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ArgumentError(ValueError):
    """Arguments do not fit a tool's schema; the message is written for the model."""


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description, {param: description}) from a Google-style docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            section, current, arg_indent = header.group(1).lower(), None, None
            continue
        if section is None:
            description.append(line)
            continue
        if section not in ("args", "arguments", "parameters") or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(line)
        if match and (arg_indent is None or indent <= arg_indent):
            arg_indent = indent
            current = match.group(1)
            params[current] = match.group(2).strip()
        elif current is not None:
            params[current] = f"{params[current]} {line.strip()}".strip()
    paragraphs = "\n".join(description).strip().split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip()), params


def context_parameter(fn: Callable[..., Any]) -> str | None:
    """The name of the parameter that receives the ToolContext, if the function has one."""
    hints = _hints(fn)
    for name in inspect.signature(fn).parameters:
        hint = hints.get(name)
        if hint is ToolContext or ToolContext in typing.get_args(hint) \
                or name in ("ctx", "tool_context"):
            return name
    return None


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"cannot read the type hints of {fn.__qualname__!r}: {exc}") from exc


class SignatureArguments:
    """Validates arguments with a pydantic model built from the function's signature."""

    def __init__(self, fn: Callable[..., Any], param_docs: dict[str, str]) -> None:
        hints = _hints(fn)
        skip = context_parameter(fn)
        fields: dict[str, Any] = {}
        for name, param in inspect.signature(fn).parameters.items():
            if name == skip:
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ToolDefinitionError(
                    f"tool {fn.__name__!r}: *args/**kwargs cannot be described to a model; "
                    "give an explicit schema=")
            annotation = hints.get(name, Any)
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[name] = (annotation, Field(default, description=param_docs.get(name)))
        config = ConfigDict(extra="forbid", coerce_numbers_to_str=True,
                            arbitrary_types_allowed=False)
        try:
            self.model: type[BaseModel] = create_model(
                f"{fn.__name__}_arguments", __config__=config, **fields)
            self.schema = _clean_schema(self.model.model_json_schema())
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {fn.__name__!r}: cannot build a JSON Schema from its signature: {exc}"
            ) from exc

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments, or ArgumentError naming the field and what's expected."""
        try:
            model = self.model.model_validate(arguments)
        except ValidationError as exc:
            raise ArgumentError(_describe(exc)) from None
        return {name: getattr(model, name) for name in type(model).model_fields}


class ExplicitArguments:
    """Validates arguments against a JSON Schema the tool author wrote."""

    def __init__(self, schema: dict[str, Any], name: str) -> None:
        import jsonschema  # only tools with a written schema (MCP tools) need it: ~70 ms

        # The draft the schema names ($schema; MCP servers often write draft-07), else 2020-12.
        validator = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
        try:
            validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ToolDefinitionError(f"tool {name!r}: invalid JSON Schema: {exc.message}") \
                from None
        if schema.get("type") != "object":
            raise ToolDefinitionError(f"tool {name!r}: the schema must describe an object")
        self.schema = schema
        self._validator = validator(schema)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Coerce obvious scalars ("3" -> 3), then validate against the schema."""
        coerced = {k: _coerce(v, self.schema.get("properties", {}).get(k, {}))
                   for k, v in arguments.items()}
        errors = sorted(self._validator.iter_errors(coerced), key=lambda e: list(e.path))
        if errors:
            parts = []
            for err in errors[:3]:
                where = ".".join(str(p) for p in err.path) or "arguments"
                parts.append(f"{where}: {err.message}")
            raise ArgumentError("; ".join(parts))
        return coerced


def _coerce(value: Any, schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if not isinstance(value, str):
        if kind == "string" and isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value
    text = value.strip()
    try:
        if kind == "integer" and re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        if kind == "number" and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
            return float(text)
    except ValueError:
        return value
    if kind == "boolean" and text.lower() in ("true", "false", "yes", "no", "1", "0"):
        return text.lower() in ("true", "yes", "1")
    return value


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "missing":
            parts.append(f"{where}: is required")
        elif err["type"] == "extra_forbidden":
            parts.append(f"{where}: is not a parameter of this tool")
        else:
            parts.append(f"{where}: {err['msg']} (got {err.get('input')!r:.80})")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline $refs and drop pydantic's titles: models read plain, self-contained schemas."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                target = defs[node["$ref"].rsplit("/", 1)[-1]]
                return walk({**target, **{k: v for k, v in node.items() if k != "$ref"}})
            out = {k: walk(v) for k, v in node.items() if k != "title"}
            # Optional[X] = None is shown as X; not being required says it may be left out.
            any_of = out.get("anyOf")
            if isinstance(any_of, list) and {"type": "null"} in any_of and len(any_of) == 2:
                other = next(s for s in any_of if s != {"type": "null"})
                out.pop("anyOf")
                out = {**other, **out}
                if out.get("default", 0) is None:
                    out.pop("default")
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    cleaned = walk(schema)
    cleaned.setdefault("properties", {})
    cleaned["additionalProperties"] = False
    return typing.cast(dict[str, Any], cleaned)

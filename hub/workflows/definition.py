"""A workflow's definition: versioned steps over one JSON document, checked before it is
kept.

A run's document starts as ``{"input": <the run's input>}``; each finished step adds
``{"<step id>": {"status", "result", "error_code", "agent"}}``. A step's ``input`` is an
object whose string values starting with ``$`` are JSONPath queries over that document
(RFC 9535, python-jsonpath) and whose other values are taken as written; a step's ``if`` is
an RFC 9535 filter expression over it (``$.check.status == "success" && $.check.result.score
> 0.5``). A step runs once every step its queries name has finished, so the steps form a
graph: independent steps run side by side, and a definition with a cycle is refused.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Literal

import jsonpath
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..messages import MAX_DEADLINE_MS

_ID = r"^[a-z][a-z0-9_]{0,63}$"
_WORKFLOW_ID = r"^[a-z][a-z0-9_-]{0,63}$"
#: The first segment of each root query in an expression: ``$.name`` or ``$['name']``.
_ROOT = re.compile(r"\$(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*['\"]([^'\"]+)['\"]\s*\])")
#: Names of the document that are not steps.
RESERVED = frozenset({"input", "run"})


class DefinitionError(ValueError):
    """A definition that cannot be kept: which step (if one), and why."""

    def __init__(self, message: str, *, step: str | None = None) -> None:
        super().__init__(f"step {step!r}: {message}" if step else message)
        self.step = step
        self.reason = message


class Step(BaseModel):
    """One step: who does it (an agent id, or any live agent with a capability), what it
    is asked (``intent``), with what (``input``), and when (``if``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(pattern=_ID)
    agent: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
    capability: str | None = Field(None, pattern=r"^[a-z][a-z0-9_]{0,63}$")
    intent: str | None = Field(None, min_length=1, max_length=200)
    input: dict[str, Any] = Field(default_factory=dict)
    when: str | None = Field(None, alias="if", max_length=2000)
    deadline_ms: int = Field(60_000, ge=1, le=MAX_DEADLINE_MS)
    #: What a failed (or timed-out) step does to the run: end it, or let it go on.
    on_failure: Literal["stop", "continue"] = "stop"
    #: How many times a ``partial`` answer's next steps are followed.
    max_follow_ups: int = Field(3, ge=0, le=20)
    #: Steps that must finish first, beyond those its queries name.
    after: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _who(self) -> Step:
        if (self.agent is None) == (self.capability is None):
            raise ValueError("name either an agent or a capability")
        return self

    @property
    def asked(self) -> str:
        """The intent of its task_request (the capability unless one is given)."""
        return self.intent or self.capability or "run"


class Workflow(BaseModel):
    """A versioned definition. ``capability`` (optional) offers the workflow on the hub
    under that name: a task_request with it as intent runs this workflow."""

    model_config = ConfigDict(extra="forbid")

    workflow_id: str = Field(pattern=_WORKFLOW_ID)
    version: int = Field(1, ge=1)
    description: str = Field("", max_length=2000)
    capability: str | None = Field(None, pattern=r"^[a-z][a-z0-9_]{0,63}$")
    #: Values of ``$.input`` a run's own input leaves out.
    defaults: dict[str, Any] = Field(default_factory=dict)
    steps: list[Step] = Field(min_length=1, max_length=100)
    #: The run's answer: queries over the document like a step's input (default: the
    #: result of the last step that ran).
    output: dict[str, Any] | None = None

    def step(self, step_id: str) -> Step:
        """The step ``step_id``."""
        return next(s for s in self.steps if s.id == step_id)

    def needs(self, step: Step) -> set[str]:
        """The steps ``step`` waits for."""
        named = set(step.after) | references(step.input)
        if step.when:
            named |= roots(step.when)
        return named - RESERVED

    def order(self) -> list[str]:
        """The step ids in an order that runs each after what it needs (the written order
        where the graph leaves a choice)."""
        placed: list[str] = []
        left = [s.id for s in self.steps]
        while left:
            ready = [i for i in left if self.needs(self.step(i)) <= set(placed)]
            if not ready:
                raise DefinitionError(f"the steps {', '.join(left)} wait for each other "
                                      "(a cycle)", step=left[0])
            placed.append(ready[0])
            left.remove(ready[0])
        return placed


def parse_definition(data: Any, *, known: set[str] | None = None) -> Workflow:
    """``data`` as a checked Workflow, or DefinitionError naming the step. ``known``: the
    agent ids and capabilities live on the hub; when given, a step naming another is
    refused."""
    try:
        workflow = Workflow.model_validate(data)
    except ValidationError as exc:
        raise _error_of(exc, data) from None
    check(workflow, known=known)
    return workflow


def check(workflow: Workflow, *, known: set[str] | None = None) -> None:
    """Every rule beyond the fields' own: unique ids, queries that compile and name steps of
    this workflow, no cycle, known agents."""
    ids = [s.id for s in workflow.steps]
    for step in workflow.steps:
        if ids.count(step.id) > 1:
            raise DefinitionError("two steps have this id", step=step.id)
        if step.id in RESERVED:
            raise DefinitionError(f"{step.id!r} is reserved for the run's document",
                                  step=step.id)
        for name, query in queries(step.input):
            _compile(query, step=step.id, what=f"input {name!r}")
        if step.when:
            _compile(f"$[?{step.when}]", step=step.id, what="if", shown=step.when)
        for needed in workflow.needs(step):
            if needed == step.id:
                raise DefinitionError("it reads its own result", step=step.id)
            if needed not in ids:
                raise DefinitionError(f"it reads $.{needed}, which is no step of this "
                                      "workflow", step=step.id)
        if known is not None:
            who = step.agent or step.capability
            if who not in known:
                kind = "agent" if step.agent else "capability"
                raise DefinitionError(f"no live agent on the hub is or offers the {kind} "
                                      f"{who!r}", step=step.id)
    for name, query in queries(workflow.output or {}):
        _compile(query, step=None, what=f"output {name!r}")
    workflow.order()


def queries(value: Any, where: str = "") -> list[tuple[str, str]]:
    """The JSONPath queries in an input object (nested objects and lists included), with
    where each is."""
    if isinstance(value, str):
        return [(where, value)] if value.startswith("$") else []
    if isinstance(value, dict):
        return [q for key, item in value.items()
                for q in queries(item, f"{where}.{key}" if where else str(key))]
    if isinstance(value, list):
        return [q for index, item in enumerate(value) for q in queries(item, f"{where}[{index}]")]
    return []


def references(value: Any) -> set[str]:
    """The top-level document names an input's queries read."""
    return {name for _, query in queries(value) for name in roots(query)}


def roots(expression: str) -> set[str]:
    """The first segment of each root query in ``expression``."""
    return {m.group(1) or m.group(2) for m in _ROOT.finditer(expression)}


@lru_cache(maxsize=1024)
def compiled(query: str) -> Any:
    """``query`` compiled (the same query is compiled once per process)."""
    return jsonpath.compile(query)


def _compile(query: str, *, step: str | None, what: str, shown: str | None = None) -> None:
    try:
        compiled(query)
    except jsonpath.JSONPathError as exc:
        first = str(exc).splitlines()[0]
        raise DefinitionError(f"{what} is not valid JSONPath ({shown or query!r}): {first}",
                              step=step) from None


def _error_of(exc: ValidationError, data: Any) -> DefinitionError:
    """The first field error, naming the step it is in."""
    error = exc.errors()[0]
    loc = list(error["loc"])
    step: str | None = None
    if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
        raw = data.get("steps") if isinstance(data, dict) else None
        if isinstance(raw, list) and loc[1] < len(raw) and isinstance(raw[loc[1]], dict):
            step = str(raw[loc[1]].get("id") or f"#{loc[1] + 1}")
        else:
            step = f"#{loc[1] + 1}"
        loc = loc[2:]
    field = ".".join(str(p) for p in loc)
    message = error["msg"].removeprefix("Value error, ")
    return DefinitionError(f"{field}: {message}" if field else message, step=step)

"""DecisionParser: whatever the model returned, as AgentDecisions. Never raises.

1. ``native``: the provider's tool calls (OpenAI ``tool_calls``, Anthropic ``tool_use``).
2. Reasoning (``<think>``, ``[THINK]``, Gemma's ``<|channel>thought``, harmony's analysis
   channel and the others of ``toolcalls.reasoning``) is cut: it is never an action and never
   the answer.
3. The tool-call formats open models write as text, one reader each (``agent_core.toolcalls``:
   Hermes/Qwen ``<tool_call>`` JSON, Qwen3-Coder XML, GLM, Kimi K2 / K3, DeepSeek (DSML
   included), gpt-oss harmony, MiniMax M2 / M3, Gemma 4, FunctionGemma, Apertus, Hunyuan,
   Functionary, llama-cpp-python, OLMo 3, Mistral, Llama 3 / 4, pythonic calls and more);
   the first whose markers are in the text and that recognises it wins. Code that prose
   shows in a fence is not read.
4. The JSON protocol of our own prompt: ``fenced`` (```json), ``json`` (the whole output,
   TGI's grammar included), ``json_calls`` (several calls), ``embedded`` (JSON inside prose).
5. ``plain_text``: no structure at all, a final answer.

The rule that read the output is ``AgentDecision.rule`` (a ``+repaired`` suffix marks JSON
that needed repair). Output that tried to call a tool but cannot be read becomes ``invalid``
with a reason the model is told, never a call with made-up arguments (a value cut off at the
end is never completed); so does an unknown tool, in every format, and any call in an output
the token limit cut.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from itertools import islice
from typing import Any

from . import _jsonscan
from ._decisionfields import (
    args_of,
    choices_of,
    content_of,
    looks_like_decision,
    name_of,
    str_of,
    type_of,
)
from ._lazyre import lazy
from .decisions import AgentDecision
from .models.base import ModelResponse, RawToolCall
from .toolcalls import READERS, Found, split_reasoning
from .toolcalls.base import MAX_CALLS
from .toolcalls.schema_types import type_arguments

log = logging.getLogger(__name__)

# Names of the loop's own pseudo-tools: a model calls them natively to answer or to ask.
FINAL_ANSWER_TOOL = "final_answer"
ASK_USER_TOOL = "ask_user"

#: Output that set out to be JSON (so it is invalid, not an answer, when unreadable): a
#: fence only when it is JSON's (a Python or shell block is something to show). The tagged
#: formats never get here: their readers answer for them.
_STRUCTURED_START = lazy(
    r"^\s*+(?:\{|\[\s*+\{|```(?:json5?|tool_call|tool_code|javascript|js)?\s*+[{\[])")

#: Every reader's markers in one pattern: a text with none of them (most answers in prose)
#: skips the readers with one scan, instead of asking each reader in turn.
_MARKERS = lazy("|".join(re.escape(m) for reader in READERS for m in reader.markers))
#: finish_reason values that say the token limit cut the output off.
_CUT_BY_THE_LIMIT = frozenset({"length", "max_tokens", "max_output_tokens"})
#: Functionary v3.2's first recipient line (the ">>>" before it ended the prompt).
_RECIPIENT_LINE = lazy(r"\s*([A-Za-z_][\w.-]*)\n")

RepairCall = Callable[[str], Awaitable[str]]


class DecisionParser:
    """Turns a ModelResponse into one or more AgentDecisions (several only for tool calls)."""

    def __init__(self, tool_names: Iterable[str] = (),
                 schemas: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.tool_names = set(tool_names)
        #: Each tool's parameters schema: types the arguments written as text.
        self.schemas = dict(schemas or {})

    # --- public ------------------------------------------------------------------------
    def parse(self, response: ModelResponse) -> list[AgentDecision]:
        """Parse a model turn. Always returns at least one decision; never raises."""
        try:
            decisions = self._parse(response)
        except Exception as exc:  # the parser must never take the loop down
            log.exception("decision parser failed unexpectedly")
            decisions = [AgentDecision.invalid(f"unreadable output ({type(exc).__name__})",
                                               rule="parser_error")]
        for d in decisions:
            log.debug("parser rule %s -> %s %s", d.rule, d.type, d.tool_name or "")
        return decisions

    async def parse_with_repair(
        self, response: ModelResponse, repair: RepairCall | None
    ) -> list[AgentDecision]:
        """Parse; when the result is invalid and a repair call is given, ask once more."""
        decisions = self.parse(response)
        if repair is None or decisions[0].type != "invalid" or not response.text.strip():
            return decisions
        if decisions[0].rule in ("unknown_tool", "cut_off"):
            # the model is told the valid names, or that the limit cut it: a repair could
            # only guess
            return decisions
        try:
            fixed = await repair(response.text)
        except Exception as exc:
            log.warning("model-assisted repair failed: %s", exc)
            return decisions
        repaired = self.parse(ModelResponse(text=fixed))
        if repaired[0].type == "invalid":
            return decisions
        for d in repaired:
            d.rule = f"model_repair:{d.rule}"
        return repaired

    # --- rules -------------------------------------------------------------------------
    def _parse(self, response: ModelResponse) -> list[AgentDecision]:
        if response.tool_calls:
            return [self._native(call) for call in response.tool_calls]
        text = response.text or ""
        if not text.strip():
            return [AgentDecision.invalid("the response was empty", rule="empty")]
        decisions = self._from_text(text)
        if (response.finish_reason or "").lower() in _CUT_BY_THE_LIMIT \
                and any(d.type == "tool_call" for d in decisions):
            # Whatever it holds, it was cut: a call in it may be one the model only thought
            # in a block the prompt opened and the limit kept from closing.
            return [AgentDecision.invalid(
                f"the output was cut off by the token limit ({response.finish_reason}): no "
                "call in it is run; make the call again, with less before it",
                rule="cut_off")]
        return decisions

    def _from_text(self, text: str) -> list[AgentDecision]:
        _, text = split_reasoning(text)
        if not text.strip():
            return [AgentDecision.invalid(
                "the output was all reasoning: end it, then answer or call a tool",
                rule="reasoning_only")]
        # What is read for calls: not the code blocks prose shows (the answer keeps them).
        scan = _jsonscan.without_shown_code(text)
        if self._recipient_first(scan):
            scan = ">>>" + scan.lstrip()  # Functionary v3.2: the prompt ends in ">>>"
        if _MARKERS.search(scan):
            for reader in READERS:
                if any(marker in scan for marker in reader.markers):
                    found = reader.read(scan)
                    if found is not None:
                        return self._from_found(found)

        structured = bool(_STRUCTURED_START.match(scan))
        for lang, body in _jsonscan.fenced_blocks(scan):
            if body.strip() and (lang in _jsonscan.CALL_FENCES or not lang):
                value = _jsonscan.loads_strict(body.strip())
                repaired = False
                if value is None:
                    value, repaired = _jsonscan.loads_repaired(body), True
                if isinstance(value, dict | list) and value:
                    return self._from_value(value, "fenced", repaired, prose=text)

        stripped = scan.strip()
        value = _jsonscan.loads_strict(stripped) if stripped[:1] in ("{", "[") else None
        if isinstance(value, dict | list):
            return self._from_value(value, "json", False, prose="")
        spans = list(islice(_jsonscan.balanced_spans(scan), MAX_CALLS + 1)) \
            if "{" in scan or "[" in scan else []
        several = self._several_calls(scan, spans)
        if several:
            return several
        if structured and stripped[0] in "{[":
            value = _jsonscan.loads_repaired(stripped)
            if isinstance(value, dict | list) and value:
                return self._from_value(value, "json", True, prose="")

        found_value = _jsonscan.first_json_value(scan, spans)
        if found_value is not None:
            value, repaired = found_value
            if looks_like_decision(value):
                return self._from_value(value, "embedded", repaired, prose=text)

        if structured:
            return [AgentDecision.invalid(
                "the output looked like JSON but could not be read; reply with one valid JSON "
                "object or a plain-text answer", rule="unparseable", content=text[:500])]
        return [AgentDecision(type="final_answer", content=text.strip(), rule="plain_text")]

    def _recipient_first(self, text: str) -> bool:
        """Whether ``text`` begins with Functionary v3.2's first recipient: a line naming
        one of the tools with JSON after it (code after ``python``; or more recipients),
        or ``all``. An answer whose first line is a word that names a tool is not one."""
        line = _RECIPIENT_LINE.match(text)
        if line is None or not self.tool_names:
            return False
        name = line.group(1)
        if name == "all":
            return True
        return name in self.tool_names and (
            name == "python" or text[line.end():].lstrip().startswith("{") or ">>>" in text)

    def _several_calls(self, text: str, spans: list[tuple[int, int]]) -> list[AgentDecision]:
        """Several JSON calls in one output (``spans``), with ``;``, newlines or prose between
        them (Llama 3.x without its tag), all of them in order; [] when fewer than two."""
        if len(spans) < 2:
            return []
        decisions: list[AgentDecision] = []
        for start, end in spans:
            loaded = _jsonscan.loads_arguments(text[start:end])
            if loaded is not None and isinstance(loaded[0], dict) \
                    and looks_like_decision(loaded[0]):
                decisions += self._from_object(loaded[0], "json_calls", prose="")
        if len(decisions) < 2 or any(d.type != "tool_call" and d.rule != "unknown_tool"
                                     for d in decisions):
            return []
        return decisions

    def _native(self, call: RawToolCall) -> AgentDecision:
        args = call.arguments
        if isinstance(args, str):
            parsed = _jsonscan.loads_repaired(args) if args.strip() else {}
            if not isinstance(parsed, dict):
                return AgentDecision.invalid(
                    f"the arguments of tool {call.name!r} are not a JSON object: {args[:200]}",
                    rule="native_bad_arguments")
            args = parsed
        return self._tool_decision(call.name, args, call_id=call.id, rule="native")

    def _from_found(self, found: Found) -> list[AgentDecision]:
        rule = f"{found.rule}+repaired" if found.repaired else found.rule
        if found.problem:
            return [AgentDecision.invalid(found.problem, rule=rule)]
        if len(found.calls) > MAX_CALLS:
            return [AgentDecision.invalid(f"{found.rule}: more than {MAX_CALLS} calls in one "
                                          "output; make fewer at a time", rule=rule)]
        if not found.calls:
            if found.answer is None:
                return [AgentDecision.invalid(f"{found.rule}: the tool call holds no call",
                                              rule=rule)]
            return [AgentDecision(type="final_answer", content=found.answer.strip(), rule=rule)]
        decisions = []
        for call in found.calls:
            if call.arguments is None:
                decisions.append(AgentDecision.invalid(call.problem, rule=rule))
                continue
            arguments = call.arguments if call.typed else type_arguments(
                call.arguments, self.schemas.get(call.name))
            decisions.append(self._tool_decision(call.name, arguments, rule=rule,
                                                 call_id=call.call_id))
        return decisions

    # --- interpreting a JSON value -----------------------------------------------------
    def _from_value(self, value: Any, rule: str, repaired: bool, *, prose: str
                    ) -> list[AgentDecision]:
        rule = f"{rule}+repaired" if repaired else rule
        if isinstance(value, list):
            items = [v for v in value if isinstance(v, dict)]
            if not items:
                return [AgentDecision.invalid("expected a JSON object, got a list", rule=rule)]
            decisions = [d for item in items for d in self._from_object(item, rule, prose)]
            calls = [d for d in decisions if d.type == "tool_call"]
            return calls or decisions[:1]
        if isinstance(value, dict):
            return self._from_object(value, rule, prose)
        return [AgentDecision.invalid("expected a JSON object", rule=rule)]

    def _from_object(self, obj: dict[str, Any], rule: str, prose: str) -> list[AgentDecision]:
        # OpenAI-shaped {"tool_calls": [...]} or {"function": {"name", "arguments"}}
        if isinstance(obj.get("tool_calls"), list):
            base_rule = rule.split("+", maxsplit=1)[0]
            return self._from_value(obj["tool_calls"], base_rule, "+" in rule, prose=prose)
        if isinstance(obj.get("function"), dict):
            inner = obj["function"]
            if isinstance(inner.get("_name"), str):
                return [self._tgi(inner, rule)]
            inner_name = name_of(inner)
            if inner_name is None:
                return [AgentDecision.invalid("the function call has no name", rule=rule)]
            return [self._tool_decision(inner_name, args_of(inner), rule=rule,
                                        call_id=obj.get("id"))]

        kind = type_of(obj)
        name = name_of(obj)
        if kind is None and name is not None:
            kind = "tool_call"
        if name is not None and name.lower().replace(" ", "_") in ("final_answer", "finish"):
            kind = "final_answer"  # ReAct: {"action": "Final Answer", "action_input": "..."}
        match kind:
            case "tool_call":
                if name is None:
                    return [AgentDecision.invalid(
                        "a tool_call needs the tool's name in \"tool_name\"", rule=rule)]
                return [self._tool_decision(name, args_of(obj), rule=rule)]
            case "final_answer":
                content = content_of(obj)
                if content is None:
                    return [AgentDecision.invalid(
                        "a final_answer needs its text in \"content\"", rule=rule)]
                return [AgentDecision(type="final_answer", content=content, rule=rule,
                                      reason=str_of(obj.get("reason") or obj.get("thought")))]
            case "ask_user":
                content = content_of(obj)
                if content is None:
                    return [AgentDecision.invalid(
                        "an ask_user decision needs the question in \"content\"", rule=rule)]
                return [AgentDecision(type="ask_user", content=content, rule=rule,
                                      choices=choices_of(obj),
                                      reason=str_of(obj.get("reason")))]
            case "invalid":
                return [AgentDecision.invalid("the model declared its own output invalid",
                                              rule=rule)]
            case _:
                if prose and rule.startswith(("embedded", "fenced")):
                    return [AgentDecision(type="final_answer", content=prose.strip(),
                                          rule="plain_text")]
                return [AgentDecision.invalid(
                    'the JSON has no decision: use {"type": "tool_call", "tool_name": ..., '
                    '"arguments": {...}} or {"type": "final_answer", "content": ...}',
                    rule=rule)]

    def _tgi(self, call: dict[str, Any], rule: str) -> AgentDecision:
        """TGI's grammar: ``{"function": {"_name": NAME, ...arguments}}``; its ``no_tool``
        carries the answer in ``content``."""
        if call["_name"] == "no_tool":
            content = call.get("content")
            if isinstance(content, str):
                return AgentDecision(type="final_answer", content=content, rule=rule)
            return AgentDecision.invalid("no_tool: the answer is not in \"content\"", rule=rule)
        return self._tool_decision(call["_name"], {k: v for k, v in call.items() if k != "_name"},
                                   rule=rule)

    def _tool_decision(self, name: str, args: Any, *, rule: str,
                       call_id: str | None = None) -> AgentDecision:
        if isinstance(args, str):
            parsed = _jsonscan.loads_repaired(args) if args.strip() else {}
            args = parsed if isinstance(parsed, dict) else {"input": args}
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return AgentDecision.invalid(
                f"the arguments of {name!r} must be a JSON object, not "
                f"{json.dumps(args, ensure_ascii=False)[:120]}", rule=rule)
        if name == FINAL_ANSWER_TOOL:
            content = content_of(args)
            return AgentDecision(type="final_answer", content=content or "", rule=rule,
                                 call_id=call_id)
        if name == ASK_USER_TOOL:
            return AgentDecision(type="ask_user", content=content_of(args) or "", rule=rule,
                                 choices=choices_of(args), call_id=call_id)
        if self.tool_names and name not in self.tool_names:
            valid = ", ".join(sorted(self.tool_names))
            return AgentDecision.invalid(
                f"there is no tool named {name!r}; valid tools: {valid}", rule="unknown_tool")
        return AgentDecision(type="tool_call", tool_name=name, arguments=args, rule=rule,
                             call_id=call_id)

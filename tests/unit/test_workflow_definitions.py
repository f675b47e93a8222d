"""Workflow definitions: what is refused (naming the step) and what a run's queries and
conditions read."""

from __future__ import annotations

from typing import Any

import pytest

from hub.workflows import DefinitionError, parse_definition
from hub.workflows.document import MissingInput, holds, resolve


def definition(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"workflow_id": "claims", "steps": list(steps), **extra}


def step(step_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": step_id, "capability": "validate_claim", **fields}


@pytest.mark.parametrize(("steps", "named", "says"), [
    ([step("a", input={"x": "$.b.result["})], "a", "not valid JSONPath"),
    ([step("a", **{"if": '$.input.kind == '})], "a", "not valid JSONPath"),
    ([step("a", input={"x": "$.nope.result"})], "a", "no step of this workflow"),
    ([step("a", input={"x": "$.a.result"})], "a", "reads its own result"),
    ([step("a", input={"x": "$.b.result"}), step("b", input={"y": "$.a.result"})], "a",
     "cycle"),
    ([step("a", after=["c"]), step("b", after=["a"]), step("c", after=["b"])], "a", "cycle"),
    ([step("a"), step("a")], "a", "two steps have this id"),
    ([{"id": "a", "agent": "x", "capability": "y"}], "a", "either an agent or a capability"),
    ([{"id": "a"}], "a", "either an agent or a capability"),
    ([step("a", deadline_ms=0)], "a", "deadline_ms"),
    ([step("Bad Id")], "Bad Id", "id"),
    ([step("input")], "input", "reserved"),
])
def test_a_bad_definition_is_refused_naming_its_step(steps: list[dict[str, Any]], named: str,
                                                     says: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_definition(definition(*steps))
    assert caught.value.step == named, caught.value
    assert says in str(caught.value)


def test_unknown_agents_and_capabilities_are_refused_when_the_live_ones_are_given() -> None:
    data = definition(step("a"), {"id": "b", "agent": "ghost"})
    parse_definition(data)  # not checked without the live ones
    with pytest.raises(DefinitionError) as caught:
        parse_definition(data, known={"validate_claim"})
    assert caught.value.step == "b" and "'ghost'" in str(caught.value)
    with pytest.raises(DefinitionError) as caught:
        parse_definition(data, known={"ghost"})
    assert caught.value.step == "a" and "validate_claim" in str(caught.value)


def test_a_bad_output_query_and_an_empty_workflow_are_refused() -> None:
    with pytest.raises(DefinitionError, match="output 'x'"):
        parse_definition(definition(step("a"), output={"x": "$..["}))
    with pytest.raises(DefinitionError, match="steps"):
        parse_definition(definition())


def test_the_order_puts_each_step_after_what_it_reads_and_keeps_the_written_order_otherwise(
        ) -> None:
    workflow = parse_definition(definition(
        step("report", input={"a": "$.check.result", "b": "$['enrich'].result"}),
        step("check"), step("enrich", **{"if": '$.check.status == "success"'}),
        step("audit")))
    assert workflow.order() == ["check", "enrich", "report", "audit"]
    assert workflow.needs(workflow.step("report")) == {"check", "enrich"}
    assert workflow.needs(workflow.step("enrich")) == {"check"}


DOC = {"input": {"claim": "C-7", "amounts": [120, 80]},
       "check": {"status": "success", "result": {"evidence": ["photo"], "score": 0.9}},
       "fraud": {"status": "skipped", "result": {}}}


def test_inputs_combine_several_queries_into_one_object() -> None:
    got = resolve({"claim": "$.input.claim", "evidence": "$.check.result.evidence",
                   "all": "$.input.amounts[*]", "first": "$.input.amounts[0]",
                   "fixed": {"mode": "strict", "n": 3}, "listed": ["$.input.claim", "x"]},
                  DOC)
    assert got == {"claim": "C-7", "evidence": ["photo"], "all": [120, 80], "first": 120,
                   "fixed": {"mode": "strict", "n": 3}, "listed": ["C-7", "x"]}


def test_a_query_that_matches_nothing_names_the_input() -> None:
    with pytest.raises(MissingInput) as caught:
        resolve({"policy": {"id": "$.check.result.policy_id"}}, DOC)
    assert caught.value.name == "policy.id"
    assert "$.check.result.policy_id" in str(caught.value)


@pytest.mark.parametrize(("condition", "expected"), [
    ('$.check.status == "success"', True),
    ('$.check.status == "failed"', False),
    ('$.check.status == "success" && $.check.result.score > 0.5', True),
    ('$.check.result.score > 0.95 || $.fraud.status == "skipped"', True),
    ("$.check.result.score > 0.95", False),
    ("$.nothing.here == 1", False),
    ("!($.fraud.status == \"skipped\")", False),
])
def test_conditions_are_filter_expressions_over_the_document(condition: str,
                                                             expected: bool) -> None:
    assert holds(condition, DOC) is expected

"""No request anywhere gets a 500: every route of the running app (Slack, Telegram and
webhook channels on) is hit with generated methods, path parameters, query strings,
headers and bodies. Most bodies start from a valid one for the route (a real task id, the
configured webhook source, correctly signed) with a field or two dropped, retyped or
replaced, so the generated requests get past the outer checks into the handlers; the rest
are junk bytes and JSON of any shape. Every answer is below 500, and an error is JSON with
a reason and no traceback."""

from __future__ import annotations

import json
import string
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.webhook import signed_headers
from tests.integration.conftest import (
    TELEGRAM_SECRET,
    WEBHOOK_SECRET,
    GatewayFactory,
    Harness,
    answer_echo,
    slack_headers,
)

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False), st.text(max_size=30))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8)

_USER = {"id": 42, "is_bot": False, "first_name": "Ada", "username": "ada"}
_CHAT = {"id": 42, "type": "private"}
# A valid body for each route that takes one (JSON unless it is a Slack form).
SEEDS: dict[str, list[dict[str, Any]]] = {
    "/agent/run": [{"text": "hello", "conversation_id": "fz1", "user_id": "u1"}],
    "/agent/run-async": [{"text": "hello", "conversation_id": "fz2"}],
    "/webhook/{source}": [{"conversation_id": "t-1", "user_id": "u", "text": "hi",
                           "callback_url": "http://127.0.0.1:9/hook",
                           "idempotency_key": "k1"}],
    "/agent/approvals/{approval_id}": [{"decision": "approve", "reason": "ok"}],
    "/agent/schedules": [{"id": "fz", "name": "r", "prompt": "sales", "run_as": "api:ops",
                          "trigger": {"cron": "0 9 * * *", "timezone": "UTC"},
                          "target": {"channel": "slack", "address": {"channel": "C1"}}}],
    "/agent/schedules/{job_id}": [{"name": "r", "prompt": "sales", "run_as": "api:ops",
                                   "trigger": {"every": 3600},
                                   "target": {"channel": "webhook",
                                              "address": {"source": "crm"}}}],
    "/slack/events": [
        {"type": "url_verification", "challenge": "c", "token": "t"},
        {"token": "t", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
         "event_id": "Ev1", "event_time": 1,
         "authorizations": [{"team_id": "T1", "user_id": "UBOT", "is_bot": True}],
         "event": {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi", "ts": "1.2",
                   "channel": "C1", "event_ts": "1.2"}},
        {"token": "t", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
         "event_id": "Ev2", "event_time": 1,
         "event": {"type": "message", "channel_type": "im", "user": "U1", "text": "hi",
                   "ts": "1.3", "channel": "D1"}},
        {"payload": {"type": "block_actions", "team": {"id": "T1"},
                     "user": {"id": "U1", "team_id": "T1"}, "api_app_id": "A1",
                     "container": {"type": "message", "message_ts": "1.4", "channel_id": "C1"},
                     "channel": {"id": "C1"}, "message": {"ts": "1.4", "text": "?"},
                     "actions": [{"action_id": "hermes_approve", "block_id": "b",
                                  "value": "x", "type": "button", "action_ts": "1"}]}},
    ],
    "/telegram/webhook": [
        {"update_id": 7, "message": {"message_id": 1, "date": 1, "chat": _CHAT,
                                     "from": _USER, "text": "hi"}},
        {"update_id": 8, "message": {"message_id": 2, "date": 1, "text": "@bot hi",
                                     "chat": {"id": -5, "type": "supergroup", "title": "g",
                                              "is_forum": True},
                                     "message_thread_id": 3, "from": _USER,
                                     "entities": [{"type": "mention", "offset": 0,
                                                   "length": 4}]}},
        {"update_id": 9, "callback_query": {"id": "q", "chat_instance": "ci", "from": _USER,
                                            "data": "ap:1:a",
                                            "message": {"message_id": 3, "date": 1,
                                                        "chat": _CHAT}}},
    ],
}


def _mutate(value: Any, draw: Callable[..., Any]) -> Any:
    """``value`` with one part dropped, replaced by anything, or mutated further down."""
    if isinstance(value, dict) and value:
        key = draw(st.sampled_from(sorted(value)))
        how = draw(st.sampled_from(["drop", "replace", "deeper", "extra"]))
        changed = dict(value)
        if how == "drop":
            del changed[key]
        elif how == "replace":
            changed[key] = draw(json_values)
        elif how == "deeper":
            changed[key] = _mutate(value[key], draw)
        else:
            changed[draw(st.text(max_size=8))] = draw(json_values)
        return changed
    if isinstance(value, list) and value:
        index = draw(st.integers(0, len(value) - 1))
        return [*value[:index], _mutate(value[index], draw), *value[index + 1:]]
    return draw(json_values)


@st.composite
def bodies(draw: Callable[..., Any], template: str) -> tuple[bytes, str]:
    """A body for ``template`` and its content type."""
    seeds = SEEDS.get(template)
    kind = draw(st.sampled_from(["seeded"] * 4 + ["junk", "json"] if seeds
                                else ["junk", "json"]))
    if kind == "junk":
        return draw(st.binary(max_size=200)), draw(st.sampled_from(
            ["application/json", "application/x-www-form-urlencoded", "text/plain", ""]))
    if kind == "json":
        return json.dumps(draw(json_values)).encode(), "application/json"
    assert seeds is not None
    seed = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(0, 2))):
        seed = _mutate(seed, draw)
    if template == "/slack/events" and isinstance(seed, dict) and "payload" in seed:
        form = {k: v if isinstance(v, str) else json.dumps(v) for k, v in seed.items()}
        return urlencode(form).encode(), "application/x-www-form-urlencoded"
    return json.dumps(seed).encode(), "application/json"


def _segment(name: str, h: Harness) -> st.SearchStrategy[str]:
    junk = st.one_of(st.sampled_from(["x" * 300, "..", "%00", "api%3Afz1", "-", "Ü"]),
                     st.text(string.printable + "éü中", min_size=1, max_size=20)
                     .map(lambda t: quote(t, safe="")))
    known = {"source": ["crm"], "task_id": [h.extra["task_id"]],
             "conversation_id": ["api:fz1", "webhook:crm:t-1"], "job_id": ["fz"],
             "action": ["pause", "resume", "run"], "decision": ["approve", "reject"]}
    return st.one_of(st.sampled_from(known[name]), junk) if name in known else junk


#: A stream that never ends by design (the console's live events): nothing to wait for.
ENDLESS = {("GET", "/agent/console/events")}


def _routes(h: Harness) -> list[tuple[str, str]]:
    found = set()
    for route in h.client.app.router.routes():  # type: ignore[union-attr]
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if path and route.method != "HEAD" and (route.method, path) not in ENDLESS:
            found.add((route.method, path))
    return sorted(found)


def _signed(template: str, body: bytes, how: str) -> dict[str, str]:
    if how == "none":
        return {}
    stale = time.time() - 3600 if how == "stale" else None
    if template.startswith("/slack"):
        headers = slack_headers(body, timestamp=int(stale) if stale else None)
    elif template.startswith("/telegram"):
        headers = {"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET}
    else:
        headers = signed_headers(WEBHOOK_SECRET, body, now=stale)
    headers.pop("Content-Type", None)
    if how == "garbage":
        headers = {k: v[::-1] + "=" for k, v in headers.items()}
    return headers


@settings(max_examples=1000, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
async def test_no_request_gets_a_500(fuzz_gateway: Harness, data: st.DataObject) -> None:
    h = fuzz_gateway
    method, template = data.draw(st.sampled_from(_routes(h)), label="route")
    if method == "*" or data.draw(st.integers(0, 9), label="odd method") == 0:
        method = data.draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
    path = template
    while "{" in path:
        start, end = path.index("{"), path.index("}")
        path = path[:start] + data.draw(_segment(path[start + 1:end], h)) + path[end + 1:]
    body, content_type = data.draw(bodies(template), label="body") \
        if method in ("POST", "PUT", "PATCH") else (b"", "")
    headers = {"Content-Type": content_type} if content_type else {}
    how = data.draw(st.sampled_from(["right"] * 4 + ["none", "stale", "garbage"]),
                    label="signature")
    headers.update(_signed(template, body, how))
    if data.draw(st.booleans(), label="with Last-Event-ID"):
        headers["Last-Event-ID"] = data.draw(st.text(string.ascii_letters + string.digits
                                                     + "-_ .:", max_size=20))
    query = data.draw(st.sampled_from(["", "?limit=-1", "?limit=abc", "?after=zz", "?after=1-0",
                                       "?limit=99999999999999999999", "?conversation_id=%ff",
                                       "?access_token=x"]), label="query")
    response = await h.client.request(method, path + query, data=body, headers=headers)
    text = await response.text()
    assert response.status < 500, (method, path, body[:300], response.status, text[:500])
    assert "Traceback" not in text
    if response.status >= 400 and response.content_type == "application/json":
        assert json.loads(text).get("error"), text


@pytest.fixture
async def fuzz_gateway(make_gateway: GatewayFactory) -> Harness:
    """One gateway for all the examples (hypothesis runs them inside one test), with one
    finished task whose id the examples may use."""
    h = await make_gateway(slack=True, telegram=True, hermes_run_timeout=2)
    h.model.responder = answer_echo
    done = await (await h.client.post("/agent/run", json={"text": "seed"})).json()
    h.extra["task_id"] = done["task_id"]
    return h

"""Attacks on the HTTP API of a default set-up, each performed through its public surface:
DNS rebinding and cross-site requests against the keyless local API, self-asserted
identities, other principals' conversations, a same-host reverse proxy, and callbacks
and agent cards that a request could point inside the network."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from agent_core.models.replay import Reply
from tests.conftest import NatsServer
from tests.integration.conftest import GatewayFactory, Harness, answer_echo
from tests.integration.test_webhook import body_of, post

#: What a browser sends from a page whose name re-binds to 127.0.0.1 (the attacker's
#: name, in the Host header, with the gateway's port).
REBOUND = "rebind.attacker.test"
EVIL_ORIGIN = "http://evil.attacker.test"
SAME_ORIGIN_FETCH = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}


def key(user: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"key": f"{user}-secret-key-0123456789", "user": user, "role": role, **extra}


def as_(user: str, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {user}-secret-key-0123456789", **headers}


def port_of(h: Harness) -> int:
    return int(h.client.port or 0)


# --- 1. DNS rebinding and CSRF against the keyless local API ------------------------------

async def test_a_rebound_page_gets_nothing_from_the_local_gateway(
        make_gateway: GatewayFactory) -> None:
    """The attacker's page, its name re-bound to 127.0.0.1, asks the gateway as a same-origin
    page would: for the web chat's token, the conversations, the audit log, a task."""
    h = await make_gateway()
    h.model.responder = answer_echo
    secret = await (await h.client.post("/agent/run", json={
        "text": "my salary is 90k", "conversation_id": "private"})).json()
    token = (h.settings.hermes_data_dir / "local-token").read_text().strip()
    host = {"Host": f"{REBOUND}:{port_of(h)}", "Origin": f"http://{REBOUND}:{port_of(h)}"}
    attempts = [
        ("get", "/webchat/session", {**host, **SAME_ORIGIN_FETCH}),
        ("get", "/", host),
        ("get", f"/agent/conversations/{secret['conversation_id']}/messages", host),
        ("get", f"/agent/tasks/{secret['task_id']}", host),
        ("get", "/agent/audit", host),
        ("post", "/agent/run-async", host),
    ]
    for method, path, headers in attempts:
        response = await getattr(h.client, method)(
            path, headers=headers, json={"text": "write the file"} if method == "post" else None)
        body = await response.text()
        assert response.status == 421, (path, response.status, body)
        assert "90k" not in body and token not in body
    assert len(h.model.requests) == 1, "the attacker's task never ran"
    # The gateway's own names still work.
    for name in ("127.0.0.1", "localhost"):
        ok = await h.client.get(f"/agent/tasks/{secret['task_id']}",
                                headers={"Host": f"{name}:{port_of(h)}"})
        assert ok.status == 200, name


async def test_no_key_is_not_admin_the_local_api_needs_the_local_token(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    h.model.responder = answer_echo
    # Any loopback peer that does not hold the data directory's token is refused.
    bare = await h.client.post("/agent/run", json={"text": "hi"},
                               headers={"Authorization": ""})
    assert bare.status == 401 and "local-token" in (await bare.json())["error"]
    for path in ("/agent/audit", "/metrics", "/agent/schedules"):
        assert (await h.client.get(path, headers={"Authorization": ""})).status == 401, path
    forged = await h.client.get("/agent/audit", headers={"Authorization": "Bearer guess"})
    assert forged.status == 401
    assert h.model.requests == []


@pytest.mark.parametrize("path", ["/agent/tasks/{task}/cancel",
                                  "/agent/conversations/{conversation}/reset",
                                  "/agent/schedules/daily/run", "/agent/schedules/daily/pause",
                                  "/agent/approvals/{approval}"])
async def test_cross_site_requests_change_nothing(make_gateway: GatewayFactory,
                                                  path: str) -> None:
    """A form on another site posting to the local gateway (body-less POSTs are plain
    cross-site forms), even if the browser held a credential for it."""
    h = await make_gateway()
    h.model.add(Reply.call("save_daily_report", {"content": "Q3"}))
    paused = await (await h.client.post("/agent/run", json={
        "text": "save", "conversation_id": "victim"})).json()
    assert paused["status"] == "awaiting_approval"
    schedule = {"id": "daily", "prompt": "report", "trigger": {"cron": "0 9 * * *"},
                "target": {"channel": "api"}}
    assert (await h.client.post("/agent/schedules", json=schedule)).status == 201
    url = path.format(task=paused["task_id"], conversation=paused["conversation_id"],
                      approval=paused["approval"]["id"])
    for headers in ({"Origin": EVIL_ORIGIN}, {"Origin": "null"},
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
        response = await h.client.post(url, headers=headers, data="approved=true",
                                       skip_auto_headers=["Content-Type"])
        assert response.status == 403, (headers, response.status, await response.text())
        assert "cross-site" in (await response.json())["error"]
    task = await h.task(paused["task_id"])
    assert task["status"] == "awaiting_approval", "nothing was decided or cancelled"
    job = await (await h.client.get("/agent/schedules/daily")).json()
    assert job["paused"] is False and job["last_run"] is None
    # The page's own requests (same origin) still go through.
    own = f"http://127.0.0.1:{port_of(h)}"
    decided = await h.client.post(f"/agent/approvals/{paused['approval']['id']}",
                                  json={"approved": False}, headers={"Origin": own})
    assert decided.status == 200


async def test_the_web_chat_token_goes_only_to_the_page_on_this_machine(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway()
    token = (h.settings.hermes_data_dir / "local-token").read_text().strip()
    assert (h.settings.hermes_data_dir / "local-token").stat().st_mode & 0o077 == 0
    page = await h.client.get("/webchat/session", headers=SAME_ORIGIN_FETCH)
    assert page.status == 200 and (await page.json())["token"] == token
    for headers in ({}, {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "none"},
                    {**SAME_ORIGIN_FETCH, "X-Forwarded-For": "203.0.113.9"}):
        refused = await h.client.get("/webchat/session", headers=headers)
        assert refused.status == 403, headers
        assert token not in await refused.text()


async def test_a_keyed_gateway_hands_no_token_to_its_page(make_gateway: GatewayFactory
                                                         ) -> None:
    h = await make_gateway(hermes_api_keys=[key("ops", "admin")])
    body = await (await h.client.get("/webchat/session", headers=SAME_ORIGIN_FETCH)).json()
    # No token; only what the page checks before it sends files (limits are not secret).
    assert body == {"token": None, "needs_key": True, "files": {
        "max_file_bytes": 20 * 1024 * 1024, "max_files": 10}}
    local = (h.settings.hermes_data_dir / "local-token")
    assert not local.exists(), "no local token on a gateway with keys"


# --- 5. identities come from the key, never from what the caller says ---------------------

async def test_a_key_holder_cannot_claim_to_be_someone_else(make_gateway: GatewayFactory
                                                           ) -> None:
    h = await make_gateway(hermes_api_keys=[key("clerk"), key("boss", "admin")],
                           hermes_approvers={"*": {"roles": ["admin"],
                                                   "self_approval": False}})
    h.model.add(Reply.call("save_daily_report", {"content": "Q3"}), Reply("Saved."))
    paused = await (await h.client.post("/agent/run", json={"text": "save"},
                                        headers=as_("clerk"))).json()
    assert paused["status"] == "awaiting_approval"
    approval = paused["approval"]["id"]
    # The audit log, as the admin by header; approving one's own request as the admin by
    # header, then by body.
    audit = await h.client.get("/agent/audit", headers=as_("clerk", **{"X-Hermes-User": "boss"}))
    assert audit.status == 403
    audit = await h.client.get("/agent/audit", headers=as_("clerk"))
    assert audit.status == 403
    by_header = await h.client.post(f"/agent/approvals/{approval}", json={"approved": True},
                                    headers=as_("clerk", **{"X-Hermes-User": "boss"}))
    assert by_header.status == 403 and "act" in (await by_header.json())["error"]
    by_body = await h.client.post(f"/agent/approvals/{approval}", headers=as_("clerk"),
                                  json={"approved": True, "user_id": "boss"})
    assert by_body.status == 403
    own = await h.client.post(f"/agent/approvals/{approval}", json={"approved": True},
                              headers=as_("clerk"))
    assert own.status == 403, "self_approval: false holds"
    # The web chat header changes where replies show, not who the caller is.
    webchat = await h.client.get("/agent/audit", headers=as_("clerk", **{
        "X-Hermes-Client": "webchat"}))
    assert webchat.status == 403
    decided = await h.client.post(f"/agent/approvals/{approval}", json={"approved": True},
                                  headers=as_("boss"))
    assert decided.status == 200
    await h.wait_task(paused["task_id"], "answered", headers=as_("clerk"))
    entries = (await (await h.client.get("/agent/audit", headers=as_("boss"))).json())["entries"]
    [decision] = [e for e in entries if e["type"] == "approval"]
    assert decision["decided_by"] == "api:boss" and decision["principal"] == "boss"
    assert decision["requester"] == "api:clerk"


async def test_a_key_acts_only_for_the_users_it_names(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[key("crm", act_as=["cust-*"])])
    h.model.responder = answer_echo
    ok = await h.client.post("/agent/run", json={"text": "hi", "user_id": "cust-7"},
                             headers=as_("crm"))
    assert ok.status == 200 and (await ok.json())["conversation_id"].startswith("api:crm:")
    other = await h.client.post("/agent/run", json={"text": "hi", "user_id": "admin"},
                                headers=as_("crm"))
    assert other.status == 403
    who = await (await h.client.get("/agent/whoami", headers=as_(
        "crm", **{"X-Hermes-User": "cust-7"}))).json()
    assert who["identity"] == "api:cust-7" and who["role"] == "user" and who["user"] == "crm"


async def test_one_principal_cannot_read_or_touch_another_s_conversation(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[key("alice"), key("mallory"),
                                            key("ops", "admin")])
    h.model.responder = answer_echo
    mine = await (await h.client.post("/agent/run", json={
        "text": "my secret plan", "conversation_id": "plans"}, headers=as_("alice"))).json()
    cid, task = mine["conversation_id"], mine["task_id"]
    assert cid == "api:alice:plans"
    for method, path in [("get", f"/agent/conversations/{cid}/messages"),
                         ("get", f"/agent/tasks/{task}"),
                         ("get", f"/agent/tasks/{task}/events"),
                         ("post", f"/agent/tasks/{task}/cancel"),
                         ("post", f"/agent/conversations/{cid}/reset"),
                         ("delete", f"/agent/conversations/{cid}")]:
        response = await getattr(h.client, method)(path, headers=as_("mallory"))
        assert response.status == 404, (path, response.status)
        assert "secret plan" not in await response.text()
    # The same conversation id under another key is another conversation.
    theirs = await (await h.client.post("/agent/run", json={
        "text": "what did I say?", "conversation_id": "plans"}, headers=as_("mallory"))).json()
    assert theirs["conversation_id"] == "api:mallory:plans"
    last_request = h.model.requests[-1][1]["messages"]
    assert not any("secret plan" in str(m.get("content")) for m in last_request)
    # Its owner and an admin still see it.
    for who in ("alice", "ops"):
        seen = await h.client.get(f"/agent/conversations/{cid}/messages", headers=as_(who))
        assert seen.status == 200 and "my secret plan" in await seen.text(), who


async def test_a_non_admin_schedules_only_as_itself_and_answers_over_the_api(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[key("planner", "planner"), key("ops", "admin")],
                           hermes_roles={"admin": ["slack:UADMIN"]},
                           hermes_role_permissions={"planner": ["read", "schedule"],
                                                    "admin": ["*"]})
    job = {"id": "j1", "prompt": "report", "trigger": {"cron": "0 9 * * *"},
           "target": {"channel": "api"}}
    escalate = await h.client.post("/agent/schedules", headers=as_("planner"),
                                   json={**job, "run_as": "slack:UADMIN"})
    assert escalate.status == 400 and "run_as" in (await escalate.json())["error"]
    spam = await h.client.post("/agent/schedules", headers=as_("planner"), json={
        **job, "target": {"channel": "slack", "address": {"channel": "CGENERAL"}}})
    assert spam.status == 400
    made = await h.client.post("/agent/schedules", headers=as_("planner"), json=job)
    assert made.status == 201
    saved = await made.json()
    assert saved["run_as"] == "api:planner" and saved["role"] == "planner"
    others = await h.client.post("/agent/schedules", headers=as_("ops"), json={
        **job, "id": "j2", "run_as": "slack:UADMIN"})
    assert others.status == 201, "an admin may name another run_as"
    listed = await (await h.client.get("/agent/schedules", headers=as_("planner"))).json()
    assert [j["id"] for j in listed["jobs"]] == ["j1"]
    assert (await h.client.post("/agent/schedules/j2/pause",
                                headers=as_("planner"))).status == 404


# --- 6. a reverse proxy on the same host ----------------------------------------------------

async def test_requests_through_an_untrusted_local_proxy_are_not_local(
        make_gateway: GatewayFactory, caplog: pytest.LogCaptureFixture) -> None:
    h = await make_gateway()
    token = (h.settings.hermes_data_dir / "local-token").read_text().strip()
    caplog.set_level(logging.WARNING, "gateway.guard")
    for _ in range(3):
        proxied = await h.client.get("/agent/audit", headers={
            "X-Forwarded-For": "203.0.113.9", "Authorization": f"Bearer {token}"})
        assert proxied.status == 403
    warnings = [r for r in caplog.records if "HERMES_TRUSTED_PROXIES" in r.getMessage()]
    assert len(warnings) == 1, "warned once"
    assert token not in caplog.text


async def test_a_trusted_proxy_names_the_client(make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_trusted_proxies=["127.0.0.1"])
    local = await h.client.get("/agent/whoami", headers={"X-Forwarded-For": "127.0.0.1"})
    assert local.status == 200
    remote = await h.client.get("/agent/whoami", headers={"X-Forwarded-For": "203.0.113.9"})
    assert remote.status == 403, "the proxy says the client is elsewhere"
    # A client that writes a loopback address first: the proxy appends what it saw, and
    # the last address before the trusted proxy decides, not the first.
    spoofed = await h.client.get("/agent/whoami", headers={
        "X-Forwarded-For": "127.0.0.1, 203.0.113.9"})
    assert spoofed.status == 403


# --- 16. callbacks and agent cards that point inside ---------------------------------------

@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook", "http://169.254.169.254/latest",
                                 "http://10.0.0.7/hook", "http://[::1]:9/hook",
                                 "http://0x7f000001/hook", "http://[::ffff:127.0.0.1]/x"])
async def test_a_webhook_callback_may_not_point_inside(make_gateway: GatewayFactory,
                                                       url: str) -> None:
    h = await make_gateway(hermes_webhook_callback_hosts=[])
    response = await post(h.client, body_of(callback_url=url))
    assert response.status == 400, url
    assert "callback_url" in (await response.json())["error"]
    assert h.model.requests == []


async def test_a_callback_name_that_resolves_inside_is_not_called(
        make_gateway: GatewayFactory, callback_server: dict[str, Any]) -> None:
    h = await make_gateway(hermes_webhook_callback_hosts=[])
    h.model.responder = answer_echo
    url = callback_server["url"].replace("127.0.0.1", "localhost")
    accepted = await post(h.client, body_of(callback_url=url))
    assert accepted.status == 202
    redis = h.gateway.parts.opened.store.redis
    dead = h.gateway.parts.deliverer.dead_letters
    async with asyncio.timeout(15):
        while not await redis.llen(dead):
            await asyncio.sleep(0.02)
    [letter] = [json.loads(x) for x in await redis.lrange(dead, 0, -1)]
    assert "refused" in letter["reason"] and "127.0.0.1" in letter["reason"]
    assert callback_server["attempts"] == 0


async def test_an_agent_card_names_the_configured_url_not_the_host_header(
        make_gateway: GatewayFactory, nats: NatsServer) -> None:
    h = await make_gateway(hermes_hub=True, **nats.settings(),
                           hermes_allowed_hosts=["alias.example.test"])
    response = await h.client.get("/a2a/gateway/.well-known/agent-card.json",
                                  headers={"Host": "alias.example.test"})
    assert response.status == 200
    card = await response.json()
    urls = json.dumps(card)
    assert "alias.example.test" not in urls
    assert f"127.0.0.1:{port_of(h)}/a2a/gateway" in urls
    public = await make_gateway(hermes_hub=True, **nats.settings(),
                                hermes_public_url="https://hermes.example.test")
    card = await (await public.client.get("/a2a/gateway/.well-known/agent-card.json",
                                          headers={"Host": "hermes.example.test"})).json()
    assert "https://hermes.example.test/a2a/gateway" in json.dumps(card)

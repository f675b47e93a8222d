"""The API's edge middleware on errors: a client error keeps its reason; a bug is a 500 with
only a trace id (its traceback in the log, its text nowhere near the caller)."""

from __future__ import annotations

import json
import logging

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from gateway.api._http import bad
from gateway.app import edge
from gateway.auth import Credentials, Principal
from gateway.guard import Guard
from gateway.metrics import Metrics
from gateway.settings import GatewaySettings

METRICS = Metrics()


TOKEN = "local-token-for-the-tests"
GUARD = Guard(GatewaySettings(_env_file=None),  # type: ignore[call-arg]
              Credentials([(TOKEN, Principal("local", "admin", local=True))]))


async def respond(handler: object) -> web.StreamResponse:
    """The handler's answer through the middleware, for a caller on this machine."""
    middleware = edge(GUARD, METRICS)
    request = make_mocked_request("GET", "/agent/x", transport=_Loopback(), headers={
        "Host": "127.0.0.1:8080", "Authorization": f"Bearer {TOKEN}"})
    return await middleware(request, handler)  # type: ignore[arg-type]


class _Loopback:
    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("127.0.0.1", 50000),
                "sockname": ("127.0.0.1", 8080)}.get(name, default)


async def test_a_client_error_keeps_its_reason() -> None:
    async def handler(request: web.Request) -> web.Response:
        raise bad(400, "since must be a number")

    with pytest.raises(web.HTTPBadRequest) as raised:
        await respond(handler)
    assert json.loads(raised.value.text or "{}") == {"error": "since must be a number"}


@pytest.mark.parametrize("bug", [ValueError("invalid literal for int(): 'secret-db-host'"),
                                 KeyError("password"), RuntimeError("boom at /srv/app.py")])
async def test_a_bug_is_a_500_with_a_trace_id_and_no_detail(bug: Exception) -> None:
    async def handler(request: web.Request) -> web.Response:
        raise bug

    records: list[logging.LogRecord] = []
    keep = logging.Handler(logging.ERROR)
    keep.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("gateway.app")
    logger.addHandler(keep)  # on the logger itself: other tests may stop propagation
    try:
        response = await respond(handler)
    finally:
        logger.removeHandler(keep)
    assert isinstance(response, web.Response) and response.status == 500
    body = json.loads(response.text or "{}")
    assert body["error"] == "internal error" and len(body["trace_id"]) == 16
    assert str(bug).strip("'") not in (response.text or "")
    [record] = [r for r in records if body["trace_id"] in r.getMessage()]
    logged = logging.Formatter().format(record)
    assert "Traceback" in logged and type(bug).__name__ in logged, "the traceback is logged"

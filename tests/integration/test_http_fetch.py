"""http_fetch's SSRF guard: a corpus of internal targets, none reachable; real fetches and
redirects against a local server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from agent_core import ToolError
from tools.http_fetch import FetchPolicy, FetchRefused, fetch, system_resolver

# Names a remote DNS would resolve (the DNS is the one remote part we stand in for).
FAKE_DNS = {
    "evil.test": ["10.1.2.3"],
    "metadata.test": ["169.254.169.254"],
    "rebind.test": ["93.184.216.34", "127.0.0.1"],
    "v6local.test": ["::1"],
    "mapped.test": ["::ffff:10.0.0.1"],
    "public.test": ["93.184.216.34"],
}


async def resolver(host: str, port: int) -> list[str]:
    if host in FAKE_DNS:
        return FAKE_DNS[host]
    return await system_resolver(host, port)


SSRF = [
    "http://127.0.0.1/", "http://127.1/", "http://127.000.000.001/", "http://0177.0.0.1/",
    "http://0x7f000001/", "http://2130706433/", "http://0x7f.0.0.1/", "http://localhost/",
    "http://LOCALHOST./", "http://[::1]/", "http://[0:0:0:0:0:0:0:1]/",
    "http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/", "http://0.0.0.0/",
    "http://[::]/", "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:a9fe:a9fe]/", "http://[fd00:ec2::254]/", "http://10.0.0.1/",
    "http://172.16.5.4/", "http://192.168.1.1:8080/", "http://100.64.0.1/",
    "http://[fe80::1]/", "http://224.0.0.1/", "http://[2002:7f00:1::]/",
    "http://evil.test/", "http://metadata.test/", "http://rebind.test/",
    "http://v6local.test/", "http://mapped.test/", "https://user:pw@public.test/",
    "http://public.test@127.0.0.1/", "file:///etc/passwd", "gopher://127.0.0.1:70/",
    "ftp://public.test/x", "http:///nohost",
]


@pytest.mark.parametrize("url", SSRF)
async def test_internal_targets_are_refused(url: str) -> None:
    with pytest.raises(FetchRefused) as refused:
        await fetch(url, FetchPolicy(resolver=resolver))
    # Refused for what the address is, never merely because a name did not resolve.
    assert "cannot resolve" not in str(refused.value)


def test_the_corpus_is_large_enough() -> None:
    assert len(SSRF) >= 20


@pytest.fixture
async def site() -> AsyncIterator[dict[str, Any]]:
    """A local web server, reachable only because the tests exempt it explicitly."""
    app = web.Application()

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="hello from the page", content_type="text/html")

    async def big(request: web.Request) -> web.Response:
        return web.Response(text="x" * 5000)

    async def to_internal(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def hop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/page")

    async def slow(request: web.Request) -> web.Response:
        import asyncio

        await asyncio.sleep(2)
        return web.Response(text="late")

    for path, handler in (("/page", page), ("/big", big), ("/redirect", to_internal),
                          ("/hop", hop), ("/slow", slow)):
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    yield {"base": f"http://127.0.0.1:{port}", "exempt": f"127.0.0.1:{port}"}
    await runner.cleanup()


def policy(site: dict[str, Any], **kw: Any) -> FetchPolicy:
    return FetchPolicy(internal_ok=frozenset({site["exempt"]}), resolver=resolver, **kw)


async def test_an_exempted_service_can_be_fetched_with_redirects(site: dict[str, Any]
                                                                  ) -> None:
    result = await fetch(f"{site['base']}/hop", policy(site))
    assert result["status"] == 200 and result["text"] == "hello from the page"
    assert result["url"].endswith("/page")


@pytest.mark.parametrize("target", [
    "http://127.0.0.1:1/x", "http://169.254.169.254/latest/", "http://[::1]:1/",
    "http://evil.test/", "file:///etc/passwd",
])
async def test_redirects_to_internal_targets_are_refused(site: dict[str, Any],
                                                         target: str) -> None:
    with pytest.raises(FetchRefused):
        await fetch(f"{site['base']}/redirect?to={target}", policy(site))


async def test_size_and_time_limits(site: dict[str, Any]) -> None:
    capped = await fetch(f"{site['base']}/big", policy(site, max_bytes=100))
    assert capped["truncated"] and len(capped["text"]) == 100
    with pytest.raises(ToolError, match="did not answer"):
        await fetch(f"{site['base']}/slow", policy(site, timeout=0.3))


async def test_the_allowlist_limits_hosts() -> None:
    with pytest.raises(FetchRefused, match="allowlist"):
        await fetch("http://public.test/", FetchPolicy(allow_hosts=frozenset({"example.com"}),
                                                       resolver=resolver))

"""The stock-client example of docs/hub.md, run as written (plain nats-py, nothing of this
project) against a live hub: discovery, then a flat task_request, then the answer."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hub.discovery import Discovery
from tests.conftest import NatsServer
from tests.hub.conftest import BusFactory, RunnerFactory, unique
from tests.hub.test_bus import Echo, until

DOC = Path(__file__).resolve().parents[2] / "docs" / "hub.md"


def example() -> Any:
    text = DOC.read_text()
    section = text[text.index("## A stock client"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "docs/hub.md lost its stock-client example"
    scope: dict[str, Any] = {}
    exec(compile(code.group(1), str(DOC), "exec"), scope)  # our own docs, as written
    return scope["validate"]


async def test_the_documented_stock_client_gets_its_answer(
        nats: NatsServer, make_bus: BusFactory, run_agent: RunnerFactory) -> None:
    validate = example()
    bus = await make_bus()
    discovery = Discovery(bus)
    await discovery.start()
    agent = Echo(unique("validator"))
    agent.capabilities = ("validate_claim",)
    await run_agent(await make_bus(), agent)  # it beats on $HEALTHCHECK.<its id>
    try:
        await until(lambda: [c.agent_id for c in discovery.live("validate_claim")]
                    == [agent.agent_id])
        # The client's own identity: credentials as an operator issues them.
        answer, correlation = await validate(nats.url, nats.creds("my-client"))
    finally:
        await discovery.stop()
    assert answer["type"] == "task_response" and answer["status"] == "success"
    assert answer["result"]["echo"] == {"claim": "C-7"}
    assert correlation == "case-7"

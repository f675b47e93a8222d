"""Errors of the hub. The tree continues agent_core's::

    HermesError                      (agent_core.errors)
    ├── ConfigError                  no nats-server to start, a server that will not start
    └── RuntimeFailure
        ├── BusOverloaded            an agent's requests pile up past the hard limit
        └── HubUnreachable           no NATS server of NATS_URL could be connected

A message that breaks a rule of HMP v1 is a ``messages.Violation`` (a ValueError naming
the field and the rule), answered to its sender as a failed task_response.
"""

from __future__ import annotations

from agent_core import RuntimeFailure


class BusOverloaded(RuntimeFailure):
    """Publishing to an agent is refused: ``pending`` requests wait, over ``limit``."""

    user_message = "The agent this needs is overloaded right now; please try again later."

    def __init__(self, agent_id: str, pending: int, limit: int) -> None:
        super().__init__(f"{pending} requests wait for agent {agent_id!r}, over the hard "
                         f"limit of {limit} (HUB_HARD_LIMIT); refused, not queued")
        self.agent_id = agent_id
        self.pending = pending
        self.limit = limit


class HubUnreachable(RuntimeFailure):
    """No server of NATS_URL took the connection (down, refused TLS, wrong credentials).
    The text names the servers without their credentials, and the reason."""

    user_message = "The agent hub cannot be reached right now; please try again later."

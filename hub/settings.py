"""HubSettings: the runtime's settings plus the hub's section (NATS and the bus's limits).

``NATS_URL`` names an existing server or cluster (several URLs separated by commas;
``tls://`` and credentials as nats-py accepts them); unset, an embedded nats-server with
JetStream is started under the data directory, exactly as the embedded Valkey is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from agent_core import Settings
from agent_core.settings import comma_list


class HubSettings(Settings):
    """Every setting of a hub process (services or agents)."""

    nats_url: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="nats:// or tls:// servers; unset: embedded")
    nats_creds_file: str | None = Field(
        None, description="this process's identity on a server of NATS_URL: a .creds file "
        "(JWT + nkey) of a user with the permissions docs/hub.md lists")
    nats_tls_ca_file: str | None = Field(
        None, description="CA bundle to verify tls:// servers by (default: the system's)")
    nats_tls_cert_file: str | None = Field(
        None, description="client certificate (PEM) for servers that verify clients")
    nats_tls_key_file: str | None = Field(
        None, description="its private key (PEM), unless the certificate file holds it")
    hub_replicas: int = Field(
        1, ge=1, le=5, description="copies of each stream and bucket on a NATS cluster "
        "(JetStream replicas; at most the number of servers, 3 for a 3-node cluster)")
    hub_request_retention: float = Field(
        86400.0, gt=0, description="seconds task requests stay in their stream")
    hub_max_deliver: int = Field(
        5, ge=1, le=100, description="deliveries of a request before it is dead-lettered")
    hub_ack_wait: float = Field(
        30.0, gt=0, description="seconds an agent may hold a request unacknowledged")
    hub_soft_limit: int = Field(
        5000, ge=1, description="requests waiting for an agent before publishing slows")
    hub_hard_limit: int = Field(
        10000, ge=1, description="requests waiting for an agent before publishing is refused")
    hub_tools: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="tools (of HERMES_TOOLS) agents may run with "
        "tool_call: the hub's allowlist; empty refuses every tool_call")
    hub_traffic: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="capability -> {agent id: weight}: a canary split")
    hub_executor: bool = Field(
        True, description="run the workflow executor agent with the hub's services")
    hub_workflows_file: Path | None = Field(
        None, description="a YAML file of workflow definitions, kept on the hub at start")
    hub_knowledge_bases: dict[str, Path] = Field(
        default_factory=dict, description="knowledge base id -> folder of Markdown/text "
        "files for the retriever agent; any set (or HUB_RAG) runs the RAG agents")
    hub_rag: bool = Field(
        False, description="run the retriever and generator agents (and the rag_answer "
        "workflow) with the hub's services")

    @field_validator("nats_url", "hub_tools", mode="before")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        return comma_list(value)

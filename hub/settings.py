"""HubSettings: the runtime's settings plus the hub's section (NATS and the bus's limits).

``NATS_URL`` names an existing server or cluster (several URLs separated by commas;
``tls://`` and credentials as nats-py accepts them); unset, an embedded nats-server with
JetStream is started under the data directory, exactly as the embedded Valkey is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from agent_core import Settings
from agent_core.settings import comma_list

from .identity import check_owner


class A2ARemote(BaseModel):
    """A remote A2A agent the hub fronts (HUB_A2A_AGENTS): its card's URL, the name it has
    on the hub (``a2a-<name>``; default: the card's name) and its own credentials."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=8, max_length=2000)
    name: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_-]{0,55}$")
    #: Sent as ``Authorization: Bearer <it>`` with every call (the card's fetch too).
    bearer: SecretStr | None = None
    #: Other headers its calls carry (an API key header), each value a secret.
    headers: dict[str, SecretStr] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")) or any(c.isspace() for c in value):
            raise ValueError("an http(s):// URL of an agent card (or of its agent)")
        return value


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
    hermes_run_timeout: float = Field(
        120.0, gt=0, description="wait of POST /agent/run; the deadline of a request from "
        "another protocol that names none (at most 300 s)")
    hub_agent_protocol: bool = Field(
        True, description="the Synadia Agent Protocol bridge, with the hub's services: our "
        "agents as protocol agents, and protocol agents in our discovery")
    hub_agent_protocol_owner: str = Field(
        "hermes-hub", description="the owner token our agents have in the protocol "
        "(agents.prompt.<agent>.<owner>.default); protocol agents of this owner are ours")
    hub_agent_protocol_unsigned: bool = Field(
        False, description="serve protocol prompts without a verified Agent-Sender "
        "(unsigned); false: a prompt must be signed by its sender's NATS key (401 otherwise)")
    hub_agent_protocol_heartbeat: int = Field(
        30, ge=1, le=300, description="seconds between our protocol agents' heartbeats")
    hub_agent_protocol_scan: float = Field(
        5.0, ge=0.5, le=300, description="seconds between looks for protocol agents (and "
        "our live agents) to bridge")
    hub_bridge_creds_file: str | None = Field(
        None, description="with NATS_URL and NATS_CREDS_FILE: the bridge's own .creds (the "
        "'bridge' identity); without it the bridges stay off")
    hub_a2a_agents: Annotated[list[A2ARemote], NoDecode] = Field(
        default_factory=list, description="remote A2A agents the hub fronts: card URLs "
        "(comma-separated), or a YAML list of {url, name, bearer, headers}")
    hub_a2a_internal_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="hosts (or host:port) of HUB_A2A_AGENTS allowed "
        "on internal addresses (loopback, private); [] = public addresses only")

    @field_validator("nats_url", "hub_tools", "hub_a2a_internal_hosts", mode="before")
    @classmethod
    def _urls(cls, value: Any) -> Any:
        return comma_list(value)

    @field_validator("hub_agent_protocol_owner")
    @classmethod
    def _owner(cls, value: str) -> str:
        try:
            return check_owner(value)
        except Exception as exc:
            raise ValueError(str(exc)) from None

    @field_validator("hub_a2a_agents", mode="before")
    @classmethod
    def _remotes(cls, value: Any) -> Any:
        """Card URLs, comma-separated, or a YAML (or JSON) list of entries."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if not text:
            return []
        if text.startswith(("[", "-")) or "\n" in text:
            import yaml

            try:
                loaded = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ValueError(f"not a YAML list: {exc}") from None
        else:
            loaded = [v.strip() for v in text.split(",") if v.strip()]
        if not isinstance(loaded, list):
            raise ValueError("a list of card URLs or of {url, name, bearer, headers}")
        return [{"url": v} if isinstance(v, str) else v for v in loaded]

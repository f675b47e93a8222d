"""``hermes-gateway hub`` and ``hermes-gateway agent``: the hub's services, and a TaskLoop
agent on the hub, each until SIGTERM or Ctrl-C (several copies of either may run)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_core import ConfigError, load_settings, tracing
from agent_core.redaction import register as register_secrets
from agent_core.store import MemoryConversationStore

from .settings import GatewaySettings

if TYPE_CHECKING:
    from agent_core.budget import StoreBudget


def add_commands(sub: Any) -> None:
    """Register the hub's subcommands."""
    hub = sub.add_parser("hub", help="run the agent hub's services (discovery, deadlines, "
                                     "contexts, tools)")
    hub.add_argument("action", nargs="?", default="run",
                     choices=["run", "status", "replay", "workflows", "load", "runs", "show",
                              "cancel", "credentials", "schemas"],
                     help="run the services (default); status: agents and stream depths; "
                          "replay <correlation or run id>: its messages in order; "
                          "workflows: the kept workflows; load <file.yaml>: keep its "
                          "definitions; runs: the latest runs; show <run id>: one run; "
                          "cancel <run id>; credentials --agent ID (or --bridge, or "
                          "--protocol OWNER): issue its NATS credentials (the embedded "
                          "server) or print its permissions, or with --kubernetes every "
                          "identity's into Secrets (the Helm chart's issuer Job); "
                          "schemas: publish the built-in HMP schemas (as the schema admin)")
    hub.add_argument("target", nargs="?", help="for replay, load, show and cancel")
    hub.add_argument("--agent", help="for credentials: the agent's id")
    hub.add_argument("--bridge", action="store_true",
                     help="for credentials: the bridges' identity (bridge)")
    hub.add_argument("--protocol", metavar="OWNER",
                     help="for credentials: a participant of the Synadia Agent Protocol "
                          "(sap-OWNER), hosting agents under OWNER")
    # The Helm chart's issuer Job (gateway/chartcreds.py): credentials into Secrets.
    hub.add_argument("--kubernetes", metavar="DIR", type=Path,
                     help="for credentials: issue into Kubernetes Secrets, as the service "
                          "account whose token, ca.crt and namespace DIR holds")
    hub.add_argument("--authority", metavar="SECRET",
                     help="with --kubernetes: the Secret keeping the operator and account keys")
    hub.add_argument("--accounts", metavar="SECRET",
                     help="with --kubernetes: the Secret for the server's accounts.conf")
    hub.add_argument("--issue", metavar="IDENTITY=SECRET", action="append", default=[],
                     help="with --kubernetes: an identity's .creds into a Secret (repeat)")
    hub.add_argument("--label", metavar="KEY=VALUE", action="append", default=[],
                     help="with --kubernetes: a label of the Secrets it makes (repeat)")
    hub.set_defaults(handler=cmd_hub)
    agent = sub.add_parser("agent", help="run a TaskLoop agent on the hub")
    agent.add_argument("--id", required=True, help="the agent's id (copies share one)")
    agent.add_argument("--capabilities", required=True,
                       help="comma-separated nouns, e.g. validate_claim,summary")
    agent.add_argument("--tools", help="comma-separated tool modules (default HERMES_TOOLS)")
    agent.add_argument("--instructions", help="the agent's system prompt")
    agent.add_argument("--provider", choices=["openai", "anthropic", "ollama"],
                       help="this agent's model provider (default LLM_PROVIDER)")
    agent.add_argument("--model", help="this agent's model (default LLM_MODEL_NAME)")
    agent.add_argument("--base-url", help="this agent's model endpoint (default LLM_BASE_URL)")
    agent.add_argument("--env-file", help="a settings file of this agent's own, read instead "
                                          "of .env (another model, key, tools)")
    agent.set_defaults(handler=cmd_agent)


def cmd_hub(args: argparse.Namespace, settings: GatewaySettings) -> int:
    """The services, their status, or the workflows and their runs."""
    if args.action in ("replay", "load", "show", "cancel") and not args.target:
        raise ConfigError(f"hub {args.action} needs "
                          + ("a file" if args.action == "load" else "a run id" if args.action
                             in ("show", "cancel") else "a correlation id or a run id"))
    if args.action == "credentials":
        if args.kubernetes:
            return asyncio.run(_into_secrets(args))
        if args.authority or args.accounts or args.issue or args.label:
            raise ConfigError("--authority, --accounts, --issue and --label go with "
                              "--kubernetes")
        return _credentials(settings, _identity_of(args))
    if args.action == "schemas":
        return asyncio.run(_schemas(settings))
    if args.action == "replay":
        return asyncio.run(_replay(settings, args.target))
    if args.action in ("workflows", "load", "runs", "show", "cancel"):
        return asyncio.run(_workflows(settings, args.action, args.target))
    return asyncio.run(_status(settings) if args.action == "status" else _services(settings))


def cmd_agent(args: argparse.Namespace, settings: GatewaySettings) -> int:
    """One copy of a TaskLoop agent."""
    capabilities = tuple(c.strip() for c in args.capabilities.split(",") if c.strip())
    if not capabilities:
        raise ConfigError("--capabilities needs at least one capability")
    update: dict[str, Any] = {}
    if args.tools:
        update["hermes_tools"] = [t.strip() for t in args.tools.split(",") if t.strip()]
    if args.instructions:
        update["agent_system_prompt"] = args.instructions
    for flag, name in (("provider", "llm_provider"), ("model", "llm_model_name"),
                       ("base_url", "llm_base_url")):
        if getattr(args, flag):
            update[name] = getattr(args, flag)
    if args.env_file:
        if not Path(args.env_file).is_file():
            raise ConfigError(f"--env-file {args.env_file}: no such file")
        # The agent's own file wins over this process's environment (which may be the
        # gateway's): what it sets is taken out of the environment first.
        from dotenv import dotenv_values

        for name in dotenv_values(args.env_file):
            for key in [k for k in os.environ if k.upper() == name.upper()]:
                del os.environ[key]
    # Loaded again, so the agent's own values are checked like any setting.
    own = load_settings(GatewaySettings, _env_file=args.env_file or ".env", **update)
    register_secrets(own.secret_values())
    from hub.identity import check_agent_id

    return asyncio.run(_agent(own, check_agent_id(args.id), capabilities))


def _identity_of(args: argparse.Namespace) -> str:
    """The identity ``hub credentials`` is for: --agent, --bridge or --protocol (one)."""
    from hub.identity import BRIDGE, PROTOCOL_PARTICIPANT, check_agent_id, check_owner

    given = [g for g in (args.agent, args.bridge, args.protocol) if g]
    if len(given) != 1:
        raise ConfigError("hub credentials needs one of --agent <agent id>, --bridge, "
                          "--protocol <owner>")
    if args.bridge:
        return BRIDGE
    if args.protocol:
        return PROTOCOL_PARTICIPANT + check_owner(args.protocol)
    return check_agent_id(args.agent)


def _credentials(settings: GatewaySettings, identity: str) -> int:
    """An identity's NATS credentials: issued under the data directory for the embedded
    server; for a server of one's own, the nsc command that makes its user."""
    from hub.identity import nsc_command

    if settings.nats_url:
        print(f"# NATS_URL names a server of your own: make {identity!r} a user of the "
              "hub's account with exactly these permissions, and give its process the "
              ".creds file as NATS_CREDS_FILE (the bridges: HUB_BRIDGE_CREDS_FILE; "
              "docs/hub.md, Identities).")
        print(nsc_command(identity))
        return 0
    from hub.server import EmbeddedNats

    path = EmbeddedNats(settings.hermes_data_dir).authority.issue(identity)
    print(path)
    _console(stderr=True).print(f"credentials of [bold]{identity}[/] issued (0600): "
                                "processes on this data directory use them; elsewhere, "
                                "give them as NATS_CREDS_FILE")
    return 0


async def _into_secrets(args: argparse.Namespace) -> int:
    """The chart's issuer Job: keys, the server's accounts and each identity's .creds in
    Kubernetes Secrets (gateway/chartcreds.py)."""
    from .chartcreds import Grant, SecretsAPI, issue_into_secrets

    if args.agent or not (args.authority and args.accounts and args.issue):
        raise ConfigError("--kubernetes needs --authority, --accounts and at least one "
                          "--issue IDENTITY=SECRET (and no --agent)")
    grants = [Grant.parse(each) for each in args.issue]
    labels = dict(each.partition("=")[::2] for each in args.label)
    async with SecretsAPI(args.kubernetes) as api:
        for line in await issue_into_secrets(api, authority=args.authority,
                                             accounts=args.accounts, grants=grants,
                                             labels=labels):
            print(line)
    return 0


async def _schemas(settings: GatewaySettings) -> int:
    from hub.schemas import publish_builtin_schemas

    await publish_builtin_schemas(settings)
    print("the built-in HMP v1 schemas are published where the bucket had none")
    return 0


async def _services(settings: GatewaySettings) -> int:
    from hub import Bus
    from hub.services import start_services

    tracing.configure("hermes-hub")
    bus = await Bus.connect(settings)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(bus.close)
        stack.push_async_callback(asyncio.to_thread, tracing.flush)
        await start_services(bus, settings, stack)
        tools = ", ".join(settings.hub_tools) or "none (HUB_TOOLS)"
        agents = ", ".join(a for a, on in (
            ("the workflow executor", settings.hub_executor),
            ("the retriever and generator", settings.hub_rag or settings.hub_knowledge_bases),
            ("the Synadia Agent Protocol bridge", settings.hub_agent_protocol),
            ("the remote A2A agents", bool(settings.hub_a2a_agents))) if on)
        _console(stderr=True).print("[bold]hermes hub[/]: discovery, the deadline watch, the "
                                   f"context store and the tool service (allowlist: {tools}) "
                                   + (f"and {agents} " if agents else "")
                                   + "are running (Ctrl-C to stop)")
        await _until_stopped()
    return 0


async def _agent(settings: GatewaySettings, agent_id: str,
                 capabilities: tuple[str, ...]) -> int:
    from agent_core.runtime import UnconfiguredModel, build_runtime, start_mcp
    from hub import AgentRunner, Bus
    from hub.loop_agent import LoopAgent

    tracing.configure(f"hermes-agent-{agent_id}")
    model = None if settings.model_configured else UnconfiguredModel()
    stack = contextlib.AsyncExitStack()
    budget = await _budget(settings, stack) if settings.hermes_budgets else None
    runtime = build_runtime(settings, store=MemoryConversationStore(), model=model,
                            budget=budget)
    if budget is not None:
        from .budgets import announce_prices

        announce_prices(budget, runtime.model)
    bus = await Bus.connect(settings, identity=agent_id)
    runner = AgentRunner(bus, LoopAgent(agent_id, capabilities, runtime))
    try:
        await start_mcp(runtime)
        await runner.start()
        _console(stderr=True).print(f"[bold]agent {agent_id}[/] on the hub: "
                                   f"{', '.join(capabilities)} (Ctrl-C to stop)")
        await _until_stopped()
    finally:
        await runner.stop()
        await bus.close()
        await runtime.aclose()
        await stack.aclose()
        await asyncio.to_thread(tracing.flush)
    return 0


async def _budget(settings: GatewaySettings, stack: contextlib.AsyncExitStack) -> StoreBudget:
    """The deployment's budgets, in its store (the agent's `agent` scope, and every other
    that applies: its callers', everyone's); refusals go to the audit log."""
    from agent_core.store import open_store

    from .audit import AuditLog
    from .budgets import BudgetNotices, open_budget

    opened = await open_store(settings, pooled=2)
    stack.push_async_callback(opened.close)
    notices = BudgetNotices(audit=AuditLog(opened.store.redis, settings.redis_prefix,
                                           file=settings.hermes_audit_file))
    stack.push_async_callback(notices.aclose)
    budget = open_budget(settings, opened.store.redis, notices=notices)
    stack.push_async_callback(budget.aclose)
    return budget


async def _status(settings: GatewaySettings) -> int:
    from hub import Bus
    from hub.bus import DEAD, REPLIES, TASKS, TOOLS
    from hub.discovery import discover

    bus = await Bus.connect(settings)
    console = _console()
    try:
        try:
            agents = await discover(bus, "*")
        except Exception:
            console.print("[yellow]no discovery service answers[/] (hermes-gateway hub)")
            agents = []
        for agent in agents:
            console.print(f"{agent.agent_id}: load {agent.load_percent:.0f}%, "
                          f"{agent.copies} running, version {agent.version}, offers "
                          f"{', '.join(agent.capabilities) or 'nothing'}")
        for stream in (TASKS, REPLIES, DEAD, TOOLS):
            info = await bus.js.stream_info(stream)
            console.print(f"stream {stream}: {info.state.messages} messages")
    finally:
        await bus.close()
    return 0


async def _replay(settings: GatewaySettings, target: str) -> int:
    from hub import Bus
    from hub.replay import replay
    from hub.workflows.store import WorkflowStore

    bus = await Bus.connect(settings)
    try:
        run = await WorkflowStore(bus).run(target)  # a run id: its correlation id
        hops = await replay(bus, run.correlation_id if run is not None else target)
    finally:
        await bus.close()
    for hop in hops:
        print(json.dumps({"at": hop.stored_at.isoformat(), "stream": hop.stream,
                          "subject": hop.subject, "message": hop.message},
                         ensure_ascii=False))
    return 0 if hops else 1


async def _workflows(settings: GatewaySettings, action: str, target: str | None) -> int:
    from hub import Bus
    from hub.workflows import DefinitionError
    from hub.workflows.service import read_definitions
    from hub.workflows.store import WorkflowStore

    bus = await Bus.connect(settings)
    store = WorkflowStore(bus)
    console = _console()
    try:
        if action == "workflows":
            for workflow in await store.latest():
                offered = f", offered as {workflow.capability}" if workflow.capability else ""
                console.print(f"{workflow.workflow_id} v{workflow.version}: "
                              f"{len(workflow.steps)} steps{offered}")
            return 0
        if action == "load":
            assert target is not None
            for data in read_definitions(Path(target)):
                try:
                    workflow = await store.put(data)
                except DefinitionError as exc:
                    raise ConfigError(f"{target}: workflow {data.get('workflow_id')!r}: "
                                      f"{exc}") from None
                console.print(f"kept {workflow.workflow_id} v{workflow.version}")
            return 0
        if action == "runs":
            for each in await store.list_runs(limit=20):
                console.print(f"{each.run_id}: {each.workflow_id} v{each.version} "
                              f"{each.status}"
                              + (f" at {each.failed_step}" if each.failed_step else ""))
            return 0
        assert target is not None
        found = await (store.cancel(target) if action == "cancel" else store.run(target))
        if found is None:
            console.print(f"[red]no run {target}[/]")
            return 1
        print(json.dumps(found.view(), ensure_ascii=False, indent=2))
        return 0
    finally:
        await bus.close()


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def _console(*, stderr: bool = False) -> Any:
    """A rich Console (imported when a command prints with it, not for every command)."""
    from rich.console import Console

    return Console(stderr=stderr)

"""The ``hermes-gateway`` command."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any, NoReturn

from agent_core import ConfigError, HermesError, Settings, TaskRequest, load_settings
from agent_core.datadir import PRIVATE_UMASK
from agent_core.ids import new_id
from agent_core.lean import skip_httpx_cli
from agent_core.log import configure_logging
from agent_core.redaction import redact
from agent_core.redaction import register as register_secrets
from agent_core.reporters import ConsoleReporter, JsonLinesReporter
from agent_core.settings import ModelSpec, command_name, missing_model_message
from agent_core.store import MemoryConversationStore
from agent_core.store.embedded import EmbeddedValkey
from agent_core.store.keys import check_conversation_id
from agent_core.task import Approval, PendingApproval
from agent_core.tools.sandbox import sandbox_dir

from .hubcmd import add_commands as add_hub_commands
from .settings import GatewaySettings
from .start import settled

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    # Whatever this process and its children (the embedded servers, MCP servers, isolated
    # tools) create is for the service's user alone: docs/safety.md "The data directory".
    os.umask(PRIVATE_UMASK)
    skip_httpx_cli()
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        settings = load_settings(GatewaySettings)
        register_secrets(settings.secret_values())
        configure_logging("DEBUG" if args.debug else settings.log_level,
                          json_lines=settings.log_json)
        if not getattr(args, "settles", False):
            settled(collect=True)  # the collector back on (gateway.start)
        result: int = args.handler(args, settings)
        return result
    except KeyboardInterrupt:
        return 130
    except (HermesError, OSError, ValueError) as exc:
        if args.debug:
            raise
        print(f"hermes-gateway: {redact(str(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:  # a library's error: one line, secrets masked (--debug: all)
        if args.debug:
            raise
        print(f"hermes-gateway: {type(exc).__name__}: {redact(str(exc))} (--debug shows "
              "where)", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-gateway",
                                     description="Chat platforms <-> tool-calling LLM agents")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="start the gateway (HTTP API, web chat, channels)")
    serve.add_argument("--host", help="address to bind (default HERMES_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default HERMES_PORT, 8080)")
    serve.add_argument("--processes", type=int,
                       help="serving processes sharing the port (default HERMES_PROCESSES, 1)")
    serve.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    serve.set_defaults(handler=_cmd_serve)

    run = sub.add_parser("run", help="run one task and print its event stream")
    run.add_argument("--task", required=True, help="what the agent should do")
    run.add_argument("--json", action="store_true", help="print events as JSON lines")
    run.add_argument("--conversation", default="cli",
                     help="conversation id; its memory persists across runs in the store")
    run.add_argument("--no-store", action="store_true",
                     help="keep memory in this process only (no Redis, nothing persisted)")
    run.add_argument("-v", "--verbose", action="store_true")
    run.add_argument("--approve", action="store_true",
                     help="approve every write this task asks for (else: asked at the "
                          "terminal)")
    run.set_defaults(handler=_cmd_run, settles=True)  # once its runtime is built

    tools = sub.add_parser("tools", help="list the enabled tools with their schemas")
    tools.add_argument("--json", action="store_true")
    tools.set_defaults(handler=_cmd_tools)

    demo = sub.add_parser("demo", help="replay a recorded sales-report session offline")
    demo.add_argument("--json", action="store_true", help="print events as JSON lines")
    demo.add_argument("-v", "--verbose", action="store_true")
    demo.set_defaults(handler=_cmd_demo)
    add_hub_commands(sub)
    return parser


def _cmd_serve(args: argparse.Namespace, settings: GatewaySettings) -> int:
    from .app import create_app
    from .guard import is_loopback
    from .httpserver import ConnectionLimits, serve
    from .metrics import use_multiprocess_dir
    from .processes import Siblings, as_child, check_port_free

    host = args.host or settings.hermes_host
    port = args.port or settings.hermes_port
    if not is_loopback(host) and not settings.hermes_api_keys:
        raise ConfigError(f"refusing to listen on {host!r} without HERMES_API_KEYS: anyone who "
                          "can reach it could run the agent. Set HERMES_API_KEYS, or bind "
                          "127.0.0.1")
    processes = 1 if args.child else (args.processes or settings.hermes_processes)
    if processes < 1:
        raise ConfigError("--processes must be at least 1")
    shared = args.child or processes > 1
    if shared and not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError("several serving processes need SO_REUSEPORT, which this system "
                          "lacks; run one process (HERMES_PROCESSES=1)")
    if not args.child:
        check_port_free(host, port)  # said first, not after the gateway reported ready
    if processes > 1:
        # Before the app (and its metrics) exist; the others inherit it.
        use_multiprocess_dir(settings.hermes_data_dir / "metrics" / str(port))
    settings = settings.model_copy(update={"hermes_host": host, "hermes_port": port})
    if not args.child:
        # Plain text: the serving process does not load rich (~2.6 MB) for two lines.
        print(f"hermes-gateway on http://{host}:{port}/ (web chat at /, API under /agent, "
              "OpenAPI at /openapi.json)" + (f", {processes} processes" if processes > 1
                                             else ""), file=sys.stderr, flush=True)
        if not settings.hermes_api_keys:
            print(f"no HERMES_API_KEYS: the API takes the local token in "
                  f"{settings.hermes_data_dir / 'local-token'} (the web chat fetches it by "
                  "itself)", file=sys.stderr, flush=True)
        if not settings.model_configured:
            print(missing_model_message(), file=sys.stderr, flush=True)
    app = create_app(settings)
    app.on_startup.append(_settle_heap)  # after the gateway's own start
    if args.child:
        as_child(app)
    elif processes > 1:
        # The others get the same grace for their tasks, and time to close their store.
        Siblings(processes, host, port,
                 stop_timeout=settings.hermes_shutdown_grace + 10).attach(app)
    limits = ConnectionLimits(header_timeout=settings.hermes_header_timeout,
                              max_connections=settings.hermes_max_connections)
    serve(app, host=host, port=port, limits=limits, shutdown_timeout=SHUTDOWN_TIMEOUT,
          backlog=LISTEN_BACKLOG, reuse_port=shared,
          loop=new_event_loop(settings.hermes_event_loop))
    return 0


#: Seconds a stopping gateway gives open requests (SSE streams, /agent/run) to finish.
SHUTDOWN_TIMEOUT = 15


def new_event_loop(choice: str) -> asyncio.AbstractEventLoop:
    """The loop ``serve`` runs on: uvloop's (libuv, in C) unless asked for asyncio's or
    uvloop is missing. Accepting connections and moving bytes is most of what the gateway
    does per request besides its own work; uvloop does it for ~12% less of the gateway's
    CPU under a burst here. On Python 3.12+ aiohttp starts each connection's and each
    request's handler task eagerly itself; an eager task factory for every other task
    measured no better (docs/footprint.md, "Python versions"), so the loop keeps the
    default one."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise ConfigError("HERMES_EVENT_LOOP=uvloop, but uvloop is not installed "
                                  "(pip install uvloop; it has no Windows build)") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


#: Connections the kernel may hold for the gateway before it accepts them. aiohttp's 128
#: dropped SYNs when 200 senders connected at once, and each dropped one waited a second
#: for its retransmission (``bench/gateway_load.py``). Linux caps it at net.core.somaxconn.
LISTEN_BACKLOG = 1024


async def _settle_heap(_: object) -> None:
    """Take what the start allocated (modules, schemas, clients: ~120 000 objects) out of
    the garbage collector's view, its garbage collected first. Otherwise every full
    collection walks them all, and under a burst of requests one came every few hundred
    requests and took 30-45 ms here. From then on, the collector's serving threshold
    (``gateway.start.SERVING_THRESHOLD``)."""
    settled(collect=True, serving=True)


def _cmd_run(args: argparse.Namespace, settings: GatewaySettings) -> int:
    if not settings.model_configured:
        raise ConfigError(missing_model_message())
    check_conversation_id(args.conversation)
    return asyncio.run(_run_task(settings, args.task, args.conversation, json_out=args.json,
                                 verbose=args.verbose or settings.agent_default_verbose,
                                 persistent=not args.no_store, approve_all=args.approve))


async def _run_task(settings: Settings, text: str, conversation: str, *, json_out: bool,
                    verbose: bool, persistent: bool, model: Any = None,
                    approve_all: bool = False) -> int:
    # The embedded store's server starts up while redis-py and the runtime are imported
    # (~40 ms of its own, mostly calibrating its clock, against ~150 ms of imports).
    server = EmbeddedValkey(settings.hermes_data_dir) \
        if persistent and not settings.store_external else None
    if server is not None:
        await server.launch()
    try:
        from agent_core.runtime import build_runtime, start_mcp
        from agent_core.store.factory import open_store
    except BaseException:
        if server is not None:
            await server.stop()
        raise
    opened = await open_store(settings, pooled=1, embedded=server) if persistent else None
    try:
        runtime = build_runtime(settings, store=opened.store if opened else
                                MemoryConversationStore(), model=model)
    except BaseException:  # a tool module that will not load, say: no server left behind
        if opened is not None:
            await opened.close()
        raise
    reporter: Any = JsonLinesReporter() if json_out else ConsoleReporter(verbose=verbose)
    runtime.bus.subscribe(reporter)
    settled()  # the collector back on, start-up frozen (gateway.start)
    try:
        await start_mcp(runtime)
        # In the conversation's shard when the store is a cluster (keys.py).
        task_id = opened.store.keys.new_task_id(conversation) if opened else new_id(16)
        # The operator at their own terminal: every permission, and a sandbox of the task's
        # own under the data dir, as the gateway gives each task.
        result = await runtime.loop.run(TaskRequest(
            text=text, conversation_id=conversation, role="admin", permissions=frozenset({"*"}),
            task_id=task_id, trace_id=task_id, data_dir=settings.hermes_data_dir,
            workdir=sandbox_dir(settings.hermes_data_dir, f"cli:{conversation}", task_id),
            extra=settings.tool_extra()))
        while result.outcome == "awaiting_approval" and result.approval is not None:
            decision = await _decide(result.approval, approve_all=approve_all)
            if decision is None:
                break
            result = await runtime.loop.resume(task_id, approval=Approval(
                approved=decision, by="cli:operator"))
    finally:
        await runtime.aclose()
        if opened is not None and opened.embedded is not None:
            await opened.embedded.stop()
    return 0 if result.outcome in ("answered", "asked_user") else 1


async def _decide(pending: PendingApproval, *, approve_all: bool) -> bool | None:
    """The operator's decision on a paused call: --approve, or asked at the terminal; None
    (and why) when nobody can be asked."""
    if approve_all:
        return True
    what = f"{pending.tool_name} {json.dumps(pending.arguments, ensure_ascii=False)}"
    if not sys.stdin.isatty():
        print(f"The task waits for an approval of {what} ({pending.reason}). Run it again "
              "with --approve, or at a terminal to be asked.", file=sys.stderr)
        return None
    answer = await asyncio.to_thread(input, f"Approve {what}? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _cmd_tools(args: argparse.Namespace, settings: GatewaySettings) -> int:
    from agent_core.runtime import build_registry

    registry = build_registry(settings)
    servers = asyncio.run(_mcp_tools(settings, registry)) if settings.hermes_mcp_servers \
        else {}
    if args.json:
        print(json.dumps(registry.specs(), indent=2, ensure_ascii=False))
        return 0
    from rich.console import Console

    console = Console()
    for t in registry:
        flags: list[str] = [t.side_effect]
        if t.requires_confirmation:
            flags.append("needs approval")
        if t.tags:
            flags.append("tags: " + ", ".join(sorted(t.tags)))
        console.print(f"[bold]{t.name}[/] [dim]({'; '.join(flags)})[/]\n  {t.description}")
        console.print_json(json.dumps(t.parameters))
    for name, status in servers.items():
        state = status["state"] if status["state"] == "up" else status.get("error", "down")
        console.print(f"[bold]MCP server {name}[/] ({status['transport']}): {state}, "
                      f"{status['tools']} tools")
    return 0


async def _mcp_tools(settings: GatewaySettings, registry: Any) -> dict[str, Any]:
    """Connect the MCP servers once to list their tools beside the built-in ones."""
    from agent_core.mcp import McpServers

    servers = McpServers(settings.hermes_mcp_servers, registry,
                         data_dir=settings.hermes_data_dir)
    try:
        await servers.start()
        return servers.status()
    finally:
        await servers.aclose()


def _cmd_demo(args: argparse.Namespace, settings: GatewaySettings) -> int:
    session = json.loads(resources.files("gateway.demo").joinpath("sales_session.json")
                         .read_text(encoding="utf-8"))
    return asyncio.run(_demo(settings, session, json_out=args.json, verbose=args.verbose))


async def _demo(settings: Settings, session: dict[str, Any], *, json_out: bool,
                verbose: bool) -> int:
    from rich.console import Console

    from agent_core.models import build_adapter
    from agent_core.models.replay import ReplayModelServer, Reply  # an aiohttp server: demo only

    console = Console(stderr=json_out)
    console.print(f"[bold]{command_name()} demo[/]: replaying a model session recorded on "
                  f"{session['recorded_on']} through the real OpenAI-compatible adapter and "
                  "agent loop. No API key or network needed; the tools run for real.")
    console.print(f"[bold]task:[/] {session['task']}\n")
    server = ReplayModelServer(Reply.from_dict(t) for t in session["turns"])
    await server.start()
    try:
        demo_settings = settings.model_copy(update={
            "hermes_tools": ["tools.sales"], "agent_replan_every": 0, "llm_timeout": 30.0,
            "llm_max_retries": 0, "llm_native_tools": True})
        model = build_adapter(ModelSpec(provider="openai", model_name="recorded",
                                        base_url=server.openai_url), demo_settings)
        # A recorded session: its write was approved when it was recorded.
        code = await _run_task(demo_settings, session["task"], "demo", json_out=json_out,
                               verbose=verbose, persistent=False, model=model,
                               approve_all=True)
    finally:
        await server.stop()
    console.print(f"\nThe report was appended under {settings.hermes_data_dir / 'reports'}. "
                  "Configure a model (see .env.example) and try "
                  f"`{command_name()} run --task ...` to do the same live.")
    return code


def script() -> NoReturn:
    """The console script: ``main``, then the end of the process without tearing the
    interpreter down. Freeing the objects of ~800-1500 modules took 100-230 ms here, a
    fifth of a ``run --task``; the exit handlers still run (logging's flush, OpenTelemetry's
    export) and the output is flushed. While another non-daemon thread is alive the process
    ends the ordinary way, which waits for it."""
    code = main()
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to flush to
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    script()

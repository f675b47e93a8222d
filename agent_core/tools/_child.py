"""The child side of subprocess isolation: run one tool call from JSON on stdin."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from ..errors import ToolError
from .context import ToolContext
from .registry import Tool


def main() -> int:
    request = json.loads(sys.stdin.buffer.read())
    try:
        module = importlib.import_module(request["module"])
        tool = getattr(module, request["name"])
        if not isinstance(tool, Tool):
            raise ToolError(f"{request['name']!r} is not a tool")
        raw = request.get("ctx")
        ctx = None
        if raw is not None:
            ctx = ToolContext(**{**raw, "permissions": frozenset(raw["permissions"]),
                                 "workdir": Path(raw["workdir"]) if raw["workdir"] else None,
                                 "data_dir": Path(raw["data_dir"]) if raw["data_dir"]
                                 else None})
        kwargs = tool.bind(tool.validate(request["arguments"]), ctx)
        output: Any = tool.fn(**kwargs)
    except ToolError as exc:
        print(json.dumps({"ok": False, "error": str(exc), "retryable": exc.retryable}))
        return 1
    except MemoryError:
        print(json.dumps({"ok": False, "error": "out of memory (memory limit reached)"}))
        return 1
    except Exception as exc:
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps({"ok": True, "output": to_jsonable_python(output, fallback=str)}))
    return 0



if __name__ == "__main__":
    sys.exit(main())

"""Built-in tools a deployment can enable by module name in HERMES_TOOLS.

They are ordinary ``@tool`` functions, registered exactly the way a deployment's own are;
a module is imported only when one of its tools is used (or HERMES_TOOLS names it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core import lazy_exports

if TYPE_CHECKING:
    from .delegate import delegate
    from .files import append_file, list_files, read_file, write_file
    from .http_fetch import http_fetch
    from .recall import recall
    from .sales import calc_growth_rate, query_sales_data, save_daily_report
    from .schedule import schedule_report

_MODULES = {
    "delegate": "delegate", "append_file": "files", "list_files": "files", "read_file": "files",
    "write_file": "files", "http_fetch": "http_fetch", "recall": "recall",
    "calc_growth_rate": "sales", "query_sales_data": "sales", "save_daily_report": "sales",
    "schedule_report": "schedule",
}

__all__ = [
    "append_file",
    "calc_growth_rate",
    "delegate",
    "http_fetch",
    "list_files",
    "query_sales_data",
    "read_file",
    "recall",
    "save_daily_report",
    "schedule_report",
    "write_file",
]

__getattr__ = lazy_exports(__name__, _MODULES)

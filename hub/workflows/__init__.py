"""Workflows on the hub: versioned definitions (``definition``), their runs' documents
(``document``), the definitions and runs kept in key-value buckets (``store``), and the
executor agent that runs them (``executor``)."""

from __future__ import annotations

from .definition import DefinitionError, Step, Workflow, parse_definition

__all__ = ["DefinitionError", "Step", "Workflow", "parse_definition"]

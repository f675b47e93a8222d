"""The package map holds: who may import whom, and modules stay one concept long."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agent_core", "tools", "adapters", "gateway", "hub")
MAX_LINES = 400


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py")) if (ROOT / package).is_dir() else []


def _imports(path: Path, root: Path = ROOT) -> list[str]:
    """Every module ``path`` imports, anywhere in it (relative imports resolved)."""
    # A package's __init__ counts as a module inside it: ".x" is a sibling either way.
    parts = path.relative_to(root).with_suffix("").parts
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(parts[:len(parts) - node.level]) if node.level else []
            names.append(".".join([*base, *([node.module] if node.module else [])]))
    return names


def _violations(package: str, allowed: set[str], *, root_only: set[str]) -> list[str]:
    """Imports of our packages by ``package`` that the map does not allow: another package
    not in ``allowed``, or (for those in ``root_only``) anything but its public face."""
    found = []
    for path in _modules(package):
        for name in _imports(path):
            top, _, rest = name.partition(".")
            if top not in PACKAGES or top == package:
                continue
            if top not in allowed or (top in root_only and rest):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def test_agent_core_imports_nothing_of_the_packages_above_it() -> None:
    assert _violations("agent_core", set(), root_only=set()) == []


def test_tools_import_only_the_public_face_of_agent_core() -> None:
    assert _violations("tools", {"agent_core"}, root_only={"agent_core"}) == []


def test_adapters_import_only_the_public_face_of_agent_core() -> None:
    assert _violations("adapters", {"agent_core"}, root_only={"agent_core"}) == []


def test_the_hub_imports_agent_core_only() -> None:
    assert _violations("hub", {"agent_core"}, root_only=set()) == []


@pytest.mark.parametrize("package", ["agent_core", "adapters", "gateway", "hub"])
def test_modules_stay_one_concept_long(package: str) -> None:
    long = {str(p.relative_to(ROOT)): n for p in _modules(package)
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"modules past {MAX_LINES} lines: {long}"


def test_every_package_has_a_public_face() -> None:
    for package in PACKAGES:
        init = ROOT / package / "__init__.py"
        if init.exists():
            assert "__all__" in init.read_text(encoding="utf-8"), package


def test_the_scanner_sees_imports_at_any_depth_and_resolves_relative_ones(
        tmp_path: Path) -> None:
    package = tmp_path / "adapters" / "inner"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .mod import x\nfrom .. import base\n")
    (package / "mod.py").write_text(
        "import json\n\ndef f():\n    from agent_core.store import redis\n"
        "from ..errors import E\n")
    assert sorted(_imports(package / "__init__.py", tmp_path)) == ["adapters",
                                                                    "adapters.inner.mod"]
    assert sorted(_imports(package / "mod.py", tmp_path)) == ["adapters.errors",
                                                              "agent_core.store", "json"]

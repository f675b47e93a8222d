"""Sandboxed file tools: a path traversal corpus with zero escapes, quotas, symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_core import ToolContext, ToolError, ToolExecutor, ToolRegistry
from agent_core.tools.sandbox import resolve
from tools.files import append_file, list_files, read_file, write_file

ESCAPES = [
    "../secret.txt", "../../etc/passwd", "a/../../outside", "./../x", "a/b/../../../x",
    "/etc/passwd", "/tmp/x", "//etc/passwd", "~/x", "~root/x", "C:\\Windows\\win.ini",
    "c:/windows", "..\\..\\x", "a\\..\\..\\x", "%2e%2e/x", "%2E%2E%2Fx", "a%2fb",
    "..%2f..%2fetc", "%5c..%5cx", "x%00.txt", "x\x00.txt", "\x00", "", "   ",
    "．．/x", "..／x", "a/．．/．．/x", "..", "../", "a/..", "...//../x",
    "link_out/secret", "link_out", "sibling_link/x", "dir_link_out/../x",
]


@pytest.fixture
def sandbox(tmp_path: Path) -> tuple[Path, Path]:
    """A sandbox next to a prefix sibling (/sandbox-evil) holding a secret, plus symlinks
    inside the sandbox that point out of it."""
    root = tmp_path / "sandbox"
    evil = tmp_path / "sandbox-evil"
    root.mkdir()
    evil.mkdir()
    (evil / "secret").write_text("stolen")
    (tmp_path / "secret.txt").write_text("stolen")
    (root / "link_out").symlink_to(evil)
    (root / "sibling_link").symlink_to("../sandbox-evil")
    (root / "dir_link_out").symlink_to(tmp_path)
    (root / "ok.txt").write_text("inside")
    return root, evil


@pytest.mark.parametrize("path", ESCAPES)
def test_no_path_escapes_the_sandbox(sandbox: tuple[Path, Path], path: str) -> None:
    root, _ = sandbox
    with pytest.raises(ToolError):
        resolve(root, path)


def test_the_corpus_is_large_enough() -> None:
    assert len(ESCAPES) >= 30


@pytest.mark.parametrize("path", ["ok.txt", "notes/today.md", "a/b/c.txt", "./x", "x..y",
                                  "..hidden", "dir/.env"])
def test_ordinary_paths_stay_inside(sandbox: tuple[Path, Path], path: str) -> None:
    root, _ = sandbox
    resolved = resolve(root, path)
    assert resolved.is_relative_to(root.resolve())


def ctx(root: Path, **limits: int) -> ToolContext:
    return ToolContext(user_id="u", conversation_id="c", trace_id="t", role="admin",
                       permissions=frozenset({"*"}), workdir=root,
                       extra={"sandbox": limits} if limits else {})


async def run(tool_name: str, args: dict[str, object], context: ToolContext) -> object:
    # What the sandbox allows is under test here, not who approves: each call is approved.
    executor = ToolExecutor(ToolRegistry([read_file, write_file, append_file, list_files]))
    return await executor.execute(tool_name, args, context, approved=True)


async def test_write_read_append_list_inside_the_sandbox(tmp_path: Path) -> None:
    root = tmp_path / "box"
    c = ctx(root)
    assert (await run("write_file", {"path": "notes/a.md", "content": "one\n"}, c)).ok
    assert (await run("append_file", {"path": "notes/a.md", "content": "two\n"}, c)).ok
    result = await run("read_file", {"path": "notes/a.md"}, c)
    assert result.output["content"] == "one\ntwo\n"
    listing = (await run("list_files", {}, c)).output
    assert listing["entries"] == [{"path": "notes/a.md", "bytes": 8, "kind": "file"}]


async def test_escapes_through_the_tools_are_refused_and_nothing_leaks(
        sandbox: tuple[Path, Path]) -> None:
    root, evil = sandbox
    c = ctx(root)
    for path in ("link_out/secret", "../secret.txt", "sibling_link/secret"):
        read = await run("read_file", {"path": path}, c)
        assert not read.ok and "stolen" not in read.observation()
        wrote = await run("write_file", {"path": path, "content": "pwned"}, c)
        assert not wrote.ok
    assert (evil / "secret").read_text() == "stolen"


def test_a_symlink_swapped_in_after_the_check_is_not_followed(tmp_path: Path) -> None:
    from agent_core.tools.sandbox import open_for_write

    root = tmp_path / "box"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    checked = resolve(root, "report.txt")
    checked.symlink_to(outside)  # the race: a link appears between check and open
    with pytest.raises(ToolError, match="symbolic link"):
        open_for_write(checked, append=True)
    assert outside.read_text() == "keep"


async def test_links_that_stay_inside_are_followed(tmp_path: Path) -> None:
    root = tmp_path / "box"
    root.mkdir()
    (root / "inner.txt").write_text("x")
    (root / "alias").symlink_to(root / "inner.txt")
    result = await run("write_file", {"path": "alias", "content": "y"}, ctx(root))
    assert result.ok and (root / "inner.txt").read_text() == "y"


async def test_quotas(tmp_path: Path) -> None:
    root = tmp_path / "box"
    c = ctx(root, max_file_bytes=10, max_total_bytes=15)
    assert (await run("write_file", {"path": "a", "content": "1234567890"}, c)).ok
    too_big = await run("write_file", {"path": "b", "content": "12345678901"}, c)
    assert not too_big.ok and "limit is 10" in too_big.observation()
    over_quota = await run("write_file", {"path": "b", "content": "123456"}, c)
    assert not over_quota.ok and "quota" in over_quota.observation()
    assert (await run("write_file", {"path": "b", "content": "12345"}, c)).ok
    assert sorted(os.listdir(root)) == ["a", "b"]

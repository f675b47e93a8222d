"""Sandbox paths: every file a tool touches resolves inside the task's own directory.

Refused: absolute paths, ``..`` components, NUL bytes, backslashes, percent-encoded or
look-alike separators, and anything that resolves outside the sandbox through a symlink
(including the ``/sandbox-evil`` prefix-sibling trick, since containment is checked by path
components, never by string prefix). Files are opened with O_NOFOLLOW so a symlink swapped
in after the check is not followed either.

``inbox/`` is the conversation's inbox (the files people sent, kept by the gateway): every
task of the conversation reads it there, none writes into it, and no other conversation's
is reachable.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..datadir import private_dir
from ..errors import ToolError

_ENCODED = re.compile(r"%(2e|2f|5c|00)", re.IGNORECASE)
#: The folder every task of a conversation sees the files people sent in (read-only).
INBOX = "inbox"


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Quotas of one sandbox."""

    max_file_bytes: int = 1024 * 1024
    max_total_bytes: int = 10 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Sandbox:
    """One task's directory and its quotas: what the file tools (``ctx.sandbox``) use."""

    workdir: Path
    limits: SandboxLimits = SandboxLimits()
    #: The conversation's inbox, seen as ``inbox/`` (None: the task has none).
    inbox: Path | None = None

    def root(self) -> Path:
        """The directory, created (0700, as its missing parents) if it does not exist yet."""
        return private_dir(self.workdir)

    def resolve(self, user_path: str, *, write: bool = False) -> Path:
        """The absolute path of ``user_path`` inside the sandbox (``inbox/...`` inside the
        conversation's inbox, read-only), or ToolError."""
        path = resolve(self.workdir, user_path)  # every check of the path's spelling
        parts = Path(user_path).parts
        if self.inbox is None or not parts or parts[0] != INBOX:
            return path
        if write:
            raise ToolError("inbox/ holds the files people sent and is read-only; write "
                            "somewhere else in the sandbox")
        root = self.inbox.resolve()
        candidate = root.joinpath(*parts[1:]).resolve(strict=False)
        if candidate != root and not candidate.is_relative_to(root):
            raise ToolError("the path leads outside the sandbox")
        return candidate

    def relative(self, path: Path) -> str:
        """``path`` (inside the sandbox or its inbox) as the model should name it."""
        if self.inbox is not None and path.is_relative_to(self.inbox.resolve()):
            rest = path.relative_to(self.inbox.resolve())
            return INBOX if str(rest) == "." else f"{INBOX}/{rest}"
        return str(path.relative_to(self.workdir.resolve()))

    def usage(self) -> int:
        """Bytes used by the sandbox's regular files."""
        return usage(self.workdir)

    def open_read(self, path: Path) -> BinaryIO:
        """``path`` opened for reading, refusing a symlink swapped in after the check."""
        return os.fdopen(open_for_read(path), "rb")

    def open_write(self, path: Path, *, append: bool) -> BinaryIO:
        """``path`` opened for writing, refusing a symlink swapped in after the check."""
        return os.fdopen(open_for_write(path, append=append), "wb")

    def read(self, user_path: str) -> bytes:
        """The bytes of the regular file at ``user_path``, reached without following any
        symbolic link (:func:`open_inside`): what the gateway serves and uploads of files
        tools made. ToolError for a path or file that is refused, OSError (e.g.
        FileNotFoundError) for one that is not there."""
        with os.fdopen(open_inside(self.workdir, user_path), "rb") as handle:
            return handle.read()


#: A conversation id as one folder name, one to one: ``:`` (in every id) reads as ``_``, and
#: so ``_`` itself, ``/`` and ``%`` are escaped (``api:bob:x_y`` and ``api:bob_x:y`` were
#: one folder when both separators became ``_``, and one conversation read the other's).
_FOLDER = str.maketrans({"%": "%25", "_": "%5F", "/": "%2F", ":": "_"})


def conversation_dir(data_dir: Path, conversation_id: str) -> Path:
    """The folder of a conversation's files: its tasks' sandboxes and its inbox."""
    return Path(data_dir).joinpath("sandboxes", conversation_id.translate(_FOLDER))


def sandbox_dir(data_dir: Path, conversation_id: str, task_id: str) -> Path:
    """Where a task's sandbox lives: under the data directory, one folder per
    conversation, one per task within it."""
    return conversation_dir(data_dir, conversation_id) / task_id


def remove_conversation_files(data_dir: Path, conversation_id: str) -> bool:
    """Delete every file of a conversation on this host (forgetting it): whether there
    were any. Links inside are removed, never followed."""
    folder = conversation_dir(data_dir, conversation_id)
    if not folder.exists():
        return False
    shutil.rmtree(folder, ignore_errors=True)  # rmtree unlinks symlinks, never follows them
    return True


def inbox_dir(data_dir: Path, conversation_id: str) -> Path:
    """Where the files people sent in a conversation are kept: beside its tasks'
    sandboxes, one inbox per conversation."""
    return sandbox_dir(data_dir, conversation_id, INBOX)


def resolve(workdir: Path, user_path: str) -> Path:
    """The absolute path of ``user_path`` inside ``workdir``, or ToolError saying why not."""
    if not user_path or not user_path.strip():
        raise ToolError("the path is empty")
    if "\x00" in user_path:
        raise ToolError("the path contains a NUL byte")
    if "\\" in user_path:
        raise ToolError("backslashes are not allowed in paths")
    if _ENCODED.search(user_path):
        raise ToolError("percent-encoded dots, slashes or NULs are not allowed in paths")
    normal = unicodedata.normalize("NFKC", user_path)
    if normal != user_path and ("/" in normal or ".." in normal):
        raise ToolError("the path uses look-alike separators or dots")
    if user_path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", user_path):
        raise ToolError("use a path relative to the sandbox, not an absolute one")
    parts = Path(user_path).parts
    if any(part == ".." for part in parts):
        raise ToolError("'..' is not allowed in paths")
    root = workdir.resolve()
    candidate = (root / user_path).resolve(strict=False)
    if candidate != root and not candidate.is_relative_to(root):
        raise ToolError("the path leads outside the sandbox")
    return candidate


def usage(workdir: Path) -> int:
    """Bytes used by regular files in the sandbox (symlinks are not followed)."""
    total = 0
    if not workdir.exists():
        return 0
    for dirpath, _dirs, files in os.walk(workdir, followlinks=False):
        for name in files:
            path = Path(dirpath) / name
            try:
                stat = path.lstat()
            except FileNotFoundError:
                continue
            if not path.is_symlink():
                total += stat.st_size
    return total


def open_for_write(path: Path, *, append: bool) -> int:
    """A file descriptor for writing that refuses to follow a symlink at ``path``."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    flags |= os.O_APPEND if append else os.O_TRUNC
    try:
        return os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno in (40, 62):  # ELOOP: the final component is a symlink
            raise ToolError("the path is a symbolic link; refused") from None
        raise


def open_inside(workdir: Path, user_path: str) -> int:
    """A file descriptor for reading the regular file at ``user_path`` in ``workdir``: the
    path is checked as :func:`resolve` checks it, then opened one component at a time from
    the sandbox's own directory with O_NOFOLLOW, so a symlink anywhere on the way (the file,
    or a folder such as ``attachments/`` swapped for a link) is refused, whatever it points
    at and whenever it was made. A FIFO or device is refused without blocking on it."""
    resolve(workdir, user_path)
    parts = [part for part in Path(user_path).parts if part not in ("", ".")]
    if not parts:
        raise ToolError("the path names the sandbox itself")
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    folder = os.open(workdir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for part in parts[:-1]:
            inner = _open_at(part, folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                             | nofollow)
            os.close(folder)
            folder = inner
        fd = _open_at(parts[-1], folder, os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0))
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ToolError("the path is not a regular file; refused")
    os.set_blocking(fd, True)
    return fd


def _open_at(name: str, folder: int, flags: int) -> int:
    try:
        return os.open(name, flags, dir_fd=folder)
    except OSError as exc:
        # ELOOP: a symlink where O_NOFOLLOW allows none; ENOTDIR: a folder that is not one
        # (O_DIRECTORY refuses a symlink to a folder with it on some systems).
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, getattr(errno, "EFTYPE", -1)):
            raise ToolError("the path is, or passes through, a symbolic link (or a file where "
                            "a folder should be); refused") from None
        raise


def open_for_read(path: Path) -> int:
    """A file descriptor for reading that refuses to follow a symlink at ``path``."""
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno in (40, 62):
            raise ToolError("the path is a symbolic link; refused") from None
        raise

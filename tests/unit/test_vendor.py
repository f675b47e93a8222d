"""The vendored browser libraries are the files their README lists: same hashes, each with
its licence, and every file the pages are served is there."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from gateway.pages import FILES

STATIC = Path(__file__).resolve().parents[2] / "gateway" / "static"
VENDOR = STATIC / "vendor"


def test_every_vendored_file_has_the_hash_and_licence_its_readme_lists() -> None:
    rows = re.findall(r"^\| (\S+) \| .+? \| .*?(LICENSE\.\w+) \| ([0-9a-f]{64}) \|$",
                      (VENDOR / "README.md").read_text(), flags=re.MULTILINE)
    listed = {name for name, _, _ in rows}
    shipped = {p.name for p in VENDOR.iterdir()
               if p.suffix in (".js", ".css") and p.name != "README.md"}
    assert listed == shipped
    for name, licence, digest in rows:
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
        assert (VENDOR / licence).is_file(), licence


def test_every_file_the_pages_are_served_exists() -> None:
    for name, (path, _) in FILES.items():
        assert (STATIC / path).is_file(), name

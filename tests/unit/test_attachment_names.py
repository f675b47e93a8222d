"""Names of files people send, made safe to keep: a corpus of hostile and ordinary names,
each with the name it is kept as, and the rules every kept name follows (one path
component, no leading dot or dash, no control or look-alike characters, NFKC, at most 120
bytes with its extension, never a device name), then de-duplication."""

from __future__ import annotations

import unicodedata

import pytest

from agent_core.attachments import safe_name, unique_name
from agent_core.attachments.names import MAX_NAME_BYTES

CORPUS = [
    ("report.pdf", "report.pdf"),
    ("my file (1).pdf", "my file (1).pdf"),
    ("x.tar.gz", "x.tar.gz"),
    ("résumé.pdf", "résumé.pdf"),
    ("日本語の資料.xlsx", "日本語の資料.xlsx"),
    # paths, of every system
    ("../../../../etc/passwd", "passwd"),
    ("..\\..\\boot.ini", "boot.ini"),
    ("C:\\Users\\x\\Desktop\\cv.docx", "cv.docx"),
    ("/var/www/html/index.php", "index.php"),
    ("file/", "file"),
    ("...../.env", "env"),
    # dots and dashes that would hide a file or read as an option
    (".bashrc", "bashrc"),
    ("...", "file"),
    ("-rf", "rf"),
    ("--help.txt", "help.txt"),
    # controls, invisible and direction marks
    ("a\x00b\u202e.txt", "ab.txt"),
    ("photo.jpg\n.exe", "photo.jpg.exe"),
    ("\u200bzero.txt", "zero.txt"),
    ("bell\x07.txt", "bell.txt"),
    # look-alikes folded by NFKC
    ("ＡＢＣ．ｐｄｆ", "ABC.pdf"),
    ("ﬁle.txt", "file.txt"),
    ("a／b.txt", "b.txt"),  # a full-width solidus is a slash once normalised
    # marks a shell or a file system would read
    ("a<b>c:d|e?.txt", "a_b_c_d_e_.txt"),
    ("$(reboot).sh", "(reboot).sh"),
    ("%2e%2e%2fsecret", "2e_2e_2fsecret"),
    ("a  b__c..d.txt", "a b_c.d.txt"),
    ("😀.png", "file.png"),
    # Windows device names
    ("CON", "file.CON"),
    ("con.txt", "file.con.txt"),
    ("LPT1", "file.LPT1"),
    ("nul", "file.nul"),
    # nothing left
    ("", "file"),
    ("   ", "file"),
    ("\x00\x01", "file"),
]


@pytest.mark.parametrize(("raw", "kept"), CORPUS, ids=[repr(r)[:40] for r, _ in CORPUS])
def test_each_name_is_kept_as_expected(raw: str, kept: str) -> None:
    assert safe_name(raw) == kept


LONG = ["n" * 300 + ".txt", "é" * 200 + ".pdf", "x" * 400, "日" * 100 + ".docx",
        "a" * 50 + "." + "b" * 200, "a" * 119 + "😀" + ".png"]


@pytest.mark.parametrize("raw", [r for r, _ in CORPUS] + LONG)
def test_every_kept_name_follows_the_rules(raw: str) -> None:
    name = safe_name(raw)
    assert name and "/" not in name and "\\" not in name
    assert not name.startswith((".", "-", " ")) and not name.endswith((".", " "))
    assert len(name.encode()) <= MAX_NAME_BYTES
    assert unicodedata.normalize("NFKC", name) == name
    assert not any(unicodedata.category(ch)[0] == "C" for ch in name)
    assert name.split(".")[0].lower() not in {"con", "prn", "aux", "nul", "com1", "lpt1"}
    assert safe_name(name) == name, "making a kept name safe again changes nothing"


def test_a_long_name_keeps_its_extension_and_whole_characters() -> None:
    assert safe_name("n" * 300 + ".txt") == "n" * 116 + ".txt"
    accented = safe_name("é" * 200 + ".pdf")
    assert accented.endswith("é.pdf") and len(accented.encode()) <= MAX_NAME_BYTES
    assert accented.encode().decode("utf-8") == accented  # no character cut in half
    assert safe_name("a" * 50 + "." + "b" * 200) == ("a" * 50 + "." + "b" * 200)[:120]


def test_a_name_already_in_the_inbox_gets_a_number() -> None:
    assert unique_name("a.pdf", set()) == "a.pdf"
    assert unique_name("a.pdf", {"a.pdf"}) == "a-2.pdf"
    assert unique_name("a.pdf", {"a.pdf", "a-2.pdf"}) == "a-3.pdf"
    assert unique_name("README", {"README"}) == "README-2"
    long = safe_name("n" * 300 + ".txt")
    second = unique_name(long, {long})
    assert second != long and second.endswith("-2.txt")
    assert len(second.encode()) <= MAX_NAME_BYTES

"""A conversation's inbox over the API (GET /agent/conversations/{id}/files[/{name}]): its
own principal lists and downloads the files sent there, served as downloads a browser will
not render; another principal, or another conversation, gets 404; a symbolic link planted
in the inbox is neither listed nor followed; the history lists each message's files."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from agent_core.models.replay import Reply
from agent_core.tools.sandbox import conversation_dir, inbox_dir
from tests.integration import fixture_files as files
from tests.integration.conftest import GatewayFactory, Harness, api_key, bearer

ALICE, BOB = bearer("alice"), bearer("bob")
SECRET = b"the launch code is 0000"


def part(name: str, data: bytes, content_type: str | None = None) -> dict[str, Any]:
    return {"name": name, "data": base64.b64encode(data).decode(),
            **({"content_type": content_type} if content_type else {})}


async def sent(h: Harness, headers: dict[str, str], conversation: str,
               *parts: dict[str, Any], text: str = "keep these") -> dict[str, Any]:
    h.model.add(Reply("kept"))
    response = await h.client.post("/agent/run", headers=headers, json={
        "text": text, "conversation_id": conversation, "files": list(parts)})
    assert response.status == 200, await response.text()
    view: dict[str, Any] = await response.json()
    assert view["status"] == "answered", view
    return view


def inbox(h: Harness, conversation: str) -> Path:
    return inbox_dir(Path(h.settings.hermes_data_dir), conversation)


async def test_the_conversation_lists_and_serves_its_files_as_downloads(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[api_key("alice")])
    picture = files.png(40, 30)
    await sent(h, ALICE, "plans", part("secret.txt", SECRET),
               part("chart.png", picture, "application/pdf"),  # the claim is not believed
               part("page.html", b"<html><script>alert(1)</script></html>", "text/html"))
    base = "/agent/conversations/api:alice:plans/files"
    listing = await h.client.get(base, headers=ALICE)
    assert listing.status == 200
    found = {f["name"]: f for f in (await listing.json())["files"]}
    assert sorted(found) == ["chart.png", "page.html", "page.html.txt", "secret.txt"]
    assert found["chart.png"]["mime_type"] == "image/png" and found["chart.png"]["kind"] == \
        "image"
    assert found["secret.txt"]["size"] == len(SECRET)
    assert found["secret.txt"]["url"] == f"{base}/secret.txt"

    text = await h.client.get(found["secret.txt"]["url"], headers=ALICE)
    assert text.status == 200 and await text.read() == SECRET
    assert text.headers["Content-Type"] == "application/octet-stream"
    assert text.headers["Content-Disposition"].startswith('attachment; filename="secret.txt"')
    assert text.headers["X-Content-Type-Options"] == "nosniff"
    assert text.headers["Content-Security-Policy"] == "sandbox"
    page = await h.client.get(f"{base}/page.html", headers=ALICE)
    assert page.headers["Content-Type"] == "application/octet-stream"  # never text/html
    image = await h.client.get(f"{base}/chart.png", headers=ALICE)
    assert await image.read() == picture and image.headers["Content-Type"] == "image/png"
    assert image.headers["Content-Disposition"].startswith("attachment;")
    missing = await h.client.get(f"{base}/nothing.txt", headers=ALICE)
    assert missing.status == 404
    empty = await h.client.get("/agent/conversations/api:alice:quiet/files", headers=ALICE)
    assert (await empty.json())["files"] == []


async def test_another_principal_or_conversation_never_reaches_the_files(
        make_gateway: GatewayFactory) -> None:
    """Bob, with a valid key of his own, asks for Alice's files by her conversation's id,
    through his own conversation with a path that climbs out of it, and Alice's other
    conversation asks for them too: all 404, and nothing of the file comes back."""
    h = await make_gateway(hermes_api_keys=[api_key("alice"), api_key("bob")])
    await sent(h, ALICE, "plans", part("secret.txt", SECRET))
    await sent(h, BOB, "mine", part("bob.txt", b"bob's own"))
    attempts = [
        (BOB, "/agent/conversations/api:alice:plans/files"),
        (BOB, "/agent/conversations/api:alice:plans/files/secret.txt"),
        (BOB, "/agent/conversations/webchat:alice:plans/files/secret.txt"),
        (BOB, "/agent/conversations/api:bob:mine/files/..%2F..%2Fapi_alice_plans%2Finbox"
              "%2Fsecret.txt"),
        (BOB, "/agent/conversations/api:bob:mine/files/%2E%2E"),
        (ALICE, "/agent/conversations/api:alice:other/files/secret.txt"),
    ]
    for headers, path in attempts:
        response = await h.client.get(path, headers=headers)
        body = await response.read()
        assert response.status in (400, 404), (path, response.status)
        assert SECRET not in body, path
    other = await h.client.get("/agent/conversations/api:alice:other/files", headers=ALICE)
    assert (await other.json())["files"] == []
    own = await h.client.get("/agent/conversations/api:bob:mine/files", headers=BOB)
    assert [f["name"] for f in (await own.json())["files"]] == ["bob.txt"]
    anonymous = await h.client.get("/agent/conversations/api:alice:plans/files/secret.txt")
    assert anonymous.status == 401


async def test_a_symlink_planted_in_the_inbox_is_not_followed(
        make_gateway: GatewayFactory, tmp_path: Path) -> None:
    """A link in the inbox (left by anything that could write there) pointing at a file of
    the gateway's machine, or at another conversation's file, is neither listed nor
    served."""
    h = await make_gateway(hermes_api_keys=[api_key("alice"), api_key("bob")])
    await sent(h, ALICE, "plans", part("secret.txt", SECRET))
    await sent(h, BOB, "mine", part("bob.txt", b"bob's own"))
    outside = tmp_path / "server-secret.txt"
    outside.write_bytes(b"a secret of the gateway's machine")
    planted = inbox(h, "api:bob:mine")
    os.symlink(outside, planted / "notes.txt")
    os.symlink(inbox(h, "api:alice:plans") / "secret.txt", planted / "alice.txt")
    os.symlink(inbox(h, "api:alice:plans"), planted / "folder")
    base = "/agent/conversations/api:bob:mine/files"
    listing = await (await h.client.get(base, headers=BOB)).json()
    assert [f["name"] for f in listing["files"]] == ["bob.txt"]
    for name in ("notes.txt", "alice.txt", "folder", "folder%2Fsecret.txt"):
        response = await h.client.get(f"{base}/{name}", headers=BOB)
        body = await response.read()
        assert response.status == 404, (name, response.status)
        assert SECRET not in body and b"machine" not in body


async def test_the_history_lists_the_files_each_message_carried(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_max_files_mb_per_day=0.002)  # about 2 KB a day
    await sent(h, {}, "hist", part("notes.txt", b"hello"), part("photo.png", files.png()),
               part("big.txt", b"x" * 3000))
    response = await h.client.post("/agent/run", json={"text": "and this", "conversation_id":
                                                       "hist"})
    assert response.status == 200
    history = await (await h.client.get(
        "/agent/conversations/api:local:hist/messages")).json()
    first, answer, second, _ = history["messages"]
    kept, photo, refused = first["files"]
    assert kept == {"name": "notes.txt", "mime_type": "text/plain", "size": 5,
                    "kind": "document"}
    assert photo == {"name": "photo.png", "mime_type": "image/png", "size": len(files.png()),
                     "kind": "image"}
    assert refused["name"] == "big.txt" and refused["size"] == 3000
    assert "HERMES_MAX_FILES_MB_PER_DAY" in refused["note"]
    assert "files" not in answer and "files" not in second


async def test_principals_whose_names_run_together_never_share_a_folder(
        make_gateway: GatewayFactory) -> None:
    """``api:bob:x_y`` and ``api:bob_x:y`` were one folder on disk (both separators became
    ``_``): Bob, naming his conversation so, listed and read Bob X's files."""
    h = await make_gateway(hermes_api_keys=[api_key("bob"), api_key("bob_x")])
    await sent(h, bearer("bob_x"), "y", part("secret.txt", SECRET))
    mine = "/agent/conversations/api:bob:x_y/files"
    await sent(h, BOB, "x_y", part("bob.txt", b"mine"))
    listing = await h.client.get(mine, headers=BOB)
    assert [f["name"] for f in (await listing.json())["files"]] == ["bob.txt"]
    assert (await h.client.get(f"{mine}/secret.txt", headers=BOB)).status == 404
    theirs = await h.client.get("/agent/conversations/api:bob_x:y/files/secret.txt",
                                headers=bearer("bob_x"))
    assert await theirs.read() == SECRET


async def test_forgetting_a_conversation_deletes_its_files(
        make_gateway: GatewayFactory) -> None:
    h = await make_gateway(hermes_api_keys=[api_key("alice")])
    await sent(h, ALICE, "plans", part("secret.txt", SECRET))
    await sent(h, ALICE, "other", part("keep.txt", b"keep"))
    folder = conversation_dir(Path(h.settings.hermes_data_dir), "api:alice:plans")
    assert (folder / "inbox" / "secret.txt").exists()
    gone = await h.client.delete("/agent/conversations/api:alice:plans", headers=ALICE)
    assert gone.status == 200
    assert not folder.exists(), "the inbox and the tasks' sandboxes went with it"
    listing = await h.client.get("/agent/conversations/api:alice:plans/files", headers=ALICE)
    assert (await listing.json())["files"] == []
    assert (inbox(h, "api:alice:other") / "keep.txt").exists(), "only that conversation's"

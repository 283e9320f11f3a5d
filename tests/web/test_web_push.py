"""Pushes that reach a phone and answer from it: ``[notify] web`` links each push to its page
(ntfy opens it when tapped), ``[notify] buttons`` puts Allow once and Deny on an ntfy push of a
waiting session. A real engine, a real ``procession web`` and the test's own ntfy server; each
button pressed as the ntfy app presses it (its HTTP call, with its header and body), and
attacked: pressed twice, forged, sent from another site."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import httpx

from conftest import HANG_S, engine_on, until
from procession import Workspace
from procession.engine.notify import load
from support.models import ModelServer, Script, say, tool_call
from support.ntfy import Ntfy

from test_web import Served, _ended


async def test_a_push_links_to_its_request_and_its_buttons_answer_it_once(tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    ws = await Workspace.open(db)
    served = Served(db)
    phone = Ntfy()
    config = tmp_path / "config.toml"
    config.write_text(f'[notify]\npush = ["{phone.url}"]\nweb = "{served.address}/"\nbuttons = true\n')
    settings = load(config)
    assert settings.web == served.address and settings.buttons and not settings.problems
    secret = "s3cret-c0ntent"
    try:
        with contextlib.ExitStack() as models:
            sids = []
            for name in ("allowed", "denied"):  # each its own model, asking to write
                model = models.enter_context(ModelServer(Script(tool_call("data_write", {"path": "x", "content": secret}),
                                                                say("done"))))
                (tmp_path / name / "data").mkdir(parents=True)
                sid = (await ws.spawn(name, "dev", runner=f"openai:m@{model.url_v1}", cwd=str(tmp_path / name),
                                      permissions="ask")).sid
                await ws.bind(sid, "folder", str(tmp_path / name / "data"), mode="rw")
                sids.append(sid)
            async with engine_on(db, notify=settings):
                for sid in sids:
                    await ws.activate(sid)
                asked = await until(lambda: _both(ws, sids))
                pushes = await until(lambda: _pushed(phone, 2))
                by_sid = {sid: next(p for p in pushes if f"session {sid} " in p["message"]) for sid in sids}
                for sid, push in by_sid.items():
                    page = f"{served.address}/#request-{asked[sid]}"
                    assert push["headers"]["X-Click"] == page and push["message"].endswith(page)
                    shown = json.dumps(push)
                    assert secret not in shown  # nor the tool's input
                [view, allow, deny] = json.loads(by_sid[sids[0]]["headers"]["X-Actions"])
                assert view == {"action": "view", "label": "Open", "url": f"{served.address}/#request-{asked[sids[0]]}"}
                assert allow["label"] == "Allow once" and allow["url"] == f"{served.address}/api/button"
                token = allow["headers"]["X-Procession-Button"]
                assert token not in allow["url"] and token not in by_sid[sids[0]]["message"]
                with httpx.Client(timeout=HANG_S) as app:  # as the ntfy app calls: no cookie, no Origin
                    def press(button: dict[str, object], **headers: str) -> httpx.Response:
                        return app.request(str(button["method"]), str(button["url"]), content=str(button["body"]),
                                           headers={**button["headers"], **headers})  # type: ignore[dict-item]

                    assert press(allow, Origin="http://evil.example").status_code == 403
                    assert press({**allow, "headers": {"X-Procession-Button": "forged"}}).status_code == 409
                    pressed = press(allow)
                    assert pressed.status_code == 200, pressed.text
                    again = press(allow)
                    assert again.status_code == 409 and "no longer answer" in again.json()["error"]
                    assert press(deny).status_code == 409  # one token per push: spent by its first button
                    other = json.loads(by_sid[sids[1]]["headers"]["X-Actions"])[2]
                    assert press(other).status_code == 200  # the other push's Deny
                for sid in sids:
                    await until(lambda: _ended(ws, sid))
        assert (tmp_path / "allowed" / "data" / "x").read_text() == secret  # the tool ran
        assert not (tmp_path / "denied" / "data" / "x").exists()
        answers = [r for r in await ws.journal(limit=100) if r.call in ("allow", "deny")]
        assert sorted((r.call, r.who) for r in answers) == [("allow", "a push's button (web)"),
                                                              ("deny", "a push's button (web)")]
        with sqlite3.connect(db) as conn:  # the tokens are kept as their hashes only
            kept = [r[0] for r in conn.execute("SELECT token FROM answer_tokens")]
        assert len(kept) == 2 and token not in kept
    finally:
        phone.close()
        served.stop()
        await ws.close()


async def _both(ws: Workspace, sids: list[int]) -> dict[int, int] | None:
    found = {r.sid: r.id for r in await ws.pending(sids)}
    return found if len(found) == len(sids) else None


async def _pushed(phone: Ntfy, n: int) -> list[dict[str, object]] | None:
    waiting = [p for p in phone.got if "waits" in str(p["title"])]
    return waiting if len(waiting) >= n else None

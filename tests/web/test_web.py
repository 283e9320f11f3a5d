"""The web face (``procession web``), as a browser and an attacker reach it: a real server (the
CLI's own command, in its own process) on a real workspace with a real engine, spoken to over
HTTP. Pairing by the printed one-time link; a request waiting for an answer, allowed from the
page's API and journaled as the device's; and each way in tried as an attack: no cookie, a
foreign Host or Origin, no CSRF token, a replayed or expired link, a read-only device, a
revoked one (its open stream closed)."""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import HANG_S, engine_on, until
from procession import Workspace
from support.models import ModelServer, Script, say, tool_call


def made(db: Path) -> Path:
    """A new workspace at ``db`` (``procession web`` makes none)."""
    async def make() -> None:
        await (await Workspace.open(db)).close()

    asyncio.run(make())
    return db


class Served:
    """``procession web`` running on the workspace, its address, the link it printed and every
    line it printed before it served."""

    def __init__(self, db: Path | str, *more: str, within: Sequence[str] = ()) -> None:
        """``within``: what the command runs in (a network namespace's ``ip netns exec NS``)."""
        self.proc = subprocess.Popen([*within, sys.executable, "-m", "procession", "--db", str(db), "web", "--port", "0",
                                      *more], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.link = ""
        self.said: list[str] = []
        deadline = time.monotonic() + HANG_S
        for line in self.proc.stdout:
            self.said.append(line.rstrip("\n"))
            if "/pair#" in line:
                self.link = line.strip()
            if line.startswith("procession web: serving "):
                self.line = line
                self.address = line.split()[3]
                break
            assert time.monotonic() < deadline
        else:
            raise AssertionError(f"procession web did not start: {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.host = self.address.split("://", 1)[1]

    def client(self, verify: ssl.SSLContext | bool = True) -> httpx.Client:
        """A client of the page (``verify``: what it trusts over TLS)."""
        return httpx.Client(base_url=self.address, headers={"Origin": self.address}, timeout=HANG_S, verify=verify)

    def paired(self, link: str | None = None, verify: ssl.SSLContext | bool = True) -> tuple[httpx.Client, str]:
        """A client holding a device's cookie, and its CSRF token."""
        client = self.client(verify)
        made = client.post("/api/pair", json={"link": (link or self.link).split("#", 1)[1]})
        assert made.status_code == 200, made.text
        return client, client.get("/api/state").json()["csrf"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=HANG_S)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    server = Served(made(tmp_path / "ws.db"), "--pair", "phone")
    yield server
    server.stop()


def test_a_page_without_a_paired_device_gets_nothing_and_a_link_pairs_once(served: Served) -> None:
    anon = served.client()
    assert anon.get("/api/state").status_code == 401
    page = anon.get("/")
    assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    phone = served.client()
    made = phone.post("/api/pair", json={"link": served.link.split("#", 1)[1]})
    cookie = made.headers["set-cookie"].lower()
    assert made.status_code == 200 and cookie.startswith("procession_device=")
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    assert served.link.split("#", 1)[1] not in made.text  # the link's secret is not the device's
    state = phone.get("/api/state").json()
    assert state["device"] == {"name": "phone", "read_only": False} and state["requests"] == []
    again = served.client().post("/api/pair", json={"link": served.link.split("#", 1)[1]})
    assert again.status_code == 403 and "not valid" in again.json()["error"]  # a link is used once


def test_another_sites_request_is_refused_whatever_its_cookie(served: Served) -> None:
    phone, csrf = served.paired()
    rebound = phone.get("/api/state", headers={"Host": "evil.example:80"})
    assert rebound.status_code == 403  # DNS rebinding: the page of a name that resolves to 127.0.0.1
    foreign = phone.post("/api/call", json={"sid": 1, "call": "activate"},
                         headers={"Origin": "http://evil.example", "X-CSRF": csrf})
    assert foreign.status_code == 403 and "another site" in foreign.json()["error"]
    tokenless = phone.post("/api/call", json={"sid": 1, "call": "activate"})
    assert tokenless.status_code == 403 and "token" in tokenless.json()["error"]
    cross = phone.get("/api/state", headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403


async def test_a_waiting_request_is_answered_from_the_page_once_and_journaled_as_the_device(
        tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    ws = await Workspace.open(db)
    served = Served(db, "--pair", "phone")
    try:
        with ModelServer(Script(tool_call("data_write", {"path": "x", "content": "<script>alert(1)</script>"}),
                                say("written"))) as model:
            sid = (await ws.spawn("<b>careful</b>", "dev", runner=f"openai:m@{model.url_v1}", cwd=str(tmp_path),
                                  permissions="ask")).sid
            (tmp_path / "data").mkdir()
            await ws.bind(sid, "folder", str(tmp_path / "data"), mode="rw")
            async with engine_on(db):
                await ws.activate(sid)
                phone, csrf = served.paired()
                cookie = phone.cookies["procession_device"]
                state = await until(lambda: _waiting(phone))
                [asked] = state["requests"]
                assert "(<b>careful</b>)" in asked["about"] and asked["tool"] == "data_write: x"  # data, as given
                assert asked["rule"] == "data_write"  # what Allow always would make
                assert "<script>" in asked["input"]  # JSON text: the page puts it in as text
                done = phone.post("/api/answer", json={"request": asked["id"], "answer": "allow"},
                                  headers={"X-CSRF": csrf})
                assert done.status_code == 200, done.text
                late = phone.post("/api/answer", json={"request": asked["id"], "answer": "deny", "why": "late"},
                                  headers={"X-CSRF": csrf})
                assert late.status_code == 409 and "answered" in late.json()["error"]
                await until(lambda: _ended(ws, sid))
                sent = phone.post("/api/call", json={"sid": sid, "call": "send", "text": "from the phone"},
                                  headers={"X-CSRF": csrf})
                assert sent.status_code == 200, sent.text
                assert (await ws.history(sid))[-1].content == "from the phone"
                wider = phone.post("/api/call", json={"sid": sid, "call": "merge"}, headers={"X-CSRF": csrf})
                assert wider.status_code == 400  # a call the page does not offer
        rows = await ws.journal(limit=50)
        [allowed] = [r for r in rows if r.call == "allow"]
        [told] = [r for r in rows if r.call == "send" and r.actor == "web"]
        assert allowed.who == told.who == "phone (web)"
        journaled = json.dumps([r.to_json() for r in rows])
        assert served.link.split("#")[1] not in journaled and cookie not in journaled and csrf not in journaled
    finally:
        served.stop()
        await ws.close()


async def _waiting(client: httpx.Client) -> dict[str, Any] | None:
    state: dict[str, Any] = client.get("/api/state").json()
    return state if state["requests"] else None


async def _ended(ws: Workspace, sid: int) -> bool:
    runs = await ws.runs(sid)
    return bool(runs) and all(r.ended for r in runs)


def test_a_read_only_device_reads_and_a_revoked_one_is_refused_its_stream_closed(tmp_path: Path) -> None:
    db = made(tmp_path / "ws.db")
    served = Served(db, "--pair", "tablet", "--read-only")
    try:
        tablet, csrf = served.paired()
        assert tablet.get("/api/state").json()["device"]["read_only"] is True
        refused = tablet.post("/api/call", json={"sid": 1, "call": "activate"}, headers={"X-CSRF": csrf})
        assert refused.status_code == 403 and "may only read" in refused.json()["error"]
        assert tablet.post("/api/looked", headers={"X-CSRF": csrf}).status_code == 200  # its own: what it saw
        with tablet.stream("GET", "/api/events") as events:
            lines = events.iter_lines()
            assert next(lines) == "event: state"
            listed = subprocess.run([sys.executable, "-m", "procession", "--db", str(db), "web", "--devices",
                                     "--json"], capture_output=True, text=True, check=True)
            [device] = json.loads(listed.stdout)
            subprocess.run([sys.executable, "-m", "procession", "--db", str(db), "web", "--revoke",
                            str(device["id"])], capture_output=True, text=True, check=True)
            assert "event: revoked" in list(lines)  # and the stream ends
        assert tablet.get("/api/state").status_code == 401
    finally:
        served.stop()


def test_an_expired_link_pairs_nothing(tmp_path: Path) -> None:
    served = Served(made(tmp_path / "ws.db"), "--pair", "late", "--minutes", "0.01")
    try:
        time.sleep(1.0)
        late = served.client().post("/api/pair", json={"link": served.link.split("#", 1)[1]})
        assert late.status_code == 403 and "expired" in late.json()["error"]
    finally:
        served.stop()


async def test_on_a_postgresql_workspace_the_page_shows_every_hosts_sessions(
        postgres: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = str(postgres.workspace())
    ws = await Workspace.open(url)
    try:
        for host in ("laptop", "server"):  # each session on the host that spawned it
            monkeypatch.setenv("PROCESSION_HOST", host)
            await ws.spawn(f"on-{host}", "dev", cwd=str(tmp_path))
    finally:
        await ws.close()
    served = Served(url, "--pair", "phone")
    try:
        phone, _ = served.paired()
        sessions = phone.get("/api/state").json()["sessions"]
        hosts = {s["name"]: dict((title, "".join(text for text, _ in parts)) for title, parts in s["cells"])["HOST"]
                 for s in sessions}
        assert hosts == {"on-laptop": "laptop", "on-server": "server"}
    finally:
        served.stop()

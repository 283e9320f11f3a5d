"""The web face in a real browser (Playwright driving Debian's Chromium, headless), as a person
uses it on a phone (390x844) and a desktop (1280x800): paired from the printed link, a session
waiting in a real run, allowed with a tap and its tool run; another denied with a reason the
model gets; a second tab answering the same request told it was answered; a session's name and
a tool's input holding markup shown as the text they are (no script runs). With
``PROCESSION_WEB_SCREENSHOTS=screenshots`` the first test also takes the README's pictures of
the page at both sizes."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import HANG_S, engine_on, until
from procession import State, Workspace
from procession.web.app import TICK_S
from support.agent_clis import AgentSandbox, session_env
from support.models import ModelServer, Script, say, shell, tool_call
from support.runs import finished

from test_web import Served, _ended

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HOSTILE = '<img src=x onerror="window.pwned=1">'
#: Where the pictures of the page go, when set: ``PROCESSION_WEB_SCREENSHOTS=screenshots pytest tests/web``.
SHOTS = "PROCESSION_WEB_SCREENSHOTS"


@pytest.fixture
async def browser() -> Any:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        async_playwright = None  # type: ignore[assignment]
    if async_playwright is None or CHROMIUM is None:
        why = "the browser tests need Playwright (pip) and Chromium (Debian: apt-get install chromium)"
        if os.environ.get("PROCESSION_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    async with async_playwright() as play:
        launched = await play.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield launched
        await launched.close()


async def paired(opener: Any, served: Served, **options: Any) -> Any:
    """A page of ``opener`` (a browser, or one of its contexts; ``options``: its viewport)
    paired from the printed link, on the page of what needs you (the link's secret gone from
    the address bar)."""
    page = await opener.new_page(**options)
    await page.goto(served.link)
    await page.get_by_role("button", name="Pair this device").click()
    await page.wait_for_url(f"{served.address}/")
    assert "#" not in page.url
    return page


async def _asking(ws: Workspace, tmp_path: Path, name: str, url: str) -> int:
    sid = (await ws.spawn(name, "dev", runner=f"openai:m@{url}", cwd=str(tmp_path), permissions="ask")).sid
    folder = tmp_path / "data"  # the openai: loop's data tools write in a binding of this name
    folder.mkdir()
    await ws.bind(sid, "folder", str(folder), mode="rw")
    return sid


@pytest.mark.parametrize("size", [(390, 844), (1280, 800)], ids=["phone", "desktop"])
async def test_pair_then_allow_from_the_page_and_the_tool_runs(browser: Any, tmp_path: Path,
                                                               size: tuple[int, int]) -> None:
    db = tmp_path / "ws.db"
    ws = await Workspace.open(db)
    served = Served(db, "--pair", "phone")
    try:
        with ModelServer(Script(tool_call("data_write", {"path": "out.txt", "content": HOSTILE}),
                                say("written"))) as model:
            sid = await _asking(ws, tmp_path, HOSTILE, model.url_v1)
            async with engine_on(db):
                page = await paired(browser, served, viewport={"width": size[0], "height": size[1]})
                await ws.activate(sid)
                card = page.locator("li[data-request]")
                await card.wait_for(timeout=HANG_S * 1000)
                assert HOSTILE in await card.inner_text()  # the markup is text
                assert await page.evaluate("window.pwned") is None
                if os.environ.get(SHOTS):  # the README's pictures of the page (see the module's docstring)
                    await page.screenshot(path=str(Path(os.environ[SHOTS]) / f"web-{size[0]}x{size[1]}.png"))
                await page.get_by_role("button", name="Allow once").click()
                await until(lambda: _ended(ws, sid))
                assert (tmp_path / "data" / "out.txt").read_text() == HOSTILE  # the tool ran
                await page.close()
    finally:
        served.stop()
        await ws.close()


async def test_a_deny_with_a_reason_reaches_the_model_and_a_second_tab_is_told(browser: Any, tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    ws = await Workspace.open(db)
    served = Served(db, "--pair", "phone")
    try:
        with ModelServer(Script(tool_call("data_write", {"path": "x", "content": "y"}), say("understood"))) as model:
            sid = await _asking(ws, tmp_path, "careful", model.url_v1)
            async with engine_on(db):
                context = await browser.new_context(viewport={"width": 390, "height": 844})
                first = await paired(context, served)
                second = await context.new_page()  # the same device, a second tab
                await second.goto(served.address)
                await ws.activate(sid)
                for tab in (first, second):
                    await tab.locator("li[data-request]").wait_for(timeout=HANG_S * 1000)
                await first.get_by_placeholder("why (for a deny)").fill("not on a Sunday")
                await first.get_by_role("button", name="Deny").click()
                await second.get_by_role("button", name="Allow once").click()
                await second.get_by_text("answered").first.wait_for(timeout=HANG_S * 1000)
                await until(lambda: _ended(ws, sid))
                assert "not on a Sunday" in " ".join(model.requests[-1].results().values())
                await context.close()
    finally:
        served.stop()
        await ws.close()


async def test_claude_code_asks_and_a_phone_answers_follows_the_session_and_cancels_it_after_asking(
        browser: Any, claude_sandbox: AgentSandbox, model_server: ModelServer, engine: Any, live: Workspace,
        db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real Claude Code against the scripted model, answered from a phone: a shell command
    allowed with a tap runs; a message sent from the page starts the next turn, whose command
    is denied with a reason the model gets. The session's page shows its last messages and
    run; the run finished since the phone looked is listed until it says Seen; Cancel asks
    first (declined: nothing happens)."""
    model_server.script.add(shell("echo hi > web.txt"), say("Done."), shell("rm -f web.txt"), say("Understood."))
    settings, passed = session_env([claude_sandbox], monkeypatch.setenv)
    sid = (await live.spawn("phoned", "dev", runner="claude:", cwd=str(claude_sandbox.workdir), env=settings,
                            passed=passed, permissions="ask")).sid
    await live.send(sid, "write the file")
    served = Served(db, "--pair", "phone")
    try:
        page = await paired(browser, served, viewport={"width": 390, "height": 844})
        await live.activate(sid)
        card = page.locator("li[data-request]")
        await card.wait_for(timeout=HANG_S * 1000)
        assert "Bash: echo hi > web.txt" in await card.inner_text()
        await page.get_by_role("button", name="Allow once").click()
        await until(lambda: finished(live, sid, 1))
        assert (claude_sandbox.workdir / "web.txt").read_text() == "hi\n"  # the tool ran

        finished_list = page.locator("#finished li")
        await finished_list.first.wait_for(timeout=HANG_S * 1000)
        assert f"session {sid} (phoned): ok" in await finished_list.first.inner_text()
        await page.get_by_role("button", name="Seen").click()
        await page.locator("#finished-box").wait_for(state="hidden", timeout=HANG_S * 1000)

        await page.get_by_role("link", name=f"{sid} phoned").first.click()  # the session's own page
        await page.wait_for_url(f"{served.address}/#session-{sid}")
        messages = page.locator("#detail-messages")
        await page.locator("#detail-messages", has_text="Done.").wait_for(timeout=HANG_S * 1000)
        assert "write the file" in await messages.inner_text()
        assert "ok" in await page.locator("#detail-run").inner_text()

        await page.get_by_placeholder("a message to this session").fill("now remove it")
        await page.get_by_role("button", name="Send").click()
        await until(lambda: _last_is(live, sid, "now remove it"))
        await page.locator("#detail-calls").get_by_role("button", name="activate").click()
        await card.wait_for(timeout=HANG_S * 1000)
        await page.get_by_placeholder("why (for a deny)").fill("keep it, it is the proof")
        await page.get_by_role("button", name="Deny").click()
        await until(lambda: finished(live, sid, 2))
        assert (claude_sandbox.workdir / "web.txt").exists()  # denied: not removed
        last = model_server.requests[-1]
        assert "keep it, it is the proof" in " ".join([*last.results().values(), *last.texts("user")])

        page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.dismiss()))
        await page.locator("#detail-calls").get_by_role("button", name="cancel").click()
        await asyncio.sleep(2 * TICK_S)
        assert (await live.info(sid)).state is not State.TERMINATED  # declined: nothing done
        page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
        await page.locator("#detail-calls").get_by_role("button", name="cancel").click()
        await until(lambda: _terminated(live, sid))
        await page.locator("#detail-state", has_text="terminated").wait_for(timeout=HANG_S * 1000)
        journaled = [r for r in await live.journal(sid) if r.actor == "web"]
        assert {r.call for r in journaled} >= {"allow", "deny", "send", "activate", "cancel"}
        assert {r.who for r in journaled} == {"phone (web)"}
        await page.close()
    finally:
        served.stop()


async def _last_is(ws: Workspace, sid: int, text: str) -> bool:
    return (await ws.history(sid))[-1].content == text


async def _terminated(ws: Workspace, sid: int) -> bool:
    return (await ws.info(sid)).state is State.TERMINATED


async def test_many_pages_of_one_browser_share_one_stream_and_each_answers(browser: Any, tmp_path: Path) -> None:
    """A browser keeps six connections to a server at most (HTTP/1.1), and a live page holds one:
    eight pages of one browser share one stream (the page holding the lock hands each state to
    the others), so every page is live and an answer from the eighth goes through; when the page
    holding the stream closes, another takes it over."""
    db = tmp_path / "ws.db"
    ws = await Workspace.open(db)
    served = Served(db, "--pair", "desk")
    try:
        with ModelServer(Script(tool_call("data_write", {"path": "out.txt", "content": "many"}), say("ok"))) as model:
            sid = await _asking(ws, tmp_path, "tabs", model.url_v1)
            async with engine_on(db):
                context = await browser.new_context(viewport={"width": 1280, "height": 800})
                first = await paired(context, served)
                pages = [first]
                for _ in range(7):
                    page = await context.new_page()
                    await page.goto(served.address)
                    pages.append(page)
                await ws.activate(sid)
                for page in pages:
                    await page.locator("li[data-request]").wait_for(timeout=HANG_S * 1000)
                await first.close()  # the page holding the stream, most likely: another takes it
                await ws.spawn("later", "dev", cwd=str(tmp_path))
                await pages[-1].get_by_role("link", name="2 later").wait_for(timeout=HANG_S * 1000)
                await pages[-1].get_by_role("button", name="Allow once").click()
                await until(lambda: _ended(ws, sid))
                assert (tmp_path / "data" / "out.txt").read_text() == "many"
                await context.close()
    finally:
        served.stop()
        await ws.close()

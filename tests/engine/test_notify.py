"""Notifications by reason: a hook command (``[notify]`` of the config file) receives exactly one
notification per event — a session that waits for an answer, a failed run, a finished run — with
the session, the reason and the text in its environment; a quiet session, or a session of a
quiet agent, sends none."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import engine_on, until
from procession import Workspace
from procession.model.errors import InvalidArgument
from procession.engine.notify import Settings, load
from support.desktop import desktop
from support.models import ModelServer, Script, say, tool_call

HOOK = ("import json, os, sys; open(sys.argv[1], 'a').write(json.dumps({k: os.environ[k] for k in"
        " ('PROCESSION_SID', 'PROCESSION_REASON', 'PROCESSION_TEXT', 'PROCESSION_AGENT')}) + '\\n')")


def received(log: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_one_notification_per_reason_and_none_from_a_quiet_session(live: Workspace, db: Path,
                                                                          tmp_path: Path) -> None:
    log = tmp_path / "notified.jsonl"
    settings = Settings(command=(sys.executable, "-c", HOOK, str(log)))
    ok = (await live.spawn("fine", "a", runner="command:true", cwd=str(tmp_path))).sid
    bad = (await live.spawn("broken", "a", runner="command:false", cwd=str(tmp_path))).sid
    hush = (await live.spawn("hushed", "a", runner="command:false", cwd=str(tmp_path))).sid
    await live.set(hush, quiet=True)
    muted = (await live.spawn("muted", "q", runner="command:false", cwd=str(tmp_path))).sid
    assert (await live.set(agent="q", quiet=True)).changed == ("quiet",)  # its sessions, then and later
    assert (await live.show(muted)).agent_quiet
    with ModelServer(Script(tool_call("data_write", {"path": "x", "content": "x"}))) as model:
        asking = (await live.spawn("careful", "b", runner=f"openai:m@{model.url_v1}", cwd=str(tmp_path),
                                   permissions="ask")).sid
        (tmp_path / "data").mkdir()
        await live.bind(asking, "folder", str(tmp_path / "data"), mode="rw")
        async with engine_on(db, notify=settings):
            for sid in (ok, bad, hush, muted, asking):
                await live.activate(sid)
            await until(lambda: len(received(log)) >= 3)
            request = (await until(lambda: live.pending([asking])))[0]
            await live.deny(request.id, why="no")
            await until(lambda: [r for r in received(log) if r["PROCESSION_SID"] == str(asking)
                                 and r["PROCESSION_REASON"] == "finished"])
    got = sorted((int(r["PROCESSION_SID"]), r["PROCESSION_REASON"]) for r in received(log))
    assert got == sorted([(ok, "finished"), (bad, "failed"), (asking, "waiting"), (asking, "finished")])
    waiting = next(r for r in received(log) if r["PROCESSION_REASON"] == "waiting")
    assert "waits for you" in waiting["PROCESSION_TEXT"] and "data_write" in waiting["PROCESSION_TEXT"]
    assert waiting["PROCESSION_AGENT"] == "b"


async def test_an_agent_has_only_quiet_to_set(live: Workspace, tmp_path: Path) -> None:
    await live.spawn("one", "q", runner="command:true", cwd=str(tmp_path))
    with pytest.raises(InvalidArgument, match="only quiet to set; timeout is each session's own"):
        await live.set(agent="q", timeout=5)
    with pytest.raises(InvalidArgument, match="no agent nobody"):
        await live.set(agent="nobody", quiet=True)
    with pytest.raises(InvalidArgument, match="a session, or --agent"):
        await live.set(quiet=True)
    await live.set(agent="q", quiet=True)
    with pytest.raises(InvalidArgument, match="already quiet"):
        await live.set(agent="q", quiet=True)
    assert (await live.set(agent="q", quiet=False)).agent == "q"


def test_the_config_file_names_the_command_and_a_mistake_sends_nothing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)  # no desktop session
    path = tmp_path / "config.toml"
    path.write_text('theme = "paper"\n[notify]\ncommand = "notify-send procession"\nreasons = ["waiting"]\n')
    assert load(path) == Settings(("notify-send", "procession"), frozenset({"waiting"}))
    path.write_text('[notify]\ncommand = ["x"]\nreasons = ["everything"]\n')
    found = load(path)
    assert not found.command and "no notifications" in found.problems[0]
    assert load(tmp_path / "none.toml") == Settings()
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nowhere")  # a desktop session: on unless said
    assert load(tmp_path / "none.toml") == Settings(desktop=True)
    path.write_text('[notify]\ndesktop = false\n')
    assert load(path) == Settings()
    path.write_text('[notify]\ndesktop = "yes"\n')
    assert "desktop (true or false)" in load(path).problems[0]


async def test_where_a_desktop_session_exists_it_shows_one_notification_per_reason(
        live: Workspace, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real D-Bus session bus with a notification service on it (``support.desktop``): with
    no config at all, the engine shows each event there, through ``desktop-notifier``."""
    ok = (await live.spawn("fine", "a", runner="command:true", cwd=str(tmp_path))).sid
    bad = (await live.spawn("broken", "a", runner="command:false", cwd=str(tmp_path))).sid
    hush = (await live.spawn("hushed", "a", runner="command:false", cwd=str(tmp_path))).sid
    await live.set(hush, quiet=True)
    async with desktop(tmp_path) as (address, service):
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
        settings = load(tmp_path / "none.toml")
        assert settings.desktop and not settings.command
        async with engine_on(db, notify=settings):
            for sid in (ok, bad, hush):
                await live.activate(sid)
            await until(lambda: all_ended(live, (ok, bad, hush)))
            await until(lambda: len(service.shown) >= 2)
    assert sorted(service.shown) == [
        ("Procession", "Procession: a run failed", f"session {bad} (broken): its run failed"),
        ("Procession", "Procession: a run finished", f"session {ok} (fine) finished a run")]


async def all_ended(ws: Workspace, sids: tuple[int, ...]) -> bool:
    for sid in sids:
        if not [r for r in await ws.runs(sid) if r.ended]:
            return False
    return True

"""Notifications by reason: a hook command (``[notify]`` of the config file) receives exactly one
notification per event — a session that waits for an answer, a failed run, a finished run — with
the session, the reason and the text in its environment; a quiet session, or a session of a
quiet agent, sends none."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import engine_on, until
from procession import Workspace
from procession.model.errors import InvalidArgument
from procession.engine.notify import Settings, load
from procession.present import results
from support.desktop import desktop
from support.hooks import configured, hooked, notified
from support.models import ModelServer, Script, say, tool_call
from support.ntfy import Ntfy

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
    assert load(path) == Settings(("/bin/sh", "-c", "notify-send procession", "procession"), frozenset({"waiting"}))
    path.write_text('[notify]\ncommand = ["notify-send", "procession"]\ndetail = "input"\n')
    assert load(path) == Settings(("notify-send", "procession"), detail="input")
    path.write_text('[notify]\ncommand = "x"\ndetail = "everything"\n')
    assert "detail (one of tool, program, input)" in load(path).problems[0]
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
    path.write_text('[notify]\nweb = "https://phone.example:8767/"\nbuttons = true\n')
    assert load(path) == Settings(web="https://phone.example:8767", buttons=True, desktop=True)
    for wrong in ('web = "phone.example:8767"', 'web = "https://phone.example/x?y"', 'buttons = true'):
        path.write_text(f'[notify]\n{wrong}\n')  # not a site; a page of one; buttons with nowhere to answer
        assert "web (the web face's address, http(s)://host:port)" in load(path).problems[0], wrong


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


async def test_five_sessions_waiting_at_once_send_five_notifications_each_with_its_request(
        live: Workspace, db: Path, tmp_path: Path) -> None:
    """Five ``openai:`` sessions whose agents ask at once (the engine itself makes each
    ``ask``): exactly five notifications, each naming its own request and the workspace, and
    none holding the tool's input (the default: the tool, and a shell command's program)."""
    log = tmp_path / "notified"
    settings = hooked(tmp_path, log)
    (tmp_path / "data").mkdir()
    asking = tool_call("data_write", {"path": "x", "content": "a secret"})
    with ModelServer(Script(*[asking] * 5, *[say("ok")] * 5)) as model:
        sids = []
        for n in range(5):
            sids.append((await live.spawn(f"careful-{n}", "b", runner=f"openai:m@{model.url_v1}", cwd=str(tmp_path),
                                          permissions="ask")).sid)
            await live.bind(sids[-1], "folder", str(tmp_path / "data"), mode="rw")
        async with engine_on(db, slots=5, notify=settings):
            for sid in sids:
                await live.activate(sid)
            asked = await until(lambda: pending_all(live, 5))
            await until(lambda: len(notified(log)) >= 5)
            for request in asked:
                await live.deny(request.id, why="no")
            await until(lambda: all_ended(live, tuple(sids)))
    got = notified(log)
    assert sorted(int(n.request) for n in got) == sorted(r.id for r in asked)
    by_request = {r.id: (r.sid, r.session) for r in asked}
    for n in got:
        assert (n.reason, n.db) == ("waiting", str(db))
        assert n.text.startswith("session {} ({}) ".format(*by_request[int(n.request)]))
        assert n.text.endswith("waits for you: its agent asks to use data_write") and "secret" not in n.text


async def pending_all(ws: Workspace, n: int) -> Any:
    found = await ws.pending()
    return found if len(found) >= n else None


@pytest.mark.parametrize("command", [["/nowhere/hook", "--from", "procession"], "no-such-hook-anywhere --from it"])
async def test_a_command_that_cannot_start_is_said_once_in_the_log_and_to_the_monitor(
        live: Workspace, db: Path, tmp_path: Path, command: str | list[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """A program that is not there, named as a list of words (it cannot be started) or in a
    line of shell (the shell says it is not found): three notifications, one problem said,
    in the engine's log (``procession run`` prints it) and in the journal, where the monitor
    reads what the engine did by itself (``restarts``)."""
    settings = configured(tmp_path, command)
    sids = [(await live.spawn(f"fine-{n}", "a", runner="command:true", cwd=str(tmp_path))).sid for n in range(3)]
    with caplog.at_level(logging.WARNING, logger="procession.notify"):
        async with engine_on(db, notify=settings):
            for sid in sids:
                await live.activate(sid)
            await until(lambda: all_ended(live, tuple(sids)))
    said = [r.getMessage() for r in caplog.records if r.name == "procession.notify"]
    program = command[0] if isinstance(command, list) else command.split()[0]
    assert len(said) == 1 and "cannot start" in said[0] and program in said[0], said
    _, told = await live.restarts(0)
    assert [results.restarted(entry, "?") for entry in told] == [said[0]]


async def test_a_command_that_outlasts_the_engines_look_for_orphans_is_left_to_finish(
        live: Workspace, db: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A notify command runs in a session of its own, as a step's orphan would: the engine's
    reaper, looking every ``SAMPLE_S``, leaves it to end by itself (it was killed, exit -9)."""
    from procession.engine.engine import SAMPLE_S

    done = tmp_path / "done"
    settings = Settings(command=(sys.executable, "-c", f"import time; time.sleep({SAMPLE_S * 2.5});"
                                 f" open({str(done)!r}, 'w').write('ok')"))
    sid = (await live.spawn("fine", "a", runner="command:true", cwd=str(tmp_path))).sid

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "procession.notify"]

    with caplog.at_level(logging.WARNING, logger="procession.notify"):
        async with engine_on(db, notify=settings):
            await live.activate(sid)
            await until(lambda: done.exists() or said())
    assert done.exists() and not said(), said()


async def test_pushes_reach_a_phones_service_once_per_event_without_the_tools_input(
        live: Workspace, db: Path, tmp_path: Path) -> None:
    """``[notify] push``: the same notices, through Apprise, to an ntfy server: one push per
    event, naming the session and the tool, never what the tool was given (a push leaves the
    machine); HTML in a session's name arrives as the text it is."""
    phone = Ntfy()
    path = tmp_path / "config.toml"
    path.write_text(f'[notify]\npush = ["{phone.url}"]\n')
    settings = load(path)
    assert settings.push == (phone.url,) and not settings.problems
    ok = (await live.spawn("<b>fine</b>", "a", runner="command:true", cwd=str(tmp_path))).sid
    bad = (await live.spawn("broken", "a", runner="command:false", cwd=str(tmp_path))).sid
    secret = "s3cret-c0ntent"
    try:
        with ModelServer(Script(tool_call("data_write", {"path": "x", "content": secret}))) as model:
            asking = (await live.spawn("careful", "b", runner=f"openai:m@{model.url_v1}", cwd=str(tmp_path),
                                       permissions="ask")).sid
            (tmp_path / "data").mkdir()
            await live.bind(asking, "folder", str(tmp_path / "data"), mode="rw")
            async with engine_on(db, notify=settings):
                for sid in (ok, bad, asking):
                    await live.activate(sid)
                request = (await until(lambda: live.pending([asking])))[0]
                await until(lambda: len(phone.got) >= 3)
                await live.deny(request.id, why="no")
                await until(lambda: len(phone.got) >= 4)
    finally:
        phone.close()
    titles = sorted(m["title"] for m in phone.got)
    assert titles == sorted(["Procession: a run finished", "Procession: a run failed",
                             "Procession: a session waits for you", "Procession: a run finished"])
    waiting = next(m for m in phone.got if "waits" in m["title"])
    assert f"session {asking} (careful)" in waiting["message"] and "data_write" in waiting["message"]
    assert all(secret not in json.dumps(m) for m in phone.got)
    named = next(m for m in phone.got if f"session {ok} " in m["message"])
    assert "(<b>fine</b>)" in named["message"]  # as it is: the service shows text


async def test_a_push_a_service_refuses_is_said_once_and_an_unknown_one_when_the_config_is_read(
        live: Workspace, db: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[notify]\npush = ["nosuch://TOKEN-never-shown@host"]\n')
    found = load(path)
    assert not found.push and "'nosuch://…' is no service Apprise knows" in found.problems[0]
    assert "TOKEN" not in found.problems[0]
    down = Ntfy(status=500)
    path.write_text(f'[notify]\npush = "{down.url}"\n')
    sids = [(await live.spawn(f"fine-{n}", "a", runner="command:true", cwd=str(tmp_path))).sid for n in range(3)]
    try:
        with caplog.at_level(logging.WARNING, logger="procession.notify"):
            async with engine_on(db, notify=load(path)):
                for sid in sids:
                    await live.activate(sid)
                await until(lambda: len(down.got) >= 3)
                await until(lambda: [r for r in caplog.records if r.name == "procession.notify"])
    finally:
        down.close()
    said = [r.getMessage() for r in caplog.records if r.name == "procession.notify"]
    assert len(said) == 1 and "a push was not taken" in said[0]

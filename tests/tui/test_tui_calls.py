"""The calls the monitor makes from the palette and the action menu; every call of the table
is reachable from the keyboard, the action menu and the palette."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from textual.widgets import Input, OptionList, RadioButton, RadioSet, Static

from conftest import until
from procession import Workspace
from procession.model.calls import USER_CALLS
from procession.present import lines
from procession.tui.calls import FLOWS
from procession.tui.detail import Detail
from procession.tui.dialogs import ActionMenu, Form
from support.hosts import spawn_on, start_engine, stop
from support.monitor import answer, line_of, to


async def choose(pilot: Any, app: Any, option: str) -> None:
    await until(lambda: isinstance(app.screen, ActionMenu))
    options = app.screen.query_one(OptionList)
    options.highlighted = [o.id for o in options._options].index(option)
    await pilot.press("enter")
    await pilot.pause()


async def call(pilot: Any, app: Any, name: str) -> None:
    app.screen.action_call(name)
    await pilot.pause()


async def test_every_call_of_the_table_is_reachable_by_key_menu_and_palette(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        await ws.spawn("one", "hr")
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await until(lambda: app.loaded)
        keys = app.keys()
        assert set(FLOWS) == {c.value for c in USER_CALLS} | {"sampling"}  # a call's own flow, and more
        for name in FLOWS:
            assert keys[name][0], f"{name} has no key"
        await pilot.press("k")
        await until(lambda: isinstance(app.screen, ActionMenu))
        assert {choice.id for choice in app.screen.choices} == set(FLOWS)
        await pilot.press("escape")
        from procession.tui.app import CallCommands

        provider = CallCommands(app.main)
        titles = [title for _, title, _ in provider._commands()]
        for name in FLOWS:  # those that apply to a sleeping session, or make a new one
            if app.main.applies(name):
                assert any(title.startswith(FLOWS[name].title) for title in titles), name


async def test_spawn_load_priority_memory_bind_and_trigger_from_the_menu(tmp_path: Path, monitor: Any,
                                                                         monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "ws.db"
    ws = await Workspace.open(db)
    first = (await ws.spawn("first", "hr")).sid
    await ws.save(first, file=str(tmp_path / "first.json"))
    app = await monitor(db)
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(lambda: app.loaded)
            await call(pilot, app, "spawn")
            await answer(pilot, app, "second", "docs", "builtin:echo", str(tmp_path))
            await until(lambda: _named(ws, "second"))
            second = (await _named(ws, "second")).id
            assert (await ws.info(second)).agent == "docs" and app.table.cursor_key == second
            await call(pilot, app, "nice")
            await answer(pilot, app, "7")
            await call(pilot, app, "memory")
            await choose(pilot, app, "set")
            await answer(pilot, app, "month", '"2026-11"')
            await call(pilot, app, "bind")
            await answer(pilot, app, "folder", ".")
            await call(pilot, app, "trigger")
            await choose(pilot, app, "add")
            await answer(pilot, app, 'cron "0 9 1 * *"')
            await until(lambda: _has_trigger(ws, second))
            shown = await ws.show(second)
            assert shown.info.priority == 7 and shown.memory == {"month": "2026-11"}
            assert [r.uri for r in shown.resources] == [str(tmp_path)]
            assert [lines.trigger_label(t) for t in shown.info.triggers] == ["cron 0 9 1 * *"]
            await call(pilot, app, "memory")
            await choose(pilot, app, "del:month")
            await call(pilot, app, "trigger")
            await choose(pilot, app, str(shown.info.triggers[0].id))
            await call(pilot, app, "unbind")
            await choose(pilot, app, str(shown.resources[0].id))
            await call(pilot, app, "load")  # no checkpoint to offer: straight to the file
            await answer(pilot, app, "first.json")
            await until(lambda: _count(ws, 3))
            shown = await ws.show(second)
            assert shown.memory == {} and shown.info.triggers == () and shown.resources == ()
            loaded = max(s.id for s in await ws.ps())
            assert not (await ws.info(loaded)).armed
            await call(pilot, app, "set")  # settings after spawn: name, goal, system prompt, timeout, window
            await until(lambda: isinstance(app.screen, Form))
            await answer(pilot, app, "second, renamed", "a goal", "be brief", "30", "64000", "5")
            await until(lambda: _named(ws, "second, renamed"))
            info = await ws.info(loaded)
            detail = await ws.show(loaded)
            assert (info.goal, detail.system, info.timeout, info.context_window) == ("a goal", "be brief", 30, 64000)
    finally:
        await ws.close()


async def _named(ws: Workspace, name: str) -> Any:
    return next((s for s in await ws.ps() if s.name == name), None)


async def _has_trigger(ws: Workspace, sid: int) -> bool:
    return bool((await ws.info(sid)).triggers)


async def _count(ws: Workspace, n: int) -> bool:
    return len(await ws.ps()) == n


async def test_the_sampling_form_sets_what_set_does_on_the_command_line(tmp_path: Path, monitor: Any, cli: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("loop", "a", runner="openai:m@http://127.0.0.1:9/v1")).sid
        twin = (await ws.spawn("twin", "a", runner="openai:m@http://127.0.0.1:9/v1")).sid
        other = (await ws.spawn("echo", "a", runner="builtin:echo")).sid
    app = await monitor(db)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(lambda: app.loaded and sid in app.table.keys)
        assert app.table.move_to(other)
        await pilot.pause()
        assert not app.main.applies("sampling")  # greyed for a runner that sends no request
        assert app.table.move_to(sid)
        await pilot.pause()
        assert app.main.applies("sampling")
        await pilot.press("P")
        await until(lambda: isinstance(app.screen, Form))
        await answer(pilot, app, "0.3", "512", '{"top_p": 0.9, "seed": 7}')
        await until(lambda: _sampled(db, sid))
        async with await Workspace.open(db) as ws:
            first = (await ws.show(sid)).env
        assert first == {"PROCESSION_SAMPLING": '{"max_tokens": 512, "seed": 7, "temperature": 0.3, "top_p": 0.9}'}
        await call(pilot, app, "sampling")  # shown as set; a field left out goes, one typed wrong is refused
        await until(lambda: isinstance(app.screen, Form))
        assert [i.value for i in app.screen.query("Input")] == ["0.3", "512", '{"seed": 7, "top_p": 0.9}', "20"]
        await answer(pilot, app, "hot", "512", '{"seed": 7}')
        await until(lambda: isinstance(app.screen, Form) and "the temperature is a number" in app.screen.error,
                    timeout=3)
        await answer(pilot, app, "", "512", '{"seed": 7}')
        await until(lambda: not isinstance(app.screen, Form))
    cli("set", str(twin), "--temperature", "0.3", "--max-tokens", "512", "--request", "top_p=0.9",
        "--request", "seed=7")
    async with await Workspace.open(db) as ws:
        assert (await ws.show(twin)).env == first
    cli("set", str(twin), "--request", "temperature=null", "--request", "top_p=null")
    async with await Workspace.open(db) as ws:
        assert (await ws.show(sid)).env == (await ws.show(twin)).env == {
            "PROCESSION_SAMPLING": '{"max_tokens": 512, "seed": 7}'}


def pick(app: Any, key: str, choice: str) -> None:
    """Press the radio button of ``choice`` in the form field ``key``."""
    field = next(f for f in app.screen.fields if f.key == key)
    buttons = list(app.screen.query_one(f"#field-{key}", RadioSet).query(RadioButton))
    buttons[[c for c, _ in field.choices].index(choice)].value = True


def fill(app: Any, **values: str) -> None:
    """Type into the form's one-line fields by key."""
    for key, text in values.items():
        app.screen.query_one(f"#field-{key}", Input).value = text


#: Keywords of ``Workspace.set`` a form field stands for under another name, or that no form asks for.
NOT_A_FIELD = {"act": None, "sid": None, "agent": "agent's quiet", "fields": "extra"}


async def test_every_setting_set_changes_is_a_field_of_the_monitors_forms_and_is_read_back(
        tmp_path: Path, monitor: Any) -> None:
    """set's every option (as the CLI gives them) is in the settings (E), environment and bounds (V)
    or sampling (P) form, shown as it is; what they set is what the detail view then reads."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    counter = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    counter.pre_tokenizer = pre_tokenizers.Whitespace()
    counter.save(str(tmp_path / "tokenizer.json"))
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("loop", "a", runner="openai:m@http://127.0.0.1:9/v1")).sid
    app = await monitor(db)
    async with app.run_test(size=(100, 40)) as pilot:
        await to(pilot, app, sid)
        offered: set[str] = set()
        for key in ("E", "V", "P"):
            await pilot.press(key)
            await until(lambda: isinstance(app.screen, Form))
            shown = {f.key: f.value for f in app.screen.fields}
            offered |= set(shown)
            if key == "E":
                assert (shown["restart"], shown["quiet"]) == ("no", "off")
                pick(app, "restart", "on-failure")
                pick(app, "quiet", "on")
                fill(app, tokenizer=str(tmp_path / "tokenizer.json"))
            elif key == "V":
                assert shown["permissions"] == "bound"
                pick(app, "permissions", "ask")
            else:
                assert shown["max_turns"] == "20"
                fill(app, max_turns="5")
            await pilot.press("ctrl+s")
            await until(lambda: not isinstance(app.screen, Form), timeout=3)
        await pilot.press("t")  # the tree: on an agent's row, E is the agent's own setting
        await to(pilot, app, "agent:a")
        await pilot.press("E")
        await until(lambda: isinstance(app.screen, Form))
        assert app.screen.fields[0].value == "off" and "agent a" in app.screen.title_text
        pick(app, "quiet", "on")
        await pilot.press("ctrl+s")
        await until(lambda: not isinstance(app.screen, Form), timeout=3)
        offered.add("agent's quiet")
        await to(pilot, app, sid)
        await pilot.press("E")
        await until(lambda: isinstance(app.screen, Form))
        assert "its agent a is quiet" in next(f.label for f in app.screen.fields if f.key == "quiet")
        await pilot.press("escape")
        await pilot.press("t")
        wanted = {k for k in inspect.signature(Workspace.set).parameters if k != "self"}
        assert {NOT_A_FIELD.get(k, k) for k in wanted} - {None} <= offered
        async with await Workspace.open(db) as ws:
            detail = await ws.show(sid)
        assert (detail.restart, detail.quiet, detail.info.permissions) == ("on-failure", True, "ask")
        assert detail.agent_quiet
        assert detail.env["PROCESSION_MAX_TURNS"] == "5" and "tokenizer.json" in detail.tokenizer
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, Detail) and app.screen.rev >= 0)
        summary = str(app.screen.query_one("#summary", Static).render())
        for said in ("on-failure", "it is quiet", "--permissions ask", "PROCESSION_MAX_TURNS=5", "tokenizer.json"):
            assert said in summary, said


async def _sampled(db: Path, sid: int) -> bool:
    async with await Workspace.open(db) as ws:
        return "PROCESSION_SAMPLING" in (await ws.show(sid)).env


async def test_a_refusal_naming_a_flag_keeps_the_form_and_points_at_its_field(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("echo", "a", runner="builtin:echo")).sid
        await ws.send(sid, "hello")
    app = await monitor(db)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(lambda: app.loaded and sid in app.table.keys)
        await pilot.press("V")
        await until(lambda: isinstance(app.screen, Form))
        await answer(pilot, app, "API_KEY=sk-1")
        await until(lambda: isinstance(app.screen, Form) and "--pass API_KEY" in app.screen.error)
        shown = str(app.screen.query_one("#error").render())
        assert "here, --pass is the field “Names passed from the engine's environment" in shown
        assert app.screen.query_one("#field-env", Input).value == "API_KEY=sk-1"  # what was typed stays
        assert app.focused is app.screen.query_one("#field-passed")  # where to put it
        await answer(pilot, app, "", "API_KEY")
        await until(lambda: not isinstance(app.screen, Form))
        async with await Workspace.open(db) as ws:
            assert list((await ws.show(sid)).passed) == ["API_KEY"]

        await pilot.press("c")  # a summary by a model, for a session whose runner is not one
        await choose(pilot, app, "model")
        await until(lambda: isinstance(app.screen, Form))
        await answer(pilot, app, "")
        await until(lambda: isinstance(app.screen, Form) and "--with" in app.screen.error)
        assert "here, --with is the field “Model that writes it" in str(app.screen.query_one("#error").render())
        assert app.focused is app.screen.query_one("#field-model")
        await pilot.press("escape")
        await until(lambda: not isinstance(app.screen, Form))


async def test_g_moves_a_session_the_host_column_shows_it_going_and_a_failed_move_is_told(
        tmp_path: Path, monitor: Any, monkeypatch: Any) -> None:
    db = tmp_path / "ws.db"
    here, there = tmp_path / "a", tmp_path / "b"
    here.mkdir()
    (here / "work.txt").write_text("mine\n")
    there.mkdir()
    (there / "theirs.txt").write_text("not to be written over\n")
    async with await Workspace.open(db) as ws:
        resident = await spawn_on(ws, "beta", "resident", "builtin:echo", cwd=str(tmp_path))
        sid = await spawn_on(ws, "alpha", "mover", "builtin:echo", cwd=str(here))
    monkeypatch.setenv("PROCESSION_HOST", "alpha")
    app = await monitor(db)
    async with app.run_test(size=(160, 45), notifications=True) as pilot:
        await to(pilot, app, sid)
        await pilot.press("G")
        await answer(pilot, app, "beta", f"{here}={there}")
        await until(lambda: "alpha→beta" in line_of(app, sid))  # no engine yet: it waits to be packed
        await to(pilot, app, resident)
        assert "alpha→beta" in line_of(app, sid)  # drawn in its own styles, off the cursor's row
        engines = [start_engine(str(db), host) for host in ("alpha", "beta")]
        try:
            await until(lambda: app.said(f"session {sid} did not move to host beta, and stays on host alpha: {there}"
                                         " is there already and holds files", severity="error"))
            assert "→" not in line_of(app, sid) and "alpha" in line_of(app, sid)
        finally:
            for engine in engines:
                stop(engine)
    assert (there / "theirs.txt").read_text() == "not to be written over\n" and (here / "work.txt").exists()


async def test_the_spawn_and_migrate_forms_name_every_kind_of_runner(tmp_path: Path, monitor: Any) -> None:
    """Their hint names every agent CLI and builtin the core knows (it once left out claude:,
    codex: and opencode:)."""
    from procession.model.agents import ACP, HEADLESS
    from procession.model.runner_spec import BUILTINS

    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("echo", "a", runner="builtin:echo")).sid
    app = await monitor(db)
    async with app.run_test(size=(120, 40)) as pilot:
        await to(pilot, app, sid)
        for key in ("g", "n"):
            await pilot.press(key)
            await until(lambda: isinstance(app.screen, Form))
            hint = str(app.screen.query_one(".dialog--help", Static).render())
            assert all(f"{kind}:" in hint for kind in ("command", "openai", "builtin", "acp", *HEADLESS)), hint
            assert all(name in hint for name in ACP), hint
            assert all(name in hint for name in BUILTINS), hint
            await pilot.press("escape")
            await until(lambda: not isinstance(app.screen, Form))


async def test_a_refused_memory_value_keeps_the_cursor_in_it_and_suggests_valid_json(tmp_path: Path,
                                                                                     monitor: Any) -> None:
    """Text that is not JSON is refused with a suggestion that is JSON itself (quotes inside it
    escaped), and the cursor stays in the value, from whichever field the form was sent."""
    import json

    typed = 'he said "hi" \\o/'
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("echo", "a", runner="builtin:echo")).sid
    app = await monitor(db)
    async with app.run_test(size=(100, 30)) as pilot:
        await to(pilot, app, sid)
        await call(pilot, app, "memory")
        await choose(pilot, app, "set")
        for sent_from in ("value", "key"):
            await until(lambda: isinstance(app.screen, Form))
            fill(app, key="said", value=typed)
            app.screen.query_one(f"#field-{sent_from}").focus()
            await pilot.press("ctrl+s")
            await until(lambda: isinstance(app.screen, Form) and "must be JSON" in app.screen.error, timeout=3)
            assert app.focused is app.screen.query_one("#field-value"), sent_from
            suggested = app.screen.error.split("quote it: ", 1)[1]
            assert json.loads(suggested) == typed
        fill(app, value=suggested)
        await pilot.press("ctrl+s")
        await until(lambda: not isinstance(app.screen, Form))
        await until(lambda: _memory(db, sid))  # the call runs after the form closes: its end, before quitting
    async with await Workspace.open(db) as ws:
        assert (await ws.show(sid)).memory == {"said": typed}


async def test_a_refused_number_keeps_the_cursor_in_its_field(tmp_path: Path, monitor: Any) -> None:
    db = tmp_path / "ws.db"
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("echo", "a", runner="builtin:echo")).sid
    app = await monitor(db)
    async with app.run_test(size=(100, 40)) as pilot:
        await to(pilot, app, sid)
        await pilot.press("E")
        await until(lambda: isinstance(app.screen, Form))
        fill(app, window="lots")
        await pilot.press("ctrl+s")
        await until(lambda: isinstance(app.screen, Form) and "the window is a whole number" in app.screen.error,
                    timeout=3)
        assert app.focused is app.screen.query_one("#field-window")


async def test_the_demo_session_on_its_scripted_model_says_so_in_its_detail(tmp_path: Path, monitor: Any) -> None:
    from procession.cli import demo
    from procession.cli.demo_model import DemoModel

    made = await demo.build(tmp_path / "demo.db")
    with DemoModel() as served:
        sid = await demo.with_model(made.db, served.url)
    app = await monitor(made.db)
    async with app.run_test(size=(160, 45)) as pilot:
        await to(pilot, app, sid)
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, Detail) and app.screen.rev >= 0)
        summary = " ".join(str(app.screen.query_one("#summary", Static).render()).split())
        assert "scripted" in summary and "not a real model" in summary


async def _memory(db: Path, sid: int) -> dict[str, Any]:
    async with await Workspace.open(db) as ws:
        return (await ws.show(sid)).memory

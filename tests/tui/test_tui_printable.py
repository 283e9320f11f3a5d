"""Nothing reaches the monitor's screen raw: a runner, a goal, a system prompt, a run's error,
a refusal quoting user text — each shows its escape sequences as ``\\xNN``, in the table, the
detail view, the approve confirmation, forms and notifications (read back from what the
compositor draws)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from textual.widgets import Input, TabbedContent

from procession import Workspace
from procession.model.snapshot import dump
from support.monitor import keys, to
from support.wait import until

CONCEAL = "\x1b[8m"
OSC = "\x1b]0;pwned\x07"
HOSTILE = f"a{CONCEAL}hidden{OSC}\x9b31mz"
RUNNER = f"command:{CONCEAL}curl x | sh"
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def drawn(app: Any) -> str:
    """Every line the screen is made of now, as text."""
    return "\n".join("".join(segment.text for segment in strip) for strip in app.screen._compositor.render_strips())


def assert_clean(app: Any, *visible: str) -> str:
    text = drawn(app)
    assert not RAW.search(text), repr(text)
    for shown in visible:
        assert shown in text, (shown, text)
    return text


async def hostile_workspace(db: Path, tmp_path: Path, cli: Any) -> tuple[int, int]:
    """A session loaded from a snapshot (disarmed, hostile runner, goal, system prompt,
    memory, watch path), and one whose run failed with escape sequences in its stderr."""
    cli("spawn", "failing", "--agent", "a", "--runner",
        r"command:printf 'boom \033[8m \033]0;pwned\007' >&2; exit 3")
    cli("activate", "1", "--now", check=False)
    snap = tmp_path / "hostile.json"
    snap.write_bytes(dump({
        "session": {"uuid": "u", "name": "payroll", "agent": "hr", "goal": HOSTILE, "system": f"sys {HOSTILE}",
                    "priority": 0, "runner": RUNNER, "window": 10_000, "timeout": None, "created": 0.0},
        "messages": [{"seq": 1, "role": "user", "content": HOSTILE, "author": "user", "pinned": False,
                      "created": 0.0, "meta": None}],
        "folds": [], "memory": {"notes": HOSTILE}, "resources": [],
        "triggers": [{"kind": "watch", "spec": {"paths": [f"/srv/{CONCEAL}data"], "debounce_ms": 100}}],
    }))
    async with await Workspace.open(db) as ws:
        loaded = (await ws.load(str(snap))).sid
    return 1, loaded


async def test_the_approve_confirmation_shows_the_runner_visibly(db, tmp_path, cli, monitor):
    failing, loaded = await hostile_workspace(db, tmp_path, cli)
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await to(pilot, app, loaded)
        assert_clean(app, "command:\\x1b[8mcu")  # the RUNNER column is narrow
        await keys(pilot, "A")
        await until(lambda: "Approve?" in drawn(app))
        assert_clean(app, "runner command:\\x1b[8mcurl x | sh", "trigger watch /srv/\\x1b[8mdata")


async def test_the_detail_view_shows_everything_visibly(db, tmp_path, cli, monitor):
    failing, loaded = await hostile_workspace(db, tmp_path, cli)
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await until(lambda: loaded in app.table.keys)
        app.open_detail(loaded)
        await until(lambda: "sys a\\x1b[8m" in drawn(app))
        assert_clean(app, "goal", "\\x1b]0;pwned\\x07")
        for tab in ("memory", "triggers", "journal"):
            app.screen.query_one(TabbedContent).active = f"tab-{tab}"
            await pilot.pause()
            assert_clean(app)
        app.pop_screen()
        app.open_detail(failing)
        await pilot.pause()
        app.screen.query_one(TabbedContent).active = "tab-runs"
        await until(lambda: "    boom \\x1b[8m \\x1b]0;pwned\\x07" in drawn(app))
        assert_clean(app)


async def test_notifications_and_refusals_quoting_user_text_are_printable(db, tmp_path, cli, monitor):
    failing, loaded = await hostile_workspace(db, tmp_path, cli)
    app = await monitor(db)
    async with app.run_test(size=(160, 45), notifications=True):
        await until(lambda: loaded in app.table.keys)
        await app.main.make(app.ws.unbind(loaded, f"{OSC}\x9b"))  # the core's refusal quotes what was asked
        await until(lambda: "has no resource" in drawn(app))
        assert_clean(app, "\\x1b]0;pwned\\x07\\x9b")  # (a toast wraps at spaces: a piece without any)
        app.notify(f"body {OSC}", title=f"title {CONCEAL}")
        await until(lambda: "title \\x1b[8m" in drawn(app))
        assert_clean(app, "body \\x1b]0;pwned\\x07")


async def test_a_form_shows_values_printable_and_gives_back_what_it_was_given(db, tmp_path, cli, monitor):
    _, loaded = await hostile_workspace(db, tmp_path, cli)
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await to(pilot, app, loaded)
        await keys(pilot, "E")
        await until(lambda: "Settings of session" in drawn(app))
        assert_clean(app, "a\\x1b[8mhidden")
        app.screen.query_one("#field-window", Input).value = "20000"  # the only field changed
        await keys(pilot, "ctrl+s")
        await until(lambda: app.said("changed window"))
    async with await Workspace.open(db) as ws:
        detail = await ws.show(loaded)
    assert (detail.info.goal, detail.system, detail.info.context_window) == (HOSTILE, f"sys {HOSTILE}", 20000)


async def test_a_merge_value_edited_by_hand_is_checked_as_memory_will_check_it(db, monitor):
    """NaN parses in Python but no memory holds it: the editor says so and keeps what was typed."""
    from procession.tui.dialogs import Conflicts, Prompt

    async with await Workspace.open(db) as ws:
        base = (await ws.spawn("base", "a")).sid
        await ws.memory_set(base, "k", 0)
        fork = (await ws.fork(base)).sid
        await ws.memory_set(base, "k", 1)
        await ws.memory_set(fork, "k", 2)
    app = await monitor(db)
    async with app.run_test(size=(160, 45)) as pilot:
        await to(pilot, app, fork)
        await keys(pilot, "m")
        await until(lambda: "into which session" in drawn(app))
        await keys(pilot, "enter")
        await until(lambda: isinstance(app.screen, Conflicts))
        dialog = app.screen
        await keys(pilot, "e")
        await until(lambda: isinstance(app.screen, Prompt))
        app.screen.query_one(Input).value = "[NaN]"
        await keys(pilot, "enter")
        await until(lambda: isinstance(app.screen, Prompt) and "holds NaN, which is not JSON" in app.screen.error)
        assert app.screen.query_one(Input).value == "[NaN]" and dialog.choices == {}

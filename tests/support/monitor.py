"""The monitor as tests drive it: an app that records what it told the user, and pilot steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import Input

from procession.tui import app as app_module
from procession.tui.app import ProcessionApp

from .wait import until


class Monitor(ProcessionApp):
    """The app, recording its notifications so a test can read the reasons it gave."""

    CSS_PATH = Path(app_module.__file__).with_name("app.tcss")  # relative paths resolve beside the subclass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notes: list[tuple[str, str]] = []

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = False) -> None:
        self.notes.append((severity, str(message)))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def said(self, *words: str, severity: str | None = None) -> bool:
        return any(all(w in text for w in words) and (severity is None or sev == severity) for sev, text in self.notes)


async def settle(pilot: Any) -> None:
    """Let the app finish what the last keys started (the pilot also waits for idle per key)."""
    await pilot.pause()


async def keys(pilot: Any, *pressed: str) -> None:
    await pilot.press(*pressed)
    await settle(pilot)


async def answer(pilot: Any, app: Monitor, *texts: str) -> None:
    """Fill the fields of the form on screen, in order, and submit it (typing key by key is slow)."""
    await until(lambda: app.screen.query("Input, TextArea"), timeout=3)
    fields = list(app.screen.query("Input, TextArea"))
    for field, text in zip(fields, texts):
        if isinstance(field, Input):
            field.value = text
        else:
            field.text = text  # type: ignore[attr-defined]
    await keys(pilot, "ctrl+s")


async def to(pilot: Any, app: Monitor, sid: int | str) -> None:
    """Put the cursor on a row (the arrow keys are tested on their own)."""
    await until(lambda: sid in app.table.keys)
    assert app.table.move_to(sid)
    await settle(pilot)


def line_of(app: Monitor, sid: int) -> str:
    """The table's rendered line for a session, as the terminal gets it."""
    y = app.table.index_of(sid) - int(app.table.scroll_offset.y)
    return app.table.render_line(y).text


"""Modal screens: prompts, confirmations, the action menu, merge conflicts, setup, help."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, SelectionList, Static
from textual.widgets.option_list import Option

from procession.humanize import printable
from procession.merge import MISSING, canonical


class Prompt(ModalScreen[str | None]):
    """Ask for one line of text; Enter gives it, Escape gives None."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, value: str = "", placeholder: str = "", help: str = "") -> None:
        super().__init__()
        self.title_text, self.value, self.placeholder, self.help = title, value, placeholder, help

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog--title", markup=False)
            yield Input(self.value, placeholder=self.placeholder, id="prompt")
            if self.help:
                yield Label(self.help, classes="dialog--help", markup=False)

    @on(Input.Submitted, "#prompt")
    def submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)


class Confirm(ModalScreen[bool]):
    """Ask before a destructive call, listing what it will touch."""

    BINDINGS = [Binding("escape,n", "dismiss(False)", "No"), Binding("y", "dismiss(True)", "Yes")]

    def __init__(self, title: str, lines: Sequence[str]) -> None:
        super().__init__()
        self.title_text, self.lines = title, list(lines)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog--title", markup=False)
            yield Static("\n".join(self.lines), classes="dialog--body", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


@dataclass(slots=True, frozen=True)
class Action:
    id: str
    label: str
    enabled: bool = True


class ActionMenu(ModalScreen[str | None]):
    """htop's signal menu: every call that applies; Enter runs it, Escape leaves."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Leave")]

    def __init__(self, title: str, actions: Sequence[Action]) -> None:
        super().__init__()
        self.title_text, self.actions = title, list(actions)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog--title", markup=False)
            yield OptionList(*[Option(Text(a.label), id=a.id, disabled=not a.enabled) for a in self.actions],
                             id="actions")

    @on(OptionList.OptionSelected, "#actions")
    def chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


def _show(value: Any) -> str:
    return "(absent)" if value is MISSING else printable(canonical(value))


class Conflicts(ModalScreen[dict[str, tuple[str, str]] | None]):
    """Merge conflicts, key by key: pick ours (o), theirs (t) or edit (e) for each; nothing is
    applied until every key is settled (Enter), and Escape applies nothing at all."""

    BINDINGS = [
        Binding("o", "pick('ours')", "Ours"),
        Binding("t", "pick('theirs')", "Theirs"),
        Binding("e", "edit", "Edit"),
        Binding("enter", "apply", "Merge", priority=True),
        Binding("escape", "dismiss(None)", "Cancel"),
    ]

    def __init__(self, source: int, target: int, conflicts: dict[str, tuple[Any, Any, Any]]) -> None:
        super().__init__()
        self.source, self.target, self.conflicts = source, target, conflicts
        self.choices: dict[str, tuple[str, str]] = {}

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog--wide"):
            yield Label(f"Merge {self.source} into {self.target}: {len(self.conflicts)} conflict(s)",
                        classes="dialog--title")
            yield OptionList(*[Option(self._line(k), id=k) for k in sorted(self.conflicts)], id="conflicts")
            yield Label("o ours · t theirs · e edit · Enter merge when all are settled · Esc cancel",
                        classes="dialog--help", id="status")

    def on_mount(self) -> None:
        self.query_one("#conflicts", OptionList).highlighted = 0

    def _line(self, key: str) -> Text:
        base, ours, theirs = self.conflicts[key]
        choice = self.choices.get(key)
        mark = {"ours": "✓ ours", "theirs": "✓ theirs", "set": "✓ edited"}.get(choice[0], "") if choice else "?"
        text = Text()
        text.append(f"{mark:<10}", "bold")
        text.append(f"{printable(key)}\n", "bold")
        text.append(f"    base   {_show(base)}\n    ours   ({self.target}) {_show(ours)}\n"
                    f"    theirs ({self.source}) {_show(theirs)}")
        if choice and choice[0] == "set":
            text.append(f"\n    edited {printable(choice[1])}")
        return text

    def _current(self) -> str | None:
        option_list = self.query_one("#conflicts", OptionList)
        if option_list.highlighted is None:
            return None
        return option_list.get_option_at_index(option_list.highlighted).id

    def _redraw(self, key: str) -> None:
        self.query_one("#conflicts", OptionList).replace_option_prompt(key, self._line(key))
        left = len(self.conflicts) - len(self.choices)
        self.query_one("#status", Label).update(
            f"{left} left to settle · o ours · t theirs · e edit · Esc cancel" if left
            else "all settled: Enter merges · Esc cancels")

    def action_pick(self, side: str) -> None:
        key = self._current()
        if key is not None:
            self.choices[key] = (side, "")
            self._redraw(key)

    def action_edit(self, draft: str | None = None) -> None:
        key = self._current()
        if key is None:
            return
        _, ours, _ = self.conflicts[key]

        def done(value: str | None) -> None:
            if value is None:
                return
            try:
                json.loads(value)
            except ValueError:
                self.notify(f"{key}: not JSON; quote text like \"this\"", severity="error", markup=False)
                self.action_edit(value)  # back to the editor with what was typed
                return
            self.choices[key] = ("set", value)
            self._redraw(key)

        value = draft if draft is not None else "" if ours is MISSING else canonical(ours)
        self.app.push_screen(Prompt(f"Value of {printable(key)} (JSON)", value), done)

    def action_apply(self) -> None:
        if len(self.choices) < len(self.conflicts):
            self.notify(f"{len(self.conflicts) - len(self.choices)} conflict(s) not settled yet", severity="warning")
            return
        self.dismiss(self.choices)


class Setup(ModalScreen[dict[str, Any] | None]):
    """F2: the columns shown, the theme, the refresh interval."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, columns: Sequence[tuple[str, str, bool]], themes: Sequence[str], theme: str,
                 interval: float) -> None:
        super().__init__()
        self.columns, self.themes, self.theme_name, self.interval = list(columns), list(themes), theme, interval

    def compose(self) -> ComposeResult:
        # Side by side and scrollable, so that Save stays reachable on a 24-line terminal.
        with VerticalScroll(classes="dialog dialog--wide", id="setup"):
            yield Label("Setup", classes="dialog--title")
            with Horizontal(id="setup-lists"):
                with Vertical():
                    yield Label("Columns")
                    yield SelectionList[str](*[(title, key, on) for key, title, on in self.columns], id="columns")
                with Vertical(id="setup-themes"):
                    yield Label("Theme")
                    yield OptionList(*[Option(t, id=t) for t in self.themes], id="themes")
            yield Label("Refresh interval (seconds)")
            yield Input(f"{self.interval:g}", id="interval")
            with Horizontal(classes="dialog--buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        themes = self.query_one("#themes", OptionList)
        if self.theme_name in self.themes:
            themes.highlighted = self.themes.index(self.theme_name)
        self.query_one("#columns", SelectionList).focus()

    @on(OptionList.OptionHighlighted, "#themes")
    def preview(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id:
            self.app.theme = event.option.id

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        if event.button.id != "save":
            self.dismiss(None)
            return
        try:
            interval = float(self.query_one("#interval", Input).value)
        except ValueError:
            self.notify("the refresh interval must be a number of seconds", severity="error")
            return
        if not 0.1 <= interval <= 60:
            self.notify("the refresh interval must be between 0.1 and 60 seconds", severity="error")
            return
        columns = list(self.query_one("#columns", SelectionList).selected)
        if not columns:
            self.notify("keep at least one column", severity="error")
            return
        self.dismiss({"columns": columns, "theme": self.app.theme, "interval": interval})


class Help(ModalScreen[None]):
    """Every key, generated from the bindings."""

    BINDINGS = [Binding("escape,q,f1,question_mark", "dismiss(None)", "Close")]

    def __init__(self, rows: Sequence[tuple[str, str]], readonly: bool) -> None:
        super().__init__()
        self.rows, self.readonly = list(rows), readonly

    def compose(self) -> ComposeResult:
        half = (len(self.rows) + 1) // 2
        columns = []
        for rows in (self.rows[:half], self.rows[half:]):  # two columns: every key on one screen
            text = Text(no_wrap=True, overflow="ellipsis")
            for keys, description in rows:
                text.append(f"{keys:<14}", "bold")
                text.append(f"{description}\n")
            columns.append(Static(text, classes="help--column"))
        with Vertical(classes="dialog dialog--wide"):
            yield Label("Procession — keys" + (" (read-only monitor)" if self.readonly else ""),
                        classes="dialog--title")
            with VerticalScroll(classes="dialog--scroll"):
                with Horizontal(classes="help--columns"):
                    yield from columns
            yield Label("Every call is also in the command palette (Ctrl+P). Esc closes.", classes="dialog--help")

"""Modal screens: forms and prompts, confirmations, the action menu, merge conflicts, setup, help.

Every text in a dialog wraps to the dialog's width: nothing is cut, at 80x24 or wider. A
dialog's hint (what saves it, what leaves it) stays at its bottom and a form's title and
refusal at its top, in view while its fields scroll. A form that a call refused is opened
again with what was typed and the reason shown in it (``error``), so nothing typed is lost.

Titles, bodies, labels and choices quote session names, runners, paths and the core's
refusals: each dialog makes them ``printable`` itself, so that no flow can forget to. A
form's fields show their values printable too; a field left as shown gives back the value
it was given, control characters included, so opening a form and saving it changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Button, Input, OptionList, RadioButton, RadioSet, SelectionList, Static, TextArea
from textual.widgets.option_list import Option

from procession.calls.merge import MISSING, canonical
from procession.model import limits
from procession.model.errors import InvalidArgument, ProcessionError
from procession.present import lines
from procession.present.words import plural, printable


@dataclass(slots=True, frozen=True)
class Field:
    """One input of a form: ``key`` names it in the answer; a ``multiline`` one is a text area;
    one with ``choices`` (``(id, label)``) is a set of radio buttons, its value the id picked."""

    key: str
    label: str
    value: str = ""
    placeholder: str = ""
    multiline: bool = False
    choices: tuple[tuple[str, str], ...] = ()


class MarkedRadioButton(RadioButton):
    """A radio button whose choice reads without colour: ``●`` when chosen, ``○`` when not
    (Textual's draws ``●`` in both, lit or unlit, which a colour-blind eye or a monochrome
    terminal cannot tell apart)."""

    CHOSEN, NOT_CHOSEN = "●", "○"

    @property
    def _button(self) -> Content:
        self.BUTTON_INNER = self.CHOSEN if self.value else self.NOT_CHOSEN
        return super()._button


class MarkedOptionList(OptionList):
    """An option list whose highlighted option reads without colour: a ``▶`` in its first
    cell (the option's own padding), as the table marks its cursor's row."""

    MARK = "▶"
    DEFAULT_CSS = """
    MarkedOptionList > .option-list--option { padding: 0 0 0 1; }
    """

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        try:
            index, offset = self._lines[self.scroll_offset.y + y]
        except IndexError:
            return strip
        if index != self.highlighted or offset or strip.cell_length < 2:
            return strip
        first = next(iter(strip), None)
        if first is None or not first.text.startswith(" "):  # no padding of its own here: nothing covered
            return strip
        return Strip([Segment(self.MARK, first.style), *strip.crop(1, strip.cell_length)],
                     strip.cell_length)


#: The CLI flags the core's refusals name, each with the key of the form field that stands for it:
#: a refused form that has the field says so under the refusal, and puts the cursor in it.
FLAG_FIELDS = {"--pass": "passed", "--with": "model", "--max-tokens": "max_tokens"}


def _error_label(error: str) -> Static:
    return Static(printable(error), classes="dialog--error" + ("" if error else " hidden"), id="error",
                  markup=False)


class Form(ModalScreen[dict[str, str] | None]):
    """Ask for a few values. Enter in a one-line field submits, Tab moves on, Escape gives None."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel"), Binding("ctrl+s", "submit", "Submit", show=False)]

    def __init__(self, title: str, fields: Sequence[Field], *, help: str = "", error: str = "", focus: str = "",
                 cursor: str = "") -> None:
        """``focus``: the key of the field the refusal ``error`` is about; ``cursor``: the field
        the cursor was in when the refused form was submitted (where it goes back to when the
        refusal names no field)."""
        super().__init__()
        self.title_text, self.fields, self.help, self.error = title, list(fields), help, error
        self.focus_key, self.cursor_key = focus, cursor
        self.submitted_from = ""  # the key of the field the cursor was in on submit

    def _flagged(self) -> list[tuple[str, Field]]:
        """The fields of this form the refusal names by their CLI flag, with the flag."""
        by_key = {f.key: f for f in self.fields}
        return [(flag, by_key[key]) for flag, key in FLAG_FIELDS.items()
                if key in by_key and re.search(rf"{flag}(?![\w-])", self.error)]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog"):
            with Vertical(classes="dialog--head"):  # in view, however far the fields scroll
                yield Static(printable(self.title_text), classes="dialog--title", markup=False)
                advice = [f"here, {flag} is the field “{f.label}”" for flag, f in self._flagged()]
                yield _error_label("\n".join([self.error, *advice]) if self.error else "")
            for f in self.fields:
                if len(self.fields) > 1 or f.label:
                    yield Static(printable(f.label), classes="dialog--label", markup=False)
                if f.choices:
                    with RadioSet(id=f"field-{f.key}"):
                        for choice, label in f.choices:
                            yield MarkedRadioButton(printable(label, lines=False), value=choice == f.value)
                elif f.multiline:
                    yield TextArea(printable(f.value), id=f"field-{f.key}", classes="dialog--text", soft_wrap=True)
                else:
                    yield Input(printable(f.value, lines=False), placeholder=printable(f.placeholder, lines=False),
                                id=f"field-{f.key}")
            if self.help:
                yield Static(printable(self.help), classes="dialog--help", markup=False)

    def values(self) -> dict[str, str]:
        """What the fields hold; a field left as it was shown, its value as it was given."""
        out = {}
        for f in self.fields:
            widget = self.query_one(f"#field-{f.key}")
            if isinstance(widget, RadioSet):
                picked = widget.pressed_index
                out[f.key] = f.choices[picked][0] if 0 <= picked < len(f.choices) else f.value
                continue
            if isinstance(widget, TextArea):
                text, shown = widget.text, printable(f.value)
            else:
                text, shown = widget.value, printable(f.value, lines=False)  # type: ignore[attr-defined]
            out[f.key] = f.value if text == shown else text
        return out

    def on_mount(self) -> None:
        """The cursor in the field a refusal is about (given, or named by its flag), scrolled
        into view; else where it was when the refused form was submitted; else in the first
        typed field (in a form of choices only, the first field), the form shown from its top
        (the first field's label above it). A refusal never sends the cursor away from what has
        to be changed."""
        flagged = self._flagged()
        key = self.focus_key or (flagged[0][1].key if flagged else self.cursor_key)
        if key:
            self.query_one(f"#field-{key}").focus()
        elif typed := self.query("Input, TextArea"):
            typed.first().focus(scroll_visible=False)
        elif self.fields:  # choices only: the first, so that the keys reach it
            self.query_one(f"#field-{self.fields[0].key}").focus(scroll_visible=False)

    @on(Input.Submitted)
    def submitted(self) -> None:
        self.action_submit()

    def action_submit(self) -> None:
        node = self.focused
        while node is not None and not (node.id or "").startswith("field-"):
            node = node.parent if isinstance(node.parent, Widget) else None
        self.submitted_from = node.id[len("field-"):] if node is not None and node.id else ""
        self.dismiss(self.values())


class FieldRefused(ProcessionError):
    """A refusal of what one field of a form holds (``field``: its key), in the core's words:
    the form opens again with the cursor in that field."""

    def __init__(self, field: str, refusal: ProcessionError) -> None:
        super().__init__(str(refusal))
        self.field = field


class Prompt(Form):
    """Ask for one line of text (a form of one field); the answer is under ``"value"``."""

    def __init__(self, title: str, value: str = "", *, placeholder: str = "", help: str = "",
                 error: str = "") -> None:
        super().__init__(title, [Field("value", "", value, placeholder)], help=help, error=error)


class Confirm(ModalScreen[bool]):
    """Ask before a call that ends or replaces something, listing what it will touch."""

    BINDINGS = [Binding("escape,n", "dismiss(False)", "No"), Binding("y", "dismiss(True)", "Yes")]

    def __init__(self, title: str, body: Sequence[str]) -> None:
        super().__init__()
        self.title_text, self.body = title, list(body)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(printable(self.title_text), classes="dialog--title", markup=False)
            with VerticalScroll(classes="dialog--scroll"):
                yield Static(printable("\n".join(self.body)), classes="dialog--body", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


@dataclass(slots=True, frozen=True)
class Choice:
    id: str
    label: str
    enabled: bool = True


class ActionMenu(ModalScreen[str | None]):
    """htop's signal menu: a list to pick from; Enter picks, Escape leaves."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Leave")]

    def __init__(self, title: str, choices: Sequence[Choice], help: str = "") -> None:
        super().__init__()
        self.title_text, self.choices, self.help = title, list(choices), help

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(printable(self.title_text), classes="dialog--title", markup=False)
            yield MarkedOptionList(*[Option(Text(printable(c.label)), id=c.id, disabled=not c.enabled)
                                     for c in self.choices], id="choices")
            if self.help:
                yield Static(printable(self.help), classes="dialog--help", markup=False)

    @on(OptionList.OptionSelected, "#choices")
    def chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


#: The id of a file's line among the conflicts (a memory key never holds a control character).
FILE = "\0file:"


class Conflicts(ModalScreen[dict[str, tuple[str, str]] | None]):
    """Merge conflicts, key by key and file by file: pick ours (o), theirs (t) or edit (e, a
    key only) for each; nothing is applied until every one is settled (Enter), and Escape
    applies nothing at all. A file's choice comes back under ``FILE + path``."""

    BINDINGS = [
        Binding("o", "pick('ours')", "Ours"),
        Binding("t", "pick('theirs')", "Theirs"),
        Binding("e", "edit", "Edit"),
        Binding("enter", "apply", "Merge", priority=True),
        Binding("escape", "dismiss(None)", "Cancel"),
    ]

    def __init__(self, source: int, target: int, conflicts: dict[str, tuple[Any, Any, Any]],
                 files: dict[str, str] | None = None) -> None:
        super().__init__()
        self.source, self.target, self.conflicts, self.files = source, target, conflicts, files or {}
        self.choices: dict[str, tuple[str, str]] = {}

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog dialog--wide"):
            yield Static(f"Merge {self.source} into {self.target}: {plural(self._count(), 'conflict')}"
                         " (nothing is applied until all are settled)",
                         classes="dialog--title", markup=False)
            yield OptionList(*[Option(self._line(k), id=k) for k in sorted(self.conflicts)],
                             *[Option(self._line(FILE + p), id=FILE + p) for p in sorted(self.files)], id="conflicts")
            yield Static("o ours · t theirs · e edit · Enter merge when all are settled · Esc cancel",
                         classes="dialog--help", id="status", markup=False)

    def on_mount(self) -> None:
        self.query_one("#conflicts", OptionList).highlighted = 0

    def _count(self) -> int:
        return len(self.conflicts) + len(self.files)

    def _line(self, key: str) -> Text:
        choice = self.choices.get(key)
        mark = {"ours": "✓ ours", "theirs": "✓ theirs", "set": "✓ edited"}.get(choice[0], "") if choice else "?"
        text = Text()
        text.append(f"{mark:<10}", "bold")
        if key.startswith(FILE):
            path = key[len(FILE):]
            text.append(f"file {printable(path)}\n", "bold")
            text.append(f"    {printable(self.files[path])}: o keeps the target's ({self.target}),"
                        f" t takes the fork's ({self.source})")
            return text
        base, ours, theirs = self.conflicts[key]
        text.append(f"{printable(key)}\n", "bold")
        text.append(f"    base   {lines.value(base)}\n    ours   ({self.target}) {lines.value(ours)}\n"
                    f"    theirs ({self.source}) {lines.value(theirs)}")
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
        left = self._count() - len(self.choices)
        self.query_one("#status", Static).remove_class("dialog--warning").update(
            f"{left} left to settle · o ours · t theirs · e edit · Esc cancel" if left
            else "all settled: Enter merges · Esc cancels")

    def action_pick(self, side: str) -> None:
        key = self._current()
        if key is not None:
            self.choices[key] = (side, "")
            self._redraw(key)

    def action_edit(self, draft: str | None = None, error: str = "") -> None:
        key = self._current()
        if key is None:
            return
        if key.startswith(FILE):
            self.notify("a file is settled with o or t (or resolve it on the fork's branch and merge again)",
                        severity="warning")
            return
        _, ours, _ = self.conflicts[key]

        def done(answer: dict[str, str] | None) -> None:
            if answer is None:
                return
            value, what = answer["value"], f"{key}: the value"
            try:  # JSON that memory can hold (no NaN, not too deep...), as the merge will check
                limits.json_value(limits.json_loads(value, what), what)
            except limits.NotJson:
                self.action_edit(value, f"{key}: not JSON; quote text like \"this\"")  # what was typed stays
                return
            except InvalidArgument as exc:
                self.action_edit(value, str(exc))
                return
            self.choices[key] = ("set", value)
            self._redraw(key)

        value = draft if draft is not None else "" if ours is MISSING else canonical(ours)
        self.app.push_screen(Prompt(f"Value of {printable(key)} (JSON)", value, error=error), done)

    def action_apply(self) -> None:
        """Merge once every conflict is settled; before, say in the dialog how many are left and
        how to settle them, and put the cursor on the first one left."""
        options = self.query_one("#conflicts", OptionList)
        left = [i for i in range(options.option_count) if options.get_option_at_index(i).id not in self.choices]
        if not left:
            self.dismiss(self.choices)
            return
        options.highlighted = left[0]
        status = self.query_one("#status", Static)
        status.update(f"{plural(len(left), 'conflict')} not settled yet (marked ?): on each, o keeps ours, t takes"
                      " theirs, e edits a key's value; then Enter merges · Esc cancels")
        status.add_class("dialog--warning")


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
            yield Static("Setup", classes="dialog--title")
            with Horizontal(id="setup-lists"):
                with Vertical():
                    yield Static("Columns")
                    yield SelectionList[str](*[(title, key, on) for key, title, on in self.columns], id="columns")
                with Vertical(id="setup-themes"):
                    yield Static("Theme")
                    yield OptionList(*[Option(t, id=t) for t in self.themes], id="themes")
            yield Static("Refresh interval (seconds)")
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
    """Every key, as the keymap has it now (remapped keys shown as remapped); it scrolls.

    A row is (keys, title, what it does): its keys, the alternates after the first; the
    title is what the footer, the menu and the palette call it."""

    BINDINGS = [Binding("escape,q,f1,question_mark", "dismiss(None)", "Close")]

    def __init__(self, rows: Sequence[tuple[str, str, str]], readonly: bool) -> None:
        super().__init__()
        self.rows, self.readonly = list(rows), readonly

    def compose(self) -> ComposeResult:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(ratio=1)
        for keys, title, text in self.rows:
            grid.add_row(keys, Text.assemble(title, (f" — {text}" if text else "", "dim")))
        with Vertical(classes="dialog dialog--wide", id="help"):
            yield Static("Procession — keys" + (" (read-only monitor)" if self.readonly else ""),
                         classes="dialog--title")
            with VerticalScroll(id="help-keys"):
                yield Static(grid, classes="help--keys")
            yield Static("↑ ↓ PgUp PgDn scroll · Esc closes · every call is also in the command palette (Ctrl+P)",
                         classes="dialog--help")

    def on_mount(self) -> None:
        self.query_one("#help-keys", VerticalScroll).focus()

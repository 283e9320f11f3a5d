"""Finding what was said (Ctrl+F): what is typed is looked for in every session's messages
(``grep``: the store's full-text index), best first, as it is typed; Enter opens the session
of the hit under the cursor at that message.

It is a ``Calling`` screen: every call's key acts on the session of the hit under the cursor.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.timer import Timer
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from procession.model.errors import InvalidArgument
from procession.model.records import SessionInfo
from procession.model.search import Found
from procession.present import lines
from procession.present.words import printable

from .calling import Calling, call_bindings
from .dialogs import MarkedOptionList

#: How long typing may pause before what it typed is looked for.
TYPED_S = 0.25
#: Hits shown.
SHOWN = 50


class Said(Calling):
    """Escape goes back to the table."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="back"), *call_bindings()]

    def __init__(self) -> None:
        super().__init__()
        self.found: list[Found] = []
        self._typed: Timer | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="said"):
            yield Static("What was said: type words to find", classes="dialog--title", id="said-title")
            yield Input(placeholder='words, each in a message; "a phrase" as written — Enter or ↓ to the hits',
                        id="said-query")
            yield MarkedOptionList(id="said-hits")
            yield Static("Enter open at the message  ↑↓ hits  z suspend  i interrupt  Esc back", classes="dialog--help")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#said-query", Input).focus()

    @on(Input.Changed, "#said-query")
    def typed(self, event: Input.Changed) -> None:
        if self._typed is not None:
            self._typed.stop()
        self._typed = self.set_timer(TYPED_S, self.look)

    @on(Input.Submitted, "#said-query")
    async def submitted(self, event: Input.Submitted) -> None:
        await self.look()
        if self.found:
            self.query_one(OptionList).focus()

    def key_down(self) -> None:
        if self.query_one("#said-query", Input).has_focus and self.found:
            self.query_one(OptionList).focus()

    async def look(self) -> None:
        text = self.query_one("#said-query", Input).value
        hits = self.query_one(OptionList)
        title = self.query_one("#said-title", Static)
        if not text.strip():
            self.found = []
            hits.clear_options()
            title.update("What was said: type words to find")
            return
        try:
            self.found = await self.ws.grep(text, limit=SHOWN)
        except InvalidArgument as exc:
            self.found = []
            hits.clear_options()
            title.update(Text(printable(str(exc))))  # as text: it quotes what was typed ("[/]" is no markup)
            return
        title.update(lines.found_title(self.found, SHOWN))
        hits.clear_options()
        now = self.monitor.clock()
        # as text, never markup: what was said is anyone's words ("[/x]" would break, or hide, the row)
        hits.add_options([Option(Text(printable(lines.found_line(f, now))), id=str(i))
                          for i, f in enumerate(self.found)] or [Option(lines.FOUND_NONE, disabled=True)])
        if self.found:
            hits.highlighted = 0

    def _hit(self) -> Found | None:
        option = self.query_one(OptionList).highlighted_option
        return self.found[int(option.id)] if option is not None and option.id is not None else None

    def targets(self) -> list[SessionInfo]:
        hit = self._hit()
        info = self.monitor.feed.sessions.get(hit.session) if hit is not None else None
        return [info] if info else []

    @on(OptionList.OptionSelected, "#said-hits")
    def opened(self, event: OptionList.OptionSelected) -> None:
        hit = self._hit()
        if hit is not None:
            self.monitor.open_detail(hit.session, at=hit.seq)

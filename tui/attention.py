"""The attention queue: what needs you, in one list — the requests sessions wait on (W), the
sessions failing, and those whose run finished since you last looked.

It is a ``Calling`` screen: every call's key acts on the session of the row under the cursor,
and allow (Y) and deny (D) answer the request under it. Enter on a request asks how to answer
it (its input whole); on a session, opens its detail view, which marks a finished run read.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from procession.model.records import Request, SessionInfo
from procession.present import lines
from procession.present.words import plural, printable

from .calling import Calling, call_bindings
from .dialogs import MarkedOptionList

#: The first column's width: the request's line, or the session's, follows it.
HEADS = {"req": "waits ", "fail": "fails ", "done": "ended "}


class Attention(Calling):
    """Escape goes back to the table."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="back"), *call_bindings()]

    def __init__(self) -> None:
        super().__init__()
        self.requests: dict[int, Request] = {}
        self.rows: list[str] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="attention"):
            yield Static("Needs you", classes="dialog--title", id="attention-title")
            yield Static(f"{' ' * (len(HEADS['req']) + 3)} REQ  SID session                  age  what it asks",
                         id="attention-head", markup=False)
            yield MarkedOptionList(id="queue")
            yield Static("Y allow  D deny  Enter open  z suspend  i interrupt  C cancel  Esc back",
                         classes="dialog--help")
        yield Footer(compact=True, show_command_palette=False)

    async def on_mount(self) -> None:
        await self.reload()
        self.query_one(OptionList).focus()

    async def reload(self) -> None:
        """Read the queue again, keeping the cursor on the row it was on (if it is still there)."""
        waiting = await self.ws.pending()
        failing, finished = self.monitor.feed.attention()
        self.requests = {r.id: r for r in waiting}
        width = max(40, self.size.width - len(HEADS["req"]) - 4)  # its border and scroll bar
        options: list[Option] = []
        # as text, never markup: what an agent asks is its own words ("[/x]" would break, or hide, the row)
        options += [Option(Text(HEADS["req"] + lines.request_line(r, width=width)), id=f"req:{r.id}") for r in waiting]
        options += [Option(Text(HEADS["fail"] + _session(s)), id=f"fail:{s.id}") for s in failing]
        options += [Option(Text(HEADS["done"] + _session(s)), id=f"done:{s.id}") for s in finished]
        self.query_one("#attention-title", Static).update(
            f"Needs you: {plural(len(waiting), 'request')} waiting, {len(failing)} failing,"
            f" {plural(len(finished), 'run')} finished since you looked")
        queue = self.query_one(OptionList)
        at = queue.highlighted_option.id if queue.highlighted_option is not None else None
        queue.clear_options()
        if not options:
            queue.add_option(Option("nothing needs you", disabled=True))
            return
        queue.add_options(options)
        ids = [o.id for o in options]
        queue.highlighted = ids.index(at) if at in ids else 0

    def _cursor(self) -> tuple[str, int] | None:
        option = self.query_one(OptionList).highlighted_option
        if option is None or option.id is None:
            return None
        kind, _, number = option.id.partition(":")
        return kind, int(number)

    def targets(self) -> list[SessionInfo]:
        at = self._cursor()
        if at is None:
            return []
        kind, number = at
        sid = self.requests[number].sid if kind == "req" and number in self.requests else number
        info = self.monitor.feed.sessions.get(sid)
        return [info] if info else []

    def chosen_request(self) -> int | None:
        at = self._cursor()
        return at[1] if at is not None and at[0] == "req" else None

    @on(OptionList.OptionSelected, "#queue")
    def opened(self, event: OptionList.OptionSelected) -> None:
        at = self._cursor()
        if at is None:
            return
        if at[0] == "req":
            self.action_call("allow")
        else:
            self.monitor.open_detail(at[1])


def _session(s: SessionInfo) -> str:
    return printable(f"{s.id:>4} {s.name} ({s.agent}): {s.state}" + (f", last run {s.last_outcome}" if s.last_outcome
                                                                     else ""))

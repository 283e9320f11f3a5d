"""The detail view of one session: context, memory, resources, triggers, runs, journal.

It is a ``Calling`` screen too: every call's key acts on the session shown. Its texts are the
present layer's lines, the same ``procession show`` prints.
"""

from __future__ import annotations


from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Label, Log, Sparkline, Static, TabbedContent, TabPane

from procession.model import allowed
from procession.model.allowed import ToolUse
from procession.model.errors import ProcessionError
from procession.model.records import RunInfo, SessionDetail, SessionInfo
from procession.present import lines, words
from procession.present.words import printable

from .calling import Calling, call_bindings

#: Items of the active context shown; older ones are summarised in one line.
SHOWN_ITEMS = 400
#: The runs whose tool calls the Runs tab lists, newest.
TRACED_RUNS = 10
#: How often the log of a running step is read for more.
LOG_POLL_S = 0.5
OUTCOME_STYLE = {"ok": "green", "failed": "red", "interrupted": "yellow", "timeout": "magenta",
                 "cancelled": "bright_black", "lost": "red", None: "cyan"}


class Detail(Calling):
    """Everything about one session; Escape goes back to the table."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back", id="back"), *call_bindings()]

    def __init__(self, sid: int, *, at: int | None = None) -> None:
        super().__init__()
        self.sid = sid
        self.at = at  # the message to show first (a search's hit), marked
        self.rev = -1
        self.log_run = 0
        self.log_after = 0

    def targets(self) -> list[SessionInfo]:
        info = self.monitor.feed.sessions.get(self.sid)
        return [info] if info else []

    def compose(self) -> ComposeResult:
        with Vertical(id="detail"):
            yield Static(id="summary")
            with Horizontal(id="curves"):
                with Vertical():
                    yield Label("context tokens over the history", classes="curve--label")
                    yield Sparkline([], id="context-curve")
                with Vertical():
                    yield Label("run durations", classes="curve--label", id="runs-label")
                    yield Sparkline([], id="runs-curve")
            with TabbedContent(id="tabs"):
                for tab in ("Context", "Memory", "Resources", "Triggers", "Runs", "Journal"):
                    with TabPane(tab, id=f"tab-{tab.lower()}"):
                        with VerticalScroll():
                            yield Static(id=f"body-{tab.lower()}", markup=False)
                with TabPane("Log", id="tab-log"):
                    yield Log(id="body-log", auto_scroll=True)
        # F1..F10 fit an 80-column terminal: compact, and Ctrl+P is in the help instead
        yield Footer(compact=True, show_command_palette=False)

    async def on_mount(self) -> None:
        await self.reload()
        self.set_interval(LOG_POLL_S, self._follow_log)

    async def _follow_log(self) -> None:
        """The last run's log, as it grows (the step's output is not a change of the session)."""
        try:
            run, chunks = await self.ws.run_log(self.sid, after=self.log_after)
        except ProcessionError:
            return  # no run yet
        log = self.query_one("#body-log", Log)
        if run.id != self.log_run:
            self.log_run, self.log_after = run.id, 0
            log.clear()
            log.write_line(f"run {run.id} ({lines.causes(run)}): {run.outcome or 'running'}")
            run, chunks = await self.ws.run_log(self.sid, run.id)
        for c in chunks:
            self.log_after = c.id
            log.write(printable(c.data))

    async def reload(self) -> None:
        ws = self.ws
        detail = await ws.show(self.sid)
        if detail.info.rev == self.rev:
            return
        first = self.rev < 0
        self.rev = detail.info.rev
        runs = await ws.runs(self.sid, limit=60)
        journal = await ws.journal(self.sid, limit=100)
        curve = await ws.context_curve(self.sid)
        now = self.monitor.clock()  # the monitor's clock, so tests and screenshots are stable
        self.query_one("#summary", Static).update(_summary(detail, now, self.size.width or 160))
        self.query_one("#context-curve", Sparkline).data = curve
        durations = [max((r.ended or now) - r.started, 0.0) for r in runs]
        # a sparkline scales from its lowest to its highest value: say what those are
        self.query_one("#runs-curve", Sparkline).data = durations if len(durations) > 1 else []
        self.query_one("#runs-label", Label).update(
            f"run durations, newest right: {min(durations):.1f}–{max(durations):.1f} s" if len(durations) > 1
            else "run durations: fewer than two runs yet")
        context = _context(detail, self.at)
        self.query_one("#body-context", Static).update(context)
        scroll = self.query_one("#tab-context VerticalScroll", VerticalScroll)
        if first and self.at is not None:  # the hit a search opened it at, near the top
            before = _context(detail, self.at, upto=True)
            width = max(20, (scroll.size.width or self.size.width or 160) - 2)
            y = len(before.wrap(self.app.console, width)) if before.plain else 0
            self.call_after_refresh(scroll.scroll_to, y=max(0, y - 2), animate=False)
        elif first:  # the newest messages are what one opens a session to see
            self.call_after_refresh(scroll.scroll_end, animate=False)
        self.query_one("#body-memory", Static).update(
            "\n".join(lines.memory_line(k, v) for k, v in detail.memory.items()) or "(empty)")
        self.query_one("#body-resources", Static).update(
            "\n".join(lines.resource_line(r) for r in detail.resources) or "(none)")
        self.query_one("#body-triggers", Static).update(
            "\n".join(lines.trigger_line(t, now) for t in detail.info.triggers) or "(none)")
        used = await ws.tool_uses(self.sid, [r.id for r in runs[-TRACED_RUNS:]])
        self.query_one("#body-runs", Static).update(_runs(runs, now, used))
        self.query_one("#body-journal", Static).update(
            "\n".join(lines.journal_line(e, 90) for e in journal) or "(empty)")


def _summary(d: SessionDetail, now: float, width: int) -> Text:
    """The title, then the facts, two a line on a wide screen (the header leaves the room to
    the context), one a line on a narrow one."""
    text = Text()
    text.append(lines.title(d.info), "bold")
    column = width // 2 - 10
    rows: list[list[tuple[str, str]]] = []
    for fact in lines.facts(d, now):  # a long value takes a line of its own
        if (width >= 120 and rows and len(rows[-1]) == 1 and words.cell_len(rows[-1][0][1]) < column
                and words.cell_len(fact[1]) < column):
            rows[-1].append(fact)
        else:
            rows.append([fact])
    for row in rows:
        text.append("\n")
        for j, (label, value) in enumerate(row):
            text.append(f"{label:<9}", "dim")
            text.append(words.pad(value, column) if j < len(row) - 1 else value)
    return text


def _context(d: SessionDetail, at: int | None = None, *, upto: bool = False) -> Text:
    """The context, the item holding message ``at`` marked (a fold, for an archived one); with
    ``upto``, only what comes before that item (how far down it is)."""
    text = Text()
    if d.system:
        text.append("system prompt\n", "bold")
        text.append(printable(d.system) + "\n\n")
    items = d.context
    if len(items) > SHOWN_ITEMS:
        text.append(f"… {len(items) - SHOWN_ITEMS} earlier items not shown (procession show {d.info.id})\n\n", "dim")
        items = items[-SHOWN_ITEMS:]
    marked = next((i for i in items if i.seq == at and i.fold is None), None) or next(  # or the fold hiding it
        (i for i in reversed(items) if at is not None and i.fold is not None and i.seq <= at), None)
    for item in items:
        if item is marked and upto:
            break
        if item is marked and at is not None:
            text.append(lines.found_at(d.info.id, at, item.fold is not None) + "\n", "reverse bold")
        if item.fold is not None:
            text.append(f"▸ [{item.seq}] {item.folded} items folded ({item.tokens} tokens): ", "bold yellow")
            text.append(printable(item.content.splitlines()[0] if item.content else "") + "\n", "yellow")
            continue
        pin = "📌 " if item.pinned else ""
        text.append(f"[{item.seq}] {pin}{item.role} · {printable(item.author)} · {item.tokens} tok\n", "bold")
        text.append(printable(item.content) + "\n\n")
    return text


def _runs(runs: list[RunInfo], now: float, used: list[ToolUse]) -> Text:
    """The runs, newest first, each with its tool calls and what let each run (the newest
    ``TRACED_RUNS`` runs')."""
    text = Text()
    calls = allowed.by_run(used)
    for r in reversed(runs):
        took = (r.ended or now) - r.started
        text.append(f"run {r.id:<5}", "bold")
        text.append(f" {r.outcome or 'running':<12}", OUTCOME_STYLE.get(r.outcome, ""))
        text.append(f" {words.clock(r.started)}  {took:6.1f}s  exit {r.exit_code if r.exit_code is not None else '-'}"
                    f"  tokens {r.tokens_in}/{r.tokens_out}  cause {lines.causes(r)}\n")
        if r.error:
            text.append(f"    {printable(r.error.splitlines()[-1])[:150]}\n", "red")
        for u in calls.get(r.id, []):
            text.append(printable(lines.tool_use_line(u)) + "\n", "red" if u.how == allowed.REFUSED or u.denied else "")
    return text or Text("(no runs yet)")

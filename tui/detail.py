"""The detail view of one session: context, memory, resources, triggers, runs, journal."""

from __future__ import annotations

import json
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Label, Sparkline, Static, TabbedContent, TabPane

from procession import humanize
from procession.humanize import printable
from procession.records import RunInfo, SessionDetail
from procession.workspace import Workspace

#: Items of the active context shown; older ones are summarised in one line.
SHOWN_ITEMS = 400
OUTCOME_STYLE = {"ok": "green", "failed": "red", "interrupted": "yellow", "timeout": "magenta",
                 "cancelled": "bright_black", "lost": "red", None: "cyan"}


class Detail(Screen[None]):
    """Everything about one session; Escape goes back to the table."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, ws: Workspace, sid: int) -> None:
        super().__init__()
        self.ws, self.sid = ws, sid
        self.rev = -1

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
        # F1..F10 fit an 80-column terminal: compact, and Ctrl+P is in the help instead
        yield Footer(compact=True, show_command_palette=False)

    async def on_mount(self) -> None:
        await self.reload()

    async def reload(self) -> None:
        detail = await self.ws.show(self.sid)
        if detail.info.rev == self.rev:
            return
        first = self.rev < 0
        self.rev = detail.info.rev
        runs = await self.ws.runs(self.sid, limit=60)
        journal = await self.ws.journal(self.sid, limit=100)
        curve = await self.ws.context_curve(self.sid)
        now = getattr(self.app, "clock", time.time)()  # the monitor's clock, so tests and screenshots are stable
        self.query_one("#summary", Static).update(_summary(detail, now))
        self.query_one("#context-curve", Sparkline).data = curve
        durations = [max((r.ended or now) - r.started, 0.0) for r in runs]
        # a sparkline scales from its lowest to its highest value: say what those are
        self.query_one("#runs-curve", Sparkline).data = durations if len(durations) > 1 else []
        self.query_one("#runs-label", Label).update(
            f"run durations, newest right: {min(durations):.1f}–{max(durations):.1f} s" if len(durations) > 1
            else "run durations: fewer than two runs yet")
        self.query_one("#body-context", Static).update(_context(detail))
        if first:  # the newest messages are what one opens a session to see
            scroll = self.query_one("#tab-context VerticalScroll", VerticalScroll)
            self.call_after_refresh(scroll.scroll_end, animate=False)
        self.query_one("#body-memory", Static).update(
            "\n".join(f"{printable(k)} = {printable(json.dumps(v, ensure_ascii=False))}"
                      for k, v in detail.memory.items()) or "(empty)")
        self.query_one("#body-resources", Static).update(
            "\n".join(f"[{r.id}] {r.kind:<7} {printable(r.uri)}  ({r.mode})" for r in detail.resources) or "(none)")
        self.query_one("#body-triggers", Static).update(
            "\n".join(f"[{t.id}] {printable(t.label)}  {'armed' if t.armed else 'disarmed'}  fired {t.fired}x"
                      f"{', last ' + humanize.clock(t.last_fired) if t.last_fired else ''}"
                      f"{'  (pending)' if t.pending else ''}" for t in detail.info.triggers) or "(none)")
        self.query_one("#body-runs", Static).update(_runs(runs, now))
        self.query_one("#body-journal", Static).update(
            "\n".join(f"{humanize.clock(e.ts)}  {e.actor:<7} {e.call:<9} "
                      f"{printable(json.dumps(e.args, ensure_ascii=False, default=str))[:90]}" for e in journal)
            or "(empty)")


def _summary(d: SessionDetail, now: float) -> Text:
    s = d.info
    text = Text()
    text.append(f"{s.id}  {printable(s.name)}", "bold")
    text.append(f"   agent {printable(s.agent)}   {s.state}{f' ({s.reason})' if s.reason else ''}")
    if not s.armed:
        text.append("   NOT APPROVED: runner and triggers disarmed (A approves)", "bold red")
    text.append(f"\nrunner {printable(s.runner)}   window {s.context_window}   priority {s.priority}")
    text.append(f"\ncontext {s.context_tokens} tokens ({d.tokenizer}), {s.messages} items; history {s.length}")
    if s.parent:
        text.append(f"   forked from {s.parent} at {s.fork_seq}")
    if s.merged_into:
        text.append(f"   merged into {s.merged_into}")
    age = humanize.age(s.last_active, now)
    text.append(f"\ncreated {humanize.clock(s.created)}   last active {'just now' if age == 'now' else age + ' ago'}")
    if s.goal:
        text.append(f"\ngoal: {printable(s.goal)}")
    return text


def _context(d: SessionDetail) -> Text:
    text = Text()
    if d.system:
        text.append("system prompt\n", "bold")
        text.append(printable(d.system) + "\n\n")
    items = d.context
    if len(items) > SHOWN_ITEMS:
        text.append(f"… {len(items) - SHOWN_ITEMS} earlier items not shown (procession show {d.info.id})\n\n", "dim")
        items = items[-SHOWN_ITEMS:]
    for item in items:
        if item.fold is not None:
            text.append(f"▸ [{item.seq}] {item.folded} items folded ({item.tokens} tokens): ", "bold yellow")
            text.append(printable(item.content.splitlines()[0] if item.content else "") + "\n", "yellow")
            continue
        pin = "📌 " if item.pinned else ""
        text.append(f"[{item.seq}] {pin}{item.role} · {printable(item.author)} · {item.tokens} tok\n", "bold")
        text.append(printable(item.content) + "\n\n")
    return text


def _runs(runs: list[RunInfo], now: float) -> Text:
    text = Text()
    for r in reversed(runs):
        took = (r.ended or now) - r.started
        text.append(f"run {r.id:<5}", "bold")
        text.append(f" {r.outcome or 'running':<12}", OUTCOME_STYLE.get(r.outcome, ""))
        text.append(f" {humanize.clock(r.started)}  {took:6.1f}s  exit {r.exit_code if r.exit_code is not None else '-'}"
                    f"  tokens {r.tokens_in}/{r.tokens_out}  cause {','.join(c.get('kind', '?') for c in r.cause)}\n")
        if r.error:
            text.append(f"    {printable(r.error.splitlines()[-1])[:150]}\n", "red")
    return text or Text("(no runs yet)")
